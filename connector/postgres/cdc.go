package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// CDCType is the "postgres-cdc" operator type with its runtime.
var CDCType = operator.Probes(operator.Runs(pgspec.CDCType, func(c pgspec.CDCConfig, _, out *record.Schema) (any, error) {
	return newCDCSource(&c)
}), func(ctx context.Context, c pgspec.CDCConfig, _, _ *record.Schema) error {
	return probeCDC(ctx, &c)
})

// cdcStateName is the operator list state of the postgres-cdc source: one element, a
// cdcState in JSON.
const cdcStateName = "postgres-cdc"

// Phases of the postgres-cdc source.
const (
	phaseSnapshot  = "snapshot"  // reading the table's rows as of the slot's creation
	phaseStreaming = "streaming" // reading the slot's changes
)

const (
	// cdcIdle is how long Emit asks the task to wait when no change is buffered.
	cdcIdle = 5 * time.Millisecond
	// cdcFetch is the most rows one FETCH of the initial snapshot asks for.
	cdcFetch = 1000
	// cdcBuffer is how many decoded changes wait for Emit at most.
	cdcBuffer = 1024
	// cdcReceiveWait bounds one wait for a replication message, so that the receiving
	// goroutine sends a new acknowledgement soon after a checkpoint completes.
	cdcReceiveWait = 100 * time.Millisecond
	// cdcStatusInterval is how often the source tells the server its position unasked
	// (within wal_sender_timeout, by default 60 s).
	cdcStatusInterval = 10 * time.Second
	// cdcCursor is the snapshot's cursor.
	cdcCursor = "goflink_cdc_snapshot"
)

// SQLSTATEs the source tells apart.
const (
	sqlInsufficientPrivilege = "42501"
	sqlDuplicateObject       = "42710"
	sqlObjectInUse           = "55006"
)

// Type OIDs whose text the source reads differently.
const oidBytea = 17

// cdcState is what a checkpoint of the postgres-cdc source holds. Checkpoints are taken only
// in the streaming phase (the snapshot phase declines them). LSN is where a restore starts
// replication: the end of the last transaction whose changes were all emitted (or a position
// the server reported with every transaction before it sent). Skip is how many records of
// the next transaction were emitted already: a restore skips them.
type cdcState struct {
	Phase string `json:"phase"`
	LSN   string `json:"lsn"`
	Skip  int    `json:"skip,omitempty"`
}

// cdcSource is the postgres-cdc source, Flink CDC's PostgreSQL source with the legacy
// (non-incremental) snapshot, in one subtask:
//
//   - On its first start (no restored state) it makes sure the publication exists, creates the
//     replication slot with an exported snapshot, and reads the table as of that snapshot on a
//     second connection (REPEATABLE READ, SET TRANSACTION SNAPSHOT), in chunks of a cursor
//     across Emit calls, as op=insert records. The exported snapshot lives only while the
//     replication connection is idle, so the snapshot is read to its end before replication
//     starts. Checkpoints in this phase are declined (operator.CheckpointDecliner): there is no
//     position to resume a snapshot from. A slot that exists already fails the first attempt
//     (it belongs to another job or a previous run); a later attempt of the same job without a
//     restored checkpoint finds the slot its earlier attempt created, drops it (ending that
//     attempt's session if the server still has it: its application_name, appName, tells it
//     from another job's) and starts over. Close drops the slot during the snapshot phase.
//   - Then it streams the slot's changes from the slot's consistent point (START_REPLICATION,
//     pgoutput protocol 1), decoded by one goroutine that owns the replication connection and
//     hands the changes to Emit through a channel.
//   - A checkpoint holds the position (cdcState). The position is confirmed to the server
//     (standby status update) only when that checkpoint completes, so the slot keeps what a
//     restore may need; a restore starts replication at the checkpoint's position and skips
//     the records of the transaction in progress that were emitted before it.
//
// Values arrive as text and are parsed into the declared types; NULL is the type's zero value
// (records have no nulls). A delete carries the old row's replica identity (the key with the
// default identity; the other columns are zero); an update carries the old row (an
// update_before record) only with REPLICA IDENTITY FULL or when its key changed. TRUNCATE
// fails the task: the publication the source creates does not publish truncates.
type cdcSource struct {
	spec *pgspec.CDCConfig
	*dialer

	ctx  *operator.Context
	out  operator.Output
	list operator.ListState

	restoredID int64
	restored   *cdcState

	phase string
	table tableRef
	cols  []string // the declared columns
	types []record.Type

	// The snapshot phase: the connection reading it (its transaction holds the snapshot),
	// the replication connection idle meanwhile, the slot's consistent point.
	snap     *pgx.Conn
	repl     *pgconn.PgConn
	snapRows int64
	bytea    []bool // per declared column: a bytea, whose text is hex
	startLSN pglogrepl.LSN

	// The streaming phase.
	events  chan cdcEvent
	stop    context.CancelFunc
	wg      sync.WaitGroup
	lsn     pglogrepl.LSN // the state's LSN
	inTxn   bool
	emitted int // records of the current transaction emitted (or skipped) so far
	skip    int // records of the current transaction still to skip (a restore)
	acked   atomic.Uint64
	pending map[int64]pglogrepl.LSN // positions of checkpoints taken, not yet completed
}

// tableRef is the table read: its OID (the relation ID of pgoutput's messages) and name.
type tableRef struct {
	oid  uint32
	name string // schema.table, quoted
}

// cdcConnection is the source's connection fields, in the form the dialer takes.
func cdcConnection(c *pgspec.CDCConfig) *pgspec.SinkConfig {
	return &pgspec.SinkConfig{DSN: c.DSN, PasswordFile: c.PasswordFile, PasswordEnv: c.PasswordEnv}
}

func newCDCSource(c *pgspec.CDCConfig) (*cdcSource, error) {
	if c.Slot == "" || c.Publication == "" || c.Table == "" || len(c.Schema) == 0 {
		return nil, errors.New("postgres-cdc: the configuration lacks the slot, publication, table or schema")
	}
	if _, err := pgspec.TableName(c.Table); err != nil {
		return nil, fmt.Errorf("postgres-cdc: table %q: %w", c.Table, err)
	}
	s := &cdcSource{spec: c, pending: map[int64]pglogrepl.LSN{}}
	s.dialer = newDialer(cdcConnection(c))
	for _, f := range c.Schema {
		switch f.Type {
		case record.Int64, record.Float64, record.Bool, record.String, record.Bytes, record.Timestamp:
		default:
			return nil, fmt.Errorf("postgres-cdc: schema.%s: cannot read a column as %v", f.Name, f.Type)
		}
		s.cols, s.types = append(s.cols, f.Name), append(s.types, f.Type)
	}
	return s, nil
}

// InitializeState registers the state; a restored position is used in Open.
func (s *cdcSource) InitializeState(sc operator.StateContext) error {
	l, err := sc.ListState(cdcStateName, pb.ListDistribution_LIST_DISTRIBUTION_SPLIT)
	if err != nil {
		return fmt.Errorf("postgres-cdc: %w", err)
	}
	s.list, s.restoredID = l, sc.RestoredCheckpointID()
	elems := l.Get()
	switch {
	case len(elems) == 0:
		return nil // a fresh start (or a checkpoint from before this source existed)
	case len(elems) > 1:
		return fmt.Errorf("postgres-cdc: restoring checkpoint %d: %d state elements, want 1", s.restoredID, len(elems))
	}
	var st cdcState
	if err := json.Unmarshal(elems[0], &st); err != nil {
		return fmt.Errorf("postgres-cdc: restoring checkpoint %d: %w", s.restoredID, err)
	}
	if st.Phase != phaseStreaming || st.Skip < 0 {
		return fmt.Errorf("postgres-cdc: restoring checkpoint %d: bad state %+v", s.restoredID, st)
	}
	if _, err := pglogrepl.ParseLSN(st.LSN); err != nil {
		return fmt.Errorf("postgres-cdc: restoring checkpoint %d: lsn %q: %w", s.restoredID, st.LSN, err)
	}
	s.restored = &st
	return nil
}

// sessionParams make the servers' text output of values the same on every connection, and
// what parseText reads.
var sessionParams = map[string]string{"DateStyle": "ISO", "TimeZone": "UTC", "extra_float_digits": "3", "bytea_output": "hex"}

// dialSQL connects a normal session.
func (s *cdcSource) dialSQL() (*pgx.Conn, error) {
	cfg, err := s.config()
	if err != nil {
		return nil, err
	}
	for k, v := range sessionParams {
		cfg.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", s.red.Err(err))
	}
	return conn, nil
}

// dialReplication connects a replication session (replication=database).
func (s *cdcSource) dialReplication() (*pgconn.PgConn, error) {
	cfg, err := s.config()
	if err != nil {
		return nil, err
	}
	pc := cfg.Config
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["application_name"] = s.appName()
	for k, v := range sessionParams {
		pc.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, &pc)
	if err != nil {
		return nil, fmt.Errorf("connect for replication: %w", s.red.Err(err))
	}
	return conn, nil
}

// appName is the application_name of the source's replication sessions,
// "goflink-cdc-<hash of job and operator uid>" (within the 63 bytes the server keeps): a later
// attempt tells its own earlier attempt's session from another job's by it.
func (s *cdcSource) appName() string {
	uid := s.ctx.OperatorUID
	if uid == "" {
		uid = s.ctx.OperatorName
	}
	sum := sha256.Sum256([]byte(s.ctx.JobID + "\x00" + uid))
	return "goflink-cdc-" + hex.EncodeToString(sum[:12])
}

func (s *cdcSource) Open(ctx *operator.Context, out operator.Output) error {
	s.ctx, s.out = ctx, out
	if s.list == nil {
		return errors.New("postgres-cdc: opened without InitializeState")
	}
	conn, err := s.dialSQL()
	if err != nil {
		return fmt.Errorf("postgres-cdc: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			closeConn(conn)
		}
	}()
	if s.table, err = s.lookupTable(conn); err != nil {
		return err
	}
	if err := s.ensurePublication(conn); err != nil {
		return err
	}
	if s.restored != nil {
		lsn, _ := pglogrepl.ParseLSN(s.restored.LSN)
		if err := s.checkSlot(conn, lsn); err != nil {
			return err
		}
		closeConn(conn)
		ok = true
		s.skip = s.restored.Skip
		ctx.Log().Info("postgres-cdc: resuming replication", "slot", s.spec.Slot, "lsn", lsn.String(), "skip", s.skip, "checkpoint_id", s.restoredID)
		return s.startStreaming(lsn)
	}
	if err := s.createSlot(conn); err != nil {
		return err
	}
	ok = true
	return nil
}

// lookupTable resolves the spec's table.
func (s *cdcSource) lookupTable(conn *pgx.Conn) (tableRef, error) {
	parts, _ := pgspec.TableName(s.spec.Table)
	name := pgx.Identifier(parts).Sanitize()
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var oid *uint32
	if err := conn.QueryRow(c, "SELECT to_regclass($1)::oid", name).Scan(&oid); err != nil {
		return tableRef{}, fmt.Errorf("postgres-cdc: looking up table %s: %w", s.spec.Table, s.red.Err(err))
	}
	if oid == nil {
		return tableRef{}, &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true,
			Err: fmt.Errorf("postgres-cdc: table %s does not exist (or the user may not see it)", s.spec.Table)}
	}
	return tableRef{oid: *oid, name: name}, nil
}

// ensurePublication creates the publication for the table unless it exists, and checks that
// it publishes the table.
func (s *cdcSource) ensurePublication(conn *pgx.Conn) error {
	pub := s.spec.Publication
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var exists bool
	if err := conn.QueryRow(c, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return fmt.Errorf("postgres-cdc: looking up publication %s: %w", pub, s.red.Err(err))
	}
	if !exists {
		sql := "CREATE PUBLICATION " + pgx.Identifier{pub}.Sanitize() + " FOR TABLE " + s.table.name + " WITH (publish = 'insert, update, delete')"
		_, err := conn.Exec(c, sql)
		var pe *pgconn.PgError
		switch {
		case err == nil:
			s.ctx.Log().Info("postgres-cdc: created publication", "publication", pub, "table", s.spec.Table)
			return nil
		case errors.As(err, &pe) && pe.Code == sqlDuplicateObject:
			// Created meanwhile: check it as one that existed.
		case errors.As(err, &pe) && pe.Code == sqlInsufficientPrivilege:
			return fmt.Errorf("postgres-cdc: publication %s does not exist and the user may not create it (%s): "+
				"have the table's owner run CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update, delete'), or name an existing one in the field publication",
				pub, s.red.String(pe.Message), pub, s.table.name)
		default:
			return fmt.Errorf("postgres-cdc: creating publication %s: %w", pub, s.red.Err(err))
		}
	}
	var published bool
	err := conn.QueryRow(c, "SELECT EXISTS (SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1 AND r.prrelid = $2) OR EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1 AND puballtables)",
		pub, s.table.oid).Scan(&published)
	if err != nil {
		return fmt.Errorf("postgres-cdc: looking up publication %s: %w", pub, s.red.Err(err))
	}
	if !published {
		return fmt.Errorf("postgres-cdc: publication %s does not publish table %s (ALTER PUBLICATION %s ADD TABLE %s)", pub, s.spec.Table, pub, s.table.name)
	}
	return nil
}

// slotInfo is a replication slot as pg_replication_slots shows it.
type slotInfo struct {
	exists    bool
	activePID *int32
	confirmed pglogrepl.LSN
	plugin    string
	database  string
}

func (s *cdcSource) slot(conn *pgx.Conn) (slotInfo, error) {
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var si slotInfo
	var confirmed, plugin, database *string
	err := conn.QueryRow(c, "SELECT active_pid, confirmed_flush_lsn::text, plugin::text, database::text FROM pg_replication_slots WHERE slot_name = $1",
		s.spec.Slot).Scan(&si.activePID, &confirmed, &plugin, &database)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, nil
	}
	if err != nil {
		return si, fmt.Errorf("postgres-cdc: looking up replication slot %s: %w", s.spec.Slot, s.red.Err(err))
	}
	si.exists = true
	if confirmed != nil {
		si.confirmed, _ = pglogrepl.ParseLSN(*confirmed)
	}
	if plugin != nil {
		si.plugin = *plugin
	}
	if database != nil {
		si.database = *database
	}
	return si, nil
}

// checkSlot checks, for a restore from lsn, that the slot exists and has not confirmed
// anything after lsn (which the server would no longer send), and ends the session of an
// earlier attempt that still holds it.
func (s *cdcSource) checkSlot(conn *pgx.Conn, lsn pglogrepl.LSN) error {
	si, err := s.slot(conn)
	if err != nil {
		return err
	}
	switch {
	case !si.exists:
		return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true, Err: fmt.Errorf(
			"postgres-cdc: replication slot %s does not exist, so the changes after checkpoint %d (lsn %s) are lost: start the job without its state to read the table anew",
			s.spec.Slot, s.restoredID, lsn)}
	case si.plugin != "pgoutput":
		return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true, Err: fmt.Errorf(
			"postgres-cdc: replication slot %s uses the plugin %q, not pgoutput: it is not this source's", s.spec.Slot, si.plugin)}
	case si.confirmed > lsn:
		return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true, Err: fmt.Errorf(
			"postgres-cdc: replication slot %s confirmed lsn %s, after checkpoint %d's lsn %s: the changes in between are gone from the slot "+
				"(restore from the newest checkpoint, or start the job without its state)", s.spec.Slot, si.confirmed, s.restoredID, lsn)}
	}
	if si.activePID == nil {
		return nil
	}
	if err := s.endEarlierSession(conn, si); err != nil {
		return err
	}
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for {
		var active bool
		err := conn.QueryRow(c, "SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)", s.spec.Slot).Scan(&active)
		if err != nil {
			return fmt.Errorf("postgres-cdc: waiting for the session of an earlier attempt to release replication slot %s: %w", s.spec.Slot, s.red.Err(err))
		}
		if !active {
			return nil
		}
		select {
		case <-c.Done():
			return fmt.Errorf("postgres-cdc: the session of an earlier attempt did not release replication slot %s within %v", s.spec.Slot, opTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// createSlot starts the snapshot phase: it creates the slot with an exported snapshot and
// opens the snapshot's cursor on conn, which the source keeps.
func (s *cdcSource) createSlot(conn *pgx.Conn) error {
	si, err := s.slot(conn)
	if err != nil {
		return err
	}
	if si.exists {
		if s.ctx.Attempt == 0 {
			return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true, Err: fmt.Errorf(
				"postgres-cdc: replication slot %s exists already and there is no checkpoint to resume it from: it belongs to another job or a previous run; "+
					"drop it (SELECT pg_drop_replication_slot('%s')) or restore this job from a checkpoint or savepoint", s.spec.Slot, s.spec.Slot)}
		}
		// The slot of an earlier attempt of this job, which failed before a checkpoint
		// completed (the first attempt fails for good on a slot it did not create).
		if err := s.dropSlot(conn, si); err != nil {
			return err
		}
	}
	repl, err := s.dialReplication()
	if err != nil {
		return fmt.Errorf("postgres-cdc: %w", err)
	}
	s.repl = repl
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	res, err := pglogrepl.CreateReplicationSlot(c, repl, s.spec.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return fmt.Errorf("postgres-cdc: creating replication slot %s (the user needs the REPLICATION attribute, and the server wal_level = logical): %w",
			s.spec.Slot, s.red.Err(err))
	}
	if s.startLSN, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
		return fmt.Errorf("postgres-cdc: replication slot %s: consistent point %q: %w", s.spec.Slot, res.ConsistentPoint, err)
	}
	s.phase = phaseSnapshot // from now on Close drops the slot unless the snapshot was read
	s.ctx.Log().Info("postgres-cdc: created replication slot; reading the snapshot", "slot", s.spec.Slot, "lsn", s.startLSN.String(), "table", s.spec.Table)
	for _, sql := range []string{"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "SET TRANSACTION SNAPSHOT " + quote(res.SnapshotName)} {
		if _, err := conn.Exec(c, sql); err != nil {
			return fmt.Errorf("postgres-cdc: reading the snapshot of slot %s: %s: %w", s.spec.Slot, sql, s.red.Err(err))
		}
	}
	cols, err := s.tableColumns(conn)
	if err != nil {
		return err
	}
	var sel []string
	s.bytea = make([]bool, len(s.cols))
	for i, name := range s.cols {
		oid, ok := cols[name]
		if !ok {
			return s.missingColumn(name)
		}
		s.bytea[i] = oid == oidBytea
		sel = append(sel, pgx.Identifier{name}.Sanitize()+"::text")
	}
	sql := "DECLARE " + cdcCursor + " NO SCROLL CURSOR FOR SELECT " + strings.Join(sel, ", ") + " FROM " + s.table.name
	if _, err := conn.Exec(c, sql); err != nil {
		return fmt.Errorf("postgres-cdc: reading the snapshot of table %s: %w", s.spec.Table, s.red.Err(err))
	}
	s.snap = conn
	return nil
}

// tableColumns are the table's columns and their type OIDs.
func (s *cdcSource) tableColumns(conn *pgx.Conn) (map[string]uint32, error) {
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rows, err := conn.Query(c, "SELECT attname::text, atttypid::oid FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped", s.table.oid)
	if err != nil {
		return nil, fmt.Errorf("postgres-cdc: columns of table %s: %w", s.spec.Table, s.red.Err(err))
	}
	cols := map[string]uint32{}
	var name string
	var oid uint32
	_, err = pgx.ForEachRow(rows, []any{&name, &oid}, func() error { cols[name] = oid; return nil })
	if err != nil {
		return nil, fmt.Errorf("postgres-cdc: columns of table %s: %w", s.spec.Table, s.red.Err(err))
	}
	return cols, nil
}

func (s *cdcSource) missingColumn(name string) error {
	return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true,
		Err: fmt.Errorf("postgres-cdc: schema.%s: table %s has no column %q", name, s.spec.Table, name)}
}

// dropSlot drops a slot an earlier attempt left, ending the session that still uses it.
func (s *cdcSource) dropSlot(conn *pgx.Conn, si slotInfo) error {
	if err := s.endEarlierSession(conn, si); err != nil {
		return err
	}
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for {
		_, err := conn.Exec(c, "SELECT pg_drop_replication_slot($1) FROM pg_replication_slots WHERE slot_name = $1", s.spec.Slot)
		if err == nil {
			s.ctx.Log().Info("postgres-cdc: dropped the replication slot of an earlier attempt", "slot", s.spec.Slot, "attempt", s.ctx.Attempt)
			return nil
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != sqlObjectInUse { // in use: the session is ending
			return fmt.Errorf("postgres-cdc: dropping replication slot %s of an earlier attempt: %w", s.spec.Slot, s.red.Err(err))
		}
		select {
		case <-c.Done():
			return fmt.Errorf("postgres-cdc: dropping replication slot %s of an earlier attempt: %w", s.spec.Slot, s.red.Err(err))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// endEarlierSession ends the session that uses the slot, if any, when it is an earlier
// attempt's of this source (a TaskManager the server has not noticed is gone); a session of
// another application is another job's, and an error.
func (s *cdcSource) endEarlierSession(conn *pgx.Conn, si slotInfo) error {
	if si.activePID == nil {
		return nil
	}
	pid := *si.activePID
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var app string
	err := conn.QueryRow(c, "SELECT coalesce((SELECT application_name FROM pg_stat_activity WHERE pid = $1), '')", pid).Scan(&app)
	if err != nil {
		return fmt.Errorf("postgres-cdc: looking up the session (pid %d) that uses replication slot %s: %w", pid, s.spec.Slot, s.red.Err(err))
	}
	if app != "" && app != s.appName() {
		return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true, Err: fmt.Errorf(
			"postgres-cdc: replication slot %s is in use by another session (pid %d, application_name %q), not an earlier attempt of this source: it belongs to another job",
			s.spec.Slot, pid, app)}
	}
	if _, err := conn.Exec(c, "SELECT pg_terminate_backend($1)", pid); err != nil {
		return fmt.Errorf("postgres-cdc: ending the session (pid %d) of an earlier attempt, which uses replication slot %s: %w", pid, s.spec.Slot, s.red.Err(err))
	}
	s.ctx.Log().Info("postgres-cdc: ended the session of an earlier attempt", "slot", s.spec.Slot, "pid", pid)
	return nil
}

// DeclineCheckpoint declines the checkpoints of the snapshot phase: a restore could not
// resume the snapshot (its exported snapshot is gone with the connection).
func (s *cdcSource) DeclineCheckpoint(int64) string {
	if s.phase != phaseSnapshot {
		return ""
	}
	return fmt.Sprintf("postgres-cdc is reading the initial snapshot of table %s (%d rows so far), which a restore cannot resume; checkpoints resume after it",
		s.spec.Table, s.snapRows)
}

func (s *cdcSource) Emit(limit int) (int, time.Duration, bool, error) {
	if s.phase == phaseSnapshot {
		return s.emitSnapshot(limit)
	}
	return s.emitChanges(limit)
}

// emitSnapshot emits the next rows of the snapshot; after the last it starts streaming.
func (s *cdcSource) emitSnapshot(limit int) (int, time.Duration, bool, error) {
	want := min(max(limit, 1), cdcFetch)
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rows, err := s.snap.Query(c, "FETCH FORWARD "+strconv.Itoa(want)+" FROM "+cdcCursor)
	if err != nil {
		return 0, 0, false, fmt.Errorf("postgres-cdc: reading the snapshot of table %s: %w", s.spec.Table, s.red.Err(err))
	}
	n := 0
	row := make(record.Row, len(s.cols)+1)
	row[0] = record.StringValue(pgspec.OpInsert)
	for rows.Next() {
		raw := rows.RawValues()
		for i := range s.cols {
			v, err := s.parse(i, raw[i], raw[i] == nil, s.bytea[i])
			if err != nil {
				rows.Close()
				return n, 0, false, err
			}
			row[i+1] = v
		}
		if err := s.out.Emit(row); err != nil {
			rows.Close()
			return n, 0, false, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, 0, false, fmt.Errorf("postgres-cdc: reading the snapshot of table %s: %w", s.spec.Table, s.red.Err(err))
	}
	s.snapRows += int64(n)
	if n == want {
		return n, 0, false, nil
	}
	// The end: the snapshot's transaction ends, and replication starts where it was taken.
	if _, err := s.snap.Exec(c, "COMMIT"); err != nil {
		return n, 0, false, fmt.Errorf("postgres-cdc: ending the snapshot of table %s: %w", s.spec.Table, s.red.Err(err))
	}
	closeConn(s.snap)
	s.snap = nil
	s.ctx.Log().Info("postgres-cdc: read the snapshot; streaming changes", "table", s.spec.Table, "rows", s.snapRows, "slot", s.spec.Slot, "lsn", s.startLSN.String())
	if err := s.startStreaming(s.startLSN); err != nil {
		return n, 0, false, err
	}
	return n, 0, false, nil
}

// startStreaming starts replication from lsn and the goroutine that receives it.
func (s *cdcSource) startStreaming(lsn pglogrepl.LSN) error {
	if s.repl == nil {
		repl, err := s.dialReplication()
		if err != nil {
			return fmt.Errorf("postgres-cdc: %w", err)
		}
		s.repl = repl
	}
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := pglogrepl.StartReplication(c, s.repl, s.spec.Slot, lsn, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names " + quote(s.spec.Publication)},
	})
	if err != nil {
		return fmt.Errorf("postgres-cdc: starting replication from slot %s at %s: %w", s.spec.Slot, lsn, s.red.Err(err))
	}
	s.phase, s.lsn = phaseStreaming, lsn
	s.acked.Store(uint64(lsn))
	s.events = make(chan cdcEvent, cdcBuffer)
	rctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	r := &receiver{src: s, conn: s.repl, events: s.events, sent: lsn, rels: map[uint32]*relation{}}
	s.repl = nil // the receiver owns it now
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.run(rctx)
	}()
	return nil
}

// emitChanges emits the decoded changes that are buffered.
func (s *cdcSource) emitChanges(limit int) (int, time.Duration, bool, error) {
	n := 0
	for n < limit {
		var ev cdcEvent
		select {
		case ev = <-s.events:
		default:
			if n == 0 {
				return 0, cdcIdle, false, nil
			}
			return n, 0, false, nil
		}
		switch ev.kind {
		case evError:
			return n, 0, false, ev.err
		case evBegin:
			s.inTxn, s.emitted = true, 0
		case evCommit:
			if s.skip > 0 {
				return n, 0, false, fmt.Errorf("postgres-cdc: the restored checkpoint %d skips %d more records than its transaction has", s.restoredID, s.skip)
			}
			s.inTxn, s.emitted, s.lsn = false, 0, ev.lsn
		case evIdle:
			if !s.inTxn && s.skip == 0 && ev.lsn > s.lsn {
				s.lsn = ev.lsn
			}
		case evRow:
			s.emitted++
			if s.skip > 0 {
				s.skip--
				continue
			}
			if err := s.out.Emit(ev.row); err != nil {
				return n, 0, false, err
			}
			n++
		}
	}
	return n, 0, false, nil
}

// SnapshotState stores the position (only in the streaming phase: the snapshot phase
// declines checkpoints).
func (s *cdcSource) SnapshotState(id int64) error {
	if s.phase != phaseStreaming {
		return fmt.Errorf("postgres-cdc: checkpoint %d in the snapshot phase (it should have been declined)", id)
	}
	st := cdcState{Phase: phaseStreaming, LSN: s.lsn.String()}
	if s.inTxn {
		st.Skip = s.emitted
	}
	b, _ := json.Marshal(st) // strings and an int cannot fail
	s.list.Update([][]byte{b})
	s.pending[id] = s.lsn
	return nil
}

// NotifyCheckpointComplete confirms the position of the newest completed checkpoint to the
// server (the receiver sends it): the slot may drop the WAL before it.
func (s *cdcSource) NotifyCheckpointComplete(id int64) error {
	var newest int64 = -1
	var lsn pglogrepl.LSN
	for cp, l := range s.pending {
		if cp <= id {
			if cp > newest {
				newest, lsn = cp, l
			}
			delete(s.pending, cp)
		}
	}
	if newest >= 0 && uint64(lsn) > s.acked.Load() {
		s.acked.Store(uint64(lsn))
	}
	return nil
}

// NotifyCheckpointAborted forgets the aborted checkpoint's position.
func (s *cdcSource) NotifyCheckpointAborted(id int64) error {
	delete(s.pending, id)
	return nil
}

// Close stops the receiver and closes the connections. A slot whose snapshot was not read to
// its end is dropped: no checkpoint can resume it.
func (s *cdcSource) Close() error {
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
	var err error
	if s.phase == phaseSnapshot && s.repl != nil {
		// The slot's session can drop it (it is idle: the snapshot was being read).
		c, cancel := context.WithTimeout(context.Background(), opTimeout)
		if e := pglogrepl.DropReplicationSlot(c, s.repl, s.spec.Slot, pglogrepl.DropReplicationSlotOptions{}); e != nil {
			err = fmt.Errorf("postgres-cdc: dropping replication slot %s, whose snapshot was not read to its end: %w", s.spec.Slot, s.red.Err(e))
		}
		cancel()
	}
	if s.snap != nil {
		closeConn(s.snap)
		s.snap = nil
	}
	if s.repl != nil {
		c, cancel := context.WithTimeout(context.Background(), opTimeout)
		_ = s.repl.Close(c) // a connection that fails to close is gone either way
		cancel()
		s.repl = nil
	}
	return err
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = c.Close(ctx) // a connection that fails to close is gone either way
}

// parse reads the text of declared column i (nil for NULL, the zero value).
func (s *cdcSource) parse(i int, text []byte, null, bytea bool) (record.Value, error) {
	if null {
		return record.Value{}, nil
	}
	v, err := parseText(string(text), s.types[i], bytea)
	if err != nil {
		return record.Value{}, operator.EvalError(s.ctx.OperatorName, fmt.Errorf("postgres-cdc: column %s: %w", s.cols[i], err))
	}
	return v, nil
}

// timeLayouts are the ISO text forms of timestamptz (TimeZone UTC), timestamp and date.
var timeLayouts = []string{"2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999Z07:00:00",
	"2006-01-02 15:04:05.999999999", "2006-01-02"}

// parseText parses PostgreSQL's text output of a value (DateStyle ISO, TimeZone UTC) as t.
func parseText(text string, t record.Type, bytea bool) (record.Value, error) {
	switch t {
	case record.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return record.Value{}, fmt.Errorf("want an int64, got %q", text)
		}
		return record.IntValue(n), nil
	case record.Float64:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return record.Value{}, fmt.Errorf("want a float64, got %q", text)
		}
		return record.FloatValue(f), nil
	case record.Bool:
		switch text {
		case "t", "true":
			return record.BoolValue(true), nil
		case "f", "false":
			return record.BoolValue(false), nil
		}
		return record.Value{}, fmt.Errorf("want a bool, got %q", text)
	case record.String:
		return record.StringValue(text), nil
	case record.Bytes:
		if !bytea {
			return record.BytesValue([]byte(text)), nil
		}
		h, ok := strings.CutPrefix(text, `\x`)
		b, err := hex.DecodeString(h)
		if !ok || err != nil {
			return record.Value{}, fmt.Errorf("want bytea in hex (bytea_output = hex), got %q", text)
		}
		return record.BytesValue(b), nil
	case record.Timestamp:
		for _, l := range timeLayouts {
			if ts, err := time.Parse(l, text); err == nil {
				return record.TimeValue(ts), nil
			}
		}
		return record.Value{}, fmt.Errorf("want a timestamp, got %q", text)
	}
	return record.Value{}, fmt.Errorf("cannot read a column as %v", t)
}

// Kinds of cdcEvent.
const (
	evBegin  = iota + 1 // a transaction begins
	evRow               // a record of a change
	evCommit            // a transaction ends at lsn
	evIdle              // the server sent everything before lsn
	evError             // replication failed
)

// cdcEvent is what the receiver hands to Emit.
type cdcEvent struct {
	kind int
	row  record.Row // evRow: op, then the declared columns (owned by the event)
	lsn  pglogrepl.LSN
	err  error
}

// relation is what a Relation message said of the table: the position of each declared
// column in the tuples, and whether it is a bytea.
type relation struct {
	pos   []int
	bytea []bool
}

// receiver owns the replication connection: it receives and decodes the stream, answers the
// server's keepalives and sends the confirmed position (src.acked) as standby status
// updates. It stops when its context ends, or after handing an error to Emit.
type receiver struct {
	src    *cdcSource
	conn   *pgconn.PgConn
	events chan<- cdcEvent
	rels   map[uint32]*relation
	inTxn  bool
	sent   pglogrepl.LSN // the position last sent to the server
	next   time.Time     // when the next unasked status update is due
	idle   pglogrepl.LSN // the last evIdle position handed on
}

func (r *receiver) run(ctx context.Context) {
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.conn.Close(c) // a connection that fails to close is gone either way
		cancel()
	}()
	if err := r.loop(ctx); err != nil && ctx.Err() == nil {
		select {
		case r.events <- cdcEvent{kind: evError, err: err}:
		case <-ctx.Done():
		}
	}
}

func (r *receiver) loop(ctx context.Context) error {
	s := r.src
	r.next = time.Now().Add(cdcStatusInterval)
	for {
		if err := r.status(false); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, cdcReceiveWait)
		msg, err := r.conn.ReceiveMessage(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && pgconn.Timeout(err):
			continue
		case err != nil:
			return fmt.Errorf("postgres-cdc: replication from slot %s: %w", s.spec.Slot, s.red.Err(err))
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("postgres-cdc: replication from slot %s: %w", s.spec.Slot, s.red.Err(pgconn.ErrorResponseToPgError(m)))
		case *pgproto3.CopyData:
			if err := r.copyData(ctx, m.Data); err != nil {
				return err
			}
		}
	}
}

// status sends a standby status update with the confirmed position when it advanced, when
// one is due, or when the server asked (force).
func (r *receiver) status(force bool) error {
	acked := pglogrepl.LSN(r.src.acked.Load())
	if !force && acked <= r.sent && time.Now().Before(r.next) {
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: acked, WALFlushPosition: acked, WALApplyPosition: acked})
	if err != nil {
		return fmt.Errorf("postgres-cdc: sending the position to the server: %w", r.src.red.Err(err))
	}
	r.sent, r.next = acked, time.Now().Add(cdcStatusInterval)
	return nil
}

// hand gives an event to Emit, answering the server meanwhile: with Emit slow (backpressure)
// the server must still hear from the source within its wal_sender_timeout.
func (r *receiver) hand(ctx context.Context, ev cdcEvent) error {
	select {
	case r.events <- ev:
		return nil
	default:
	}
	for {
		select {
		case r.events <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cdcReceiveWait):
			if err := r.status(false); err != nil {
				return err
			}
		}
	}
}

func (r *receiver) copyData(ctx context.Context, data []byte) error {
	s := r.src
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("postgres-cdc: keepalive: %w", err)
		}
		if !r.inTxn && ka.ServerWALEnd > r.idle {
			select {
			case r.events <- cdcEvent{kind: evIdle, lsn: ka.ServerWALEnd}:
				r.idle = ka.ServerWALEnd
			default: // Emit is behind: a later keepalive says the same
			}
		}
		if ka.ReplyRequested {
			return r.status(true)
		}
		return nil
	case pglogrepl.XLogDataByteID:
	default:
		return nil
	}
	xld, err := pglogrepl.ParseXLogData(data[1:])
	if err != nil {
		return fmt.Errorf("postgres-cdc: replication message: %w", err)
	}
	msg, err := pglogrepl.Parse(xld.WALData)
	if err != nil {
		return fmt.Errorf("postgres-cdc: decoding a pgoutput message at %s: %w", xld.WALStart, err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		if m.RelationID == s.table.oid {
			rel, err := r.relation(m)
			if err != nil {
				return err
			}
			r.rels[m.RelationID] = rel
		}
	case *pglogrepl.BeginMessage:
		r.inTxn = true
		return r.hand(ctx, cdcEvent{kind: evBegin})
	case *pglogrepl.CommitMessage:
		r.inTxn = false
		return r.hand(ctx, cdcEvent{kind: evCommit, lsn: m.TransactionEndLSN})
	case *pglogrepl.InsertMessage:
		return r.change(ctx, m.RelationID, pgspec.OpInsert, m.Tuple, nil)
	case *pglogrepl.UpdateMessage:
		if m.OldTuple != nil {
			if err := r.change(ctx, m.RelationID, pgspec.OpUpdateBefore, m.OldTuple, nil); err != nil {
				return err
			}
		}
		return r.change(ctx, m.RelationID, pgspec.OpUpdateAfter, m.NewTuple, m.OldTuple)
	case *pglogrepl.DeleteMessage:
		return r.change(ctx, m.RelationID, pgspec.OpDelete, m.OldTuple, nil)
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			if id == s.table.oid {
				return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true, Err: fmt.Errorf(
					"postgres-cdc: table %s was truncated, which the source cannot emit as changes; publication %s publishes truncates: "+
						"create it WITH (publish = 'insert, update, delete') (as the source does) and start the job anew", s.spec.Table, s.spec.Publication)}
			}
		}
	}
	return nil
}

// relation maps the declared columns to a Relation message's.
func (r *receiver) relation(m *pglogrepl.RelationMessage) (*relation, error) {
	s := r.src
	rel := &relation{pos: make([]int, len(s.cols)), bytea: make([]bool, len(s.cols))}
	for i, name := range s.cols {
		rel.pos[i] = -1
		for j, c := range m.Columns {
			if c.Name == name {
				rel.pos[i], rel.bytea[i] = j, c.DataType == oidBytea
				break
			}
		}
		if rel.pos[i] < 0 {
			return nil, s.missingColumn(name)
		}
	}
	return rel, nil
}

// change hands on the record of one change of the table (others are ignored).
func (r *receiver) change(ctx context.Context, relID uint32, op string, tuple, old *pglogrepl.TupleData) error {
	s := r.src
	if relID != s.table.oid {
		return nil
	}
	rel := r.rels[relID]
	if rel == nil {
		return fmt.Errorf("postgres-cdc: a change of table %s before its relation message", s.spec.Table)
	}
	if tuple == nil {
		return fmt.Errorf("postgres-cdc: a %s of table %s without its row", op, s.spec.Table)
	}
	row := make(record.Row, len(s.cols)+1)
	row[0] = record.StringValue(op)
	for i, j := range rel.pos {
		if j >= len(tuple.Columns) {
			return fmt.Errorf("postgres-cdc: a %s of table %s has %d columns, its relation more", op, s.spec.Table, len(tuple.Columns))
		}
		c := tuple.Columns[j]
		if c.DataType == pglogrepl.TupleDataTypeToast {
			if old == nil || j >= len(old.Columns) || old.Columns[j].DataType != pglogrepl.TupleDataTypeText {
				return &operator.UserError{Operator: s.ctx.OperatorName, Unrecoverable: true, Err: fmt.Errorf(
					"postgres-cdc: column %s of an update of table %s is an unchanged TOASTed value, which the server does not send: "+
						"ALTER TABLE %s REPLICA IDENTITY FULL so that updates carry the old row", s.cols[i], s.spec.Table, s.table.name)}
			}
			c = old.Columns[j]
		}
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			row[i+1] = record.Value{}
		case pglogrepl.TupleDataTypeText:
			v, err := s.parse(i, c.Data, false, rel.bytea[i])
			if err != nil {
				return err
			}
			row[i+1] = v
		default:
			return fmt.Errorf("postgres-cdc: column %s of table %s came as %q data, want text", s.cols[i], s.spec.Table, c.DataType)
		}
	}
	return r.hand(ctx, cdcEvent{kind: evRow, row: row})
}

var (
	_ operator.Source             = (*cdcSource)(nil)
	_ operator.Stateful           = (*cdcSource)(nil)
	_ operator.Snapshotter        = (*cdcSource)(nil)
	_ operator.CheckpointListener = (*cdcSource)(nil)
	_ operator.CheckpointDecliner = (*cdcSource)(nil)
)
