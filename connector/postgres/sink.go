package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// opTimeout bounds one operation against the server: connecting, sending a batch, preparing,
// committing or rolling back a transaction, listing prepared transactions.
const opTimeout = 2 * time.Minute

// ErrDataLoss is wrapped by the error of an exactly-once commit that found its prepared
// transaction rolled back (by hand, or by another process): the records of that checkpoint
// are lost. It is unrecoverable: a restart fails the same way.
var ErrDataLoss = errors.New("postgres prepared transaction rolled back before its commit: data loss")

// sqlUndefinedObject is the SQLSTATE of COMMIT PREPARED or ROLLBACK PREPARED naming a
// transaction that is not prepared (any more).
const sqlUndefinedObject = "42704"

// newSink builds the sink of spec {type: postgres}.
func newSink(c *pgspec.SinkConfig, in *record.Schema) (operator.Operator, error) {
	w, err := newWriter(c, in)
	if err != nil {
		return nil, fmt.Errorf("postgres sink: %w", err)
	}
	d := newDialer(c)
	switch c.DeliveryGuarantee {
	case pgspec.ExactlyOnce:
		s := &txnSink{dialer: d, w: w, lockTimeout: ownLockTimeout}
		s.Bind("postgres sink", s)
		return s, nil
	case "", pgspec.AtLeastOnce:
		return &plainSink{dialer: d, w: w}, nil
	default:
		return nil, fmt.Errorf("postgres sink: unknown delivery guarantee %q (want exactly-once or at-least-once)", c.DeliveryGuarantee)
	}
}

// newDialer returns the dialer of a connection's fields (the sink's, or the source's in a
// SinkConfig), its redactor knowing the DSN's password.
func newDialer(c *pgspec.SinkConfig) *dialer {
	return &dialer{spec: c, red: pgspec.NewRedactor(pgspec.DSNPassword(c.DSN))}
}

// dialer opens connections with the spec's DSN and password.
type dialer struct {
	spec *pgspec.SinkConfig
	red  *pgspec.Redactor // knows the password once dial read it
}

// dial connects to the server within opTimeout (dialContext).
func (d *dialer) dial() (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return d.dialContext(ctx)
}

// dialContext connects to the server (with config).
func (d *dialer) dialContext(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := d.config()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", d.red.Err(err))
	}
	return conn, nil
}

// config is the configuration dial connects with. The password comes from the DSN, else
// password-file, else password-env, read now (on the TaskManager).
func (d *dialer) config() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(d.spec.DSN)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", d.red.Err(err))
	}
	switch {
	case d.spec.PasswordFile != "":
		b, err := os.ReadFile(d.spec.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("password-file: %w", err)
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
	case d.spec.PasswordEnv != "":
		pw, ok := os.LookupEnv(d.spec.PasswordEnv)
		if !ok {
			return nil, fmt.Errorf("password-env: the environment variable %s is not set", d.spec.PasswordEnv)
		}
		cfg.Password = pw
	}
	d.red = pgspec.NewRedactor(pgspec.DSNPassword(d.spec.DSN), cfg.Password)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "goflink"
	}
	return cfg, nil
}

// exec runs one statement with a timeout, its error redacted.
func (d *dialer) exec(conn *pgx.Conn, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, sql, args...)
	return d.red.Err(err)
}

// writer buffers rows and sends them in batches into the transaction a connection is in:
// by COPY in mode insert, as pipelined upserts in mode upsert (one statement per row, so a
// key repeated within a batch updates in order).
//
// With an op field (pgspec.SinkConfig.OpField) a record is a change: a delete deletes its
// key's row, an update_before is skipped, the others are upserted.
type writer struct {
	in     *record.Schema
	table  pgx.Identifier
	cols   []string      // the columns written: the input's fields but the op field
	fields []int         // the input field of each column
	types  []record.Type // the type of each column
	upsert string        // the upsert statement; "" in mode insert
	batch  int
	rows   []record.Row // buffered input rows (copies)

	opField string // the op field's name; "" for none
	op      int    // the op field's index in the input; -1 for none
	del     string // the delete statement (with an op field)
	keys    []int  // the key columns' indexes in cols (with an op field)
}

func newWriter(c *pgspec.SinkConfig, in *record.Schema) (*writer, error) {
	parts, err := pgspec.TableName(c.Table)
	if err != nil {
		return nil, fmt.Errorf("table %q: %w", c.Table, err)
	}
	table := pgx.Identifier(parts)
	w := &writer{in: in, table: table, batch: max(c.BatchSize, 1), op: -1}
	for i, f := range in.Fields() {
		if c.OpField != "" && f.Name == c.OpField {
			if f.Type != record.String {
				return nil, fmt.Errorf("op-field %q is %s, want a string", f.Name, f.Type)
			}
			w.opField, w.op = f.Name, i
			continue
		}
		w.cols, w.fields, w.types = append(w.cols, f.Name), append(w.fields, i), append(w.types, f.Type)
	}
	if c.OpField != "" && w.op < 0 {
		return nil, fmt.Errorf("op-field %q is no field of the input %v", c.OpField, in)
	}
	switch c.Mode {
	case "", pgspec.ModeInsert:
		if w.op >= 0 {
			return nil, errors.New("op-field needs mode upsert")
		}
	case pgspec.ModeUpsert:
		if len(c.Key) == 0 {
			return nil, errors.New("mode upsert needs a key")
		}
		for _, k := range c.Key {
			i := slices.Index(w.cols, k)
			if i < 0 {
				return nil, fmt.Errorf("key column %q is no field of the input %v", k, in)
			}
			w.keys = append(w.keys, i)
		}
		w.upsert = upsertSQL(table, w.cols, c.Key)
		if w.op >= 0 {
			w.del = deleteSQL(table, c.Key)
		}
	default:
		return nil, fmt.Errorf("unknown mode %q (want insert or upsert)", c.Mode)
	}
	return w, nil
}

// upsertSQL is INSERT INTO table (cols) VALUES ($1, …) ON CONFLICT (key) DO UPDATE SET the
// other columns (DO NOTHING when every column is in the key).
func upsertSQL(table pgx.Identifier, cols, key []string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + table.Sanitize() + " (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c}.Sanitize())
	}
	b.WriteString(") VALUES (")
	for i := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1))
	}
	b.WriteString(") ON CONFLICT (")
	for i, k := range key {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{k}.Sanitize())
	}
	b.WriteString(") DO ")
	var set []string
	for _, c := range cols {
		if !slices.Contains(key, c) {
			q := pgx.Identifier{c}.Sanitize()
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	if len(set) == 0 {
		b.WriteString("NOTHING")
	} else {
		b.WriteString("UPDATE SET " + strings.Join(set, ", "))
	}
	return b.String()
}

// deleteSQL is DELETE FROM table WHERE k1 = $1 AND ….
func deleteSQL(table pgx.Identifier, key []string) string {
	var b strings.Builder
	b.WriteString("DELETE FROM " + table.Sanitize() + " WHERE ")
	for i, k := range key {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(pgx.Identifier{k}.Sanitize() + " = $" + strconv.Itoa(i+1))
	}
	return b.String()
}

// add buffers a copy of row (rows are borrowed). With an op field an update_before is
// dropped, and a kind of change that is none of the four an error.
func (w *writer) add(row record.Row) error {
	if w.op >= 0 {
		switch op := row[w.op].Str(); op {
		case pgspec.OpInsert, pgspec.OpUpdateAfter, pgspec.OpDelete:
		case pgspec.OpUpdateBefore:
			return nil
		default:
			return fmt.Errorf("op-field %q: unknown kind of change %q (want %s, %s, %s or %s)",
				w.opField, op, pgspec.OpInsert, pgspec.OpUpdateBefore, pgspec.OpUpdateAfter, pgspec.OpDelete)
		}
	}
	w.rows = append(w.rows, row.Clone())
	return nil
}

// hasDelete says one of the buffered rows is a delete.
func (w *writer) hasDelete() bool { return w.op >= 0 && slices.ContainsFunc(w.rows, w.isDelete) }

// isDelete says a buffered row is a delete.
func (w *writer) isDelete(row record.Row) bool {
	return w.op >= 0 && row[w.op].Str() == pgspec.OpDelete
}

// values are the column values of a row as pgx takes them; only the key's for a delete.
func (w *writer) values(row record.Row) []any {
	vals := make([]any, len(w.types))
	for i, t := range w.types {
		v := row[w.fields[i]]
		switch t {
		case record.Int64:
			vals[i] = v.Int()
		case record.Float64:
			vals[i] = v.Float()
		case record.Bool:
			vals[i] = v.Bool()
		case record.String:
			vals[i] = v.Str()
		case record.Bytes:
			vals[i] = []byte(v.Str())
		case record.Timestamp:
			vals[i] = v.Time()
		case record.Map:
			vals[i] = v.Map()
		default:
			vals[i] = v.Format(t)
		}
	}
	if w.isDelete(row) {
		keys := make([]any, len(w.keys))
		for i, k := range w.keys {
			keys[i] = vals[k]
		}
		return keys
	}
	return vals
}

// due says a batch is full: len(rows) reached a multiple of the batch size (so that a writer
// that cannot send yet checks again only a batch later).
func (w *writer) due() bool { return len(w.rows) >= w.batch && len(w.rows)%w.batch == 0 }

// send writes the buffered rows into conn's transaction. The rows stay buffered if it fails.
func (w *writer) send(conn *pgx.Conn) error {
	if len(w.rows) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var err error
	if w.upsert == "" {
		vals := make([][]any, len(w.rows))
		for i, r := range w.rows {
			vals[i] = w.values(r)
		}
		_, err = conn.CopyFrom(ctx, w.table, w.cols, pgx.CopyFromRows(vals))
	} else {
		b := &pgx.Batch{}
		for _, r := range w.rows {
			if w.isDelete(r) {
				b.Queue(w.del, w.values(r)...)
			} else {
				b.Queue(w.upsert, w.values(r)...)
			}
		}
		err = conn.SendBatch(ctx, b).Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("writing %d rows into %s did not finish within %v (is a row locked by another transaction?): %w",
				len(w.rows), w.table.Sanitize(), opTimeout, err)
		}
		return fmt.Errorf("writing %d rows into %s: %w", len(w.rows), w.table.Sanitize(), err)
	}
	w.reset()
	return nil
}

func (w *writer) reset() {
	clear(w.rows)
	w.rows = w.rows[:0]
}

// encode is the binary encoding of rows (record.AppendRow over the input's schema).
func (w *writer) encode(rows []record.Row) []byte {
	var b []byte
	for _, r := range rows {
		b = record.AppendRow(b, w.in, r)
	}
	return b
}

// decode is the rows of an encoding of encode, copied out of b.
func (w *writer) decode(b []byte) ([]record.Row, error) {
	var rows []record.Row
	for len(b) > 0 {
		r := make(record.Row, w.in.Len())
		n, err := record.DecodeRow(b, w.in, r)
		if err != nil {
			return nil, err
		}
		rows, b = append(rows, r.Clone()), b[n:]
	}
	return rows, nil
}

// plainSink is the at-least-once sink: each full batch is committed in its own transaction,
// and so is the rest at the barrier (PrepareSnapshotPreBarrier), so that a checkpoint
// completes only with every record before its barrier committed; without checkpointing rows
// still become visible a batch at a time. A restore writes the records after the checkpoint
// again (duplicate rows in mode insert, the same rows again in mode upsert). EndInput
// commits, so a bounded job's output is complete when it finishes; Close drops what is not
// committed.
type plainSink struct {
	operator.Base
	*dialer
	w     *writer
	conn  *pgx.Conn
	inTxn bool
}

func (s *plainSink) Open(ctx *operator.Context, out operator.Output) error {
	if err := s.Base.Open(ctx, out); err != nil {
		return err
	}
	conn, err := s.dial()
	if err != nil {
		return fmt.Errorf("postgres sink: %w", err)
	}
	s.conn = conn
	return nil
}

func (s *plainSink) Process(row record.Row) error {
	if err := s.w.add(row); err != nil {
		return fmt.Errorf("postgres sink: %w", err)
	}
	if s.w.due() {
		return s.commit()
	}
	return nil
}

func (s *plainSink) send() error {
	if len(s.w.rows) == 0 {
		return nil
	}
	if !s.inTxn {
		if err := s.exec(s.conn, "BEGIN"); err != nil {
			return fmt.Errorf("postgres sink: begin: %w", err)
		}
		s.inTxn = true
	}
	if err := s.w.send(s.conn); err != nil {
		return fmt.Errorf("postgres sink: %w", s.red.Err(err))
	}
	return nil
}

func (s *plainSink) commit() error {
	if err := s.send(); err != nil {
		return err
	}
	if !s.inTxn {
		return nil
	}
	s.inTxn = false
	if err := s.exec(s.conn, "COMMIT"); err != nil {
		return fmt.Errorf("postgres sink: commit: %w", err)
	}
	return nil
}

// PrepareSnapshotPreBarrier commits the records before the barrier that are not yet.
func (s *plainSink) PrepareSnapshotPreBarrier(int64) error { return s.commit() }

// EndInput commits the rest.
func (s *plainSink) EndInput() error { return s.commit() }

// Close rolls back what is not committed and closes the connection.
func (s *plainSink) Close() error {
	if s.conn == nil {
		return nil
	}
	var err error
	if s.inTxn {
		s.inTxn = false
		if e := s.exec(s.conn, "ROLLBACK"); e != nil {
			err = fmt.Errorf("postgres sink: rollback: %w", e)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = s.conn.Close(ctx) // a connection that fails to close is gone either way
	s.conn = nil
	return err
}

// States of a pgTxn.
const (
	txnOpen     = "open"     // rows may have been written; not prepared
	txnPrepared = "prepared" // PREPARE TRANSACTION GID succeeded; XID is its transaction
	txnEmpty    = "empty"    // pre-committed without a row: nothing to commit
)

// pgTxn is one transaction of the exactly-once sink: the records of one subtask between two
// barriers. It is prepared under GID "<prefix>-<subtask>-<nonce>-<seq>": prefix names the
// job and the operator (gidPrefix), nonce this instance of the sink (a restore's
// transactions never reuse an earlier attempt's GIDs), seq counts its transactions.
type pgTxn struct {
	GID   string `json:"gid"`
	State string `json:"state"`
	// XID is the prepared transaction's full ID (xid8, as text): a GID no longer prepared is
	// committed if pg_xact_status says so, and rolled back (data loss) otherwise.
	XID string `json:"xid,omitempty"`
	// Carry are rows of the transaction's checkpoint that it does not hold, encoded
	// (writer.encode): they waited for a row lock of an earlier checkpoint's prepared
	// transaction at the barrier. Its commit hands them to the transaction open then.
	Carry []byte `json:"carry,omitempty"`

	begun bool // BEGIN was sent on the data connection (the live open transaction only)
	wrote bool // rows were written into it (the live open transaction only)
	live  bool // this instance's open transaction (not one restored from state)
}

// txnSink is the exactly-once sink, a TwoPhaseSink over PostgreSQL's prepared transactions:
//
//   - a subtask's records between two barriers go into one transaction on its data
//     connection, begun with its first batch (a transaction without rows is never begun,
//     prepared or committed);
//   - PreCommit (at the barrier) sends the rest and runs PREPARE TRANSACTION: the rows are
//     durable and invisible, and any session can commit them;
//   - Commit is COMMIT PREPARED on a second connection (the data connection is in the next
//     transaction meanwhile; COMMIT PREPARED cannot run inside one). It is idempotent: a GID
//     no longer prepared is looked up by its transaction ID (pg_xact_status), committed is a
//     success and rolled back is ErrDataLoss;
//   - Abort rolls back the open transaction, or a prepared one (ROLLBACK PREPARED);
//   - AbortLingering rolls back the prepared transactions of this sink's subtasks i with
//     i % p == this subtask that no restored state references (prepared by an attempt after
//     the checkpoint it restores from).
//
// While a transaction of an earlier checkpoint is prepared and not committed yet, full batches
// stay buffered here rather than sent: a prepared transaction keeps its row locks until its
// commit, which this task runs when the checkpoint completes; a row of the new transaction
// that waited for one of those locks would block the task, and with it the commit (an
// upserted key, a unique column). The rows go out when the commit is done, or at the next
// barrier, which tries them under a savepoint with a short lock timeout (carryLockTimeout).
// Rows that meet a lock there are not sent, and neither are rows among which is a delete
// (a delete does not wait for a row an earlier prepared transaction inserted: it does not
// see the row and deletes nothing, so it cannot be tried): they go with the barrier's
// transaction as its Carry, in the checkpoint's state, and its commit hands them to the
// transaction open then, ahead of that transaction's own rows. So every row before a barrier is either in a
// prepared transaction the checkpoint holds or in its state, and is committed exactly once,
// one checkpoint later than the others. Carried rows keep their place among the changes of
// their keys: until a pending transaction's carried rows are handed on, a barrier sends
// nothing and carries all its rows, although no lock may hold them (a later change of a
// key must not be written before a carried one); and a completion hands the carried rows of
// the pending transactions that hold no rows on to the open transaction at once (handOn), in
// checkpoint order, so that carried rows are written even while every barrier overtakes the
// previous completion. After the end of input no transaction
// follows the final barrier's: in mode upsert the final checkpoint's completion writes its
// carried rows and commits them at once (a restore that writes them again leaves the same
// rows: each key ends as the last change to it says); in mode insert, where a restore would
// write them twice, a locked row at the final barrier waits up to ownLockTimeout and then
// fails the task, whose restore commits the earlier transaction.
type txnSink struct {
	operator.TwoPhaseSink[*pgTxn]
	*dialer
	w *writer

	data, ctl   *pgx.Conn
	lockTimeout time.Duration // ownLockTimeout (tests shorten it)
	prefix      string        // gidPrefix
	nonce       string
	seq         int
	// carried is how many rows at the front of w.rows committed transactions carried
	// (pgTxn.Carry): the next carried rows go after them, before the rows written since.
	carried int
	// carriers are the pending transactions whose Carry was not handed on yet, oldest first.
	carriers []*pgTxn
	ended    bool // EndInput was called: the next barrier is the final one
}

// gidPrefix is "goflink-<job>-<operator uid>" with characters other than letters, digits,
// '_' and '.' replaced by '_' (a GID is a quoted literal; at most 200 bytes), hashed when long.
func gidPrefix(job, uid string) string {
	p := "goflink-" + sanitizeGID(job) + "-" + sanitizeGID(uid)
	if len(p) > 120 {
		sum := sha256.Sum256([]byte(job + "\x00" + uid))
		p = "goflink-" + hex.EncodeToString(sum[:16])
	}
	return p
}

func sanitizeGID(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

func (s *txnSink) Open(ctx *operator.Context, out operator.Output) error {
	uid := ctx.OperatorUID
	if uid == "" {
		uid = ctx.OperatorName
	}
	s.prefix = gidPrefix(ctx.JobID, uid)
	var n [8]byte
	_, _ = rand.Read(n[:]) // crypto/rand.Read does not fail
	s.nonce = hex.EncodeToString(n[:])
	var err error
	if s.data, err = s.dial(); err != nil {
		return fmt.Errorf("postgres sink: %w", err)
	}
	if s.ctl, err = s.dial(); err != nil {
		return fmt.Errorf("postgres sink: %w", err)
	}
	return s.TwoPhaseSink.Open(ctx, out)
}

// parseGID returns the subtask of one of this sink's GIDs.
func (s *txnSink) parseGID(gid string) (subtask int, ok bool) {
	rest, ok := strings.CutPrefix(gid, s.prefix+"-")
	parts := strings.Split(rest, "-")
	if !ok || len(parts) != 3 {
		return 0, false
	}
	sub, err1 := strconv.Atoi(parts[0])
	_, err2 := hex.DecodeString(parts[1])
	seq, err3 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || sub < 0 || seq < 0 || strconv.Itoa(sub) != parts[0] {
		return 0, false
	}
	return sub, true
}

// BeginTransaction names the next transaction; it is begun on the server with its first rows.
func (s *txnSink) BeginTransaction() (*pgTxn, error) {
	s.seq++
	return &pgTxn{GID: fmt.Sprintf("%s-%d-%s-%d", s.prefix, s.Context().Subtask, s.nonce, s.seq), State: txnOpen, live: true}, nil
}

// Write buffers a row, and sends a full batch unless an earlier transaction awaits its commit.
func (s *txnSink) Write(t *pgTxn, row record.Row) error {
	if err := s.w.add(row); err != nil {
		return err
	}
	if s.w.due() && len(s.Pending()) == 0 {
		return s.send(t, false)
	}
	return nil
}

// send writes the buffered rows into t, beginning it. While an earlier transaction is
// prepared, the rows may wait for its locks: then send waits at most lockTimeout, and with
// tryOnly (the barrier can carry them) it gives up after carryLockTimeout with errLocked,
// the rows still buffered and t as it was before.
func (s *txnSink) send(t *pgTxn, tryOnly bool) error {
	if len(s.w.rows) == 0 {
		return nil
	}
	if !t.live || t.State != txnOpen {
		return fmt.Errorf("rows for transaction %s, which is %s", t.GID, t.State)
	}
	if s.preparedPending() && s.w.hasDelete() {
		// A delete does not wait for a row that an earlier prepared transaction inserted: the
		// row is not visible to it, so it would delete nothing, and the commit of the earlier
		// transaction would bring the row back for good. Only a lock wait shows in time.
		if tryOnly {
			return errUnseen
		}
		// Not reached: while one is prepared, only mode insert's final barrier sends untried,
		// and it has no deletes.
		return errors.New("a delete follows a prepared transaction of an earlier checkpoint whose completion had not reached the task before the final barrier; the restore commits it")
	}
	if !t.begun {
		if err := s.exec(s.data, "BEGIN"); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		t.begun = true
	}
	pending := len(s.Pending()) > 0
	if !pending {
		if err := s.red.Err(s.w.send(s.data)); err != nil {
			return err
		}
		s.carried, t.wrote = 0, true
		return nil
	}
	// The rows may wait for the locks of this sink's own prepared transaction, whose commit
	// only this task can run: give up soon rather than block it.
	timeout := s.lockTimeout
	if tryOnly {
		timeout = carryLockTimeout
	}
	ms := strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)
	if err := s.exec(s.data, "SAVEPOINT goflink_rows; SET LOCAL lock_timeout = "+ms); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	err := s.red.Err(s.w.send(s.data))
	if err == nil {
		s.carried, t.wrote = 0, true
		if err := s.exec(s.data, "SET LOCAL lock_timeout TO DEFAULT; RELEASE SAVEPOINT goflink_rows"); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
		return nil
	}
	if !strings.Contains(err.Error(), "(SQLSTATE "+sqlLockNotAvailable+")") {
		return err
	}
	if tryOnly {
		if err := s.exec(s.data, "ROLLBACK TO SAVEPOINT goflink_rows; RELEASE SAVEPOINT goflink_rows"); err != nil {
			return fmt.Errorf("rollback to savepoint: %w", err)
		}
		return errLocked
	}
	return fmt.Errorf("%w: a row is locked, most likely by this sink's prepared transaction of an earlier checkpoint "+
		"whose completion had not reached the task before the final barrier; the restore commits it", err)
}

// errLocked says rows met a row lock within carryLockTimeout while an earlier transaction
// was prepared; errUnseen that they hold a delete while one is, which may not see a row that
// transaction inserted (see send).
var (
	errLocked = errors.New("a row is locked")
	errUnseen = errors.New("a delete may not see a row of a prepared transaction")
)

// preparedPending says an earlier checkpoint's transaction is prepared and not committed yet.
func (s *txnSink) preparedPending() bool {
	return slices.ContainsFunc(s.Pending(), func(p *pgTxn) bool { return p.State == txnPrepared })
}

// carryLockTimeout is how long a barrier's rows wait for a row lock while an earlier
// checkpoint's transaction is prepared before they are carried (see txnSink); ownLockTimeout
// how long the final barrier's rows wait before the task fails.
const (
	carryLockTimeout = 100 * time.Millisecond
	ownLockTimeout   = 10 * time.Second
)

// sqlLockNotAvailable is the SQLSTATE of a lock wait that reached lock_timeout.
const sqlLockNotAvailable = "55P03"

// PreCommit sends the rest of t's rows and prepares it; rows locked by an earlier prepared
// transaction become t's Carry, and so do all of them while an earlier transaction's carried
// rows wait for its commit (see txnSink).
func (s *txnSink) PreCommit(t *pgTxn) error {
	if len(s.carriers) > 0 {
		s.carry(t, "behind the carried rows of an earlier checkpoint")
	} else {
		switch err := s.send(t, !s.ended || s.w.upsert != ""); {
		case errors.Is(err, errLocked):
			s.carry(t, "locked by an earlier prepared transaction")
		case errors.Is(err, errUnseen):
			s.carry(t, "a delete behind an earlier prepared transaction")
		case err != nil:
			return err
		}
	}
	t.live = false
	if t.begun && !t.wrote {
		// Begun for rows that were all carried: nothing to prepare, so that a prepared
		// transaction always holds rows (handOn relies on it).
		t.begun = false
		if err := s.exec(s.data, "ROLLBACK"); err != nil {
			return fmt.Errorf("rollback of a transaction without rows: %w", err)
		}
	}
	if !t.begun {
		t.State = txnEmpty
		return nil
	}
	t.begun = false
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.data.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&t.XID); err != nil {
		_ = s.exec(s.data, "ROLLBACK") // the error below fails the task; the server drops the transaction with the connection anyway
		return fmt.Errorf("transaction id: %w", s.red.Err(err))
	}
	if err := s.exec(s.data, "PREPARE TRANSACTION "+quote(t.GID)); err != nil {
		// A failed PREPARE rolls the transaction back.
		return fmt.Errorf("prepare transaction %s: %w (max_prepared_transactions must be > 0)", t.GID, err)
	}
	t.State = txnPrepared
	return nil
}

// carry makes the buffered rows t's Carry.
func (s *txnSink) carry(t *pgTxn, why string) {
	if len(s.w.rows) == 0 {
		return
	}
	t.Carry = s.w.encode(s.w.rows)
	s.carriers = append(s.carriers, t)
	s.Context().Log().Debug("rows carried to the next checkpoint: "+why, "rows", len(s.w.rows), "transaction", t.GID)
	s.w.reset()
	s.carried = 0
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// prepared says whether gid is a prepared transaction of the sink's database, and its
// (32-bit) transaction ID.
func (s *txnSink) prepared(gid string) (xid uint32, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var x string
	err = s.ctl.QueryRow(ctx, "SELECT transaction::text FROM pg_prepared_xacts WHERE gid = $1 AND database = current_database()", gid).Scan(&x)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("looking up prepared transaction %s: %w", gid, s.red.Err(err))
	}
	n, err := strconv.ParseUint(x, 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("prepared transaction %s: transaction %q: %w", gid, x, err)
	}
	return uint32(n), true, nil
}

// samePrepared says gid is prepared as t's transaction (not as a later one of the same GID).
func (s *txnSink) samePrepared(t *pgTxn) (bool, error) {
	xid, ok, err := s.prepared(t.GID)
	if err != nil || !ok {
		return false, err
	}
	if t.XID == "" {
		return true, nil
	}
	full, err := strconv.ParseUint(t.XID, 10, 64)
	if err != nil {
		return false, fmt.Errorf("transaction %s: bad transaction id %q", t.GID, t.XID)
	}
	return uint32(full) == xid, nil
}

// Commit commits a prepared transaction (one committed already is a success), then hands
// its carried rows on to the open transaction, behind those handed on before (commits and
// handOn run in checkpoint order, and a carrier never holds prepared rows: its commit cannot
// fail).
func (s *txnSink) Commit(t *pgTxn) error {
	if err := s.commitPrepared(t); err != nil {
		return err
	}
	return s.handOnCarry(t)
}

// handOnCarry puts t's carried rows into the buffer, behind the rows carried before and ahead
// of the open transaction's own, and forgets them in t.
func (s *txnSink) handOnCarry(t *pgTxn) error {
	s.carriers = slices.DeleteFunc(s.carriers, func(c *pgTxn) bool { return c == t })
	if len(t.Carry) == 0 {
		return nil
	}
	rows, err := s.w.decode(t.Carry)
	if err != nil {
		return fmt.Errorf("transaction %s: carried rows: %w", t.GID, err)
	}
	s.w.rows = slices.Insert(s.w.rows, s.carried, rows...)
	s.carried += len(rows)
	t.Carry = nil
	return nil
}

// handOn hands the carried rows of the oldest pending transactions that prepared no rows on
// to the open transaction, in order, before their commits. None of their rows is in the
// database, and no later pending transaction holds a row (while carried rows wait, a barrier
// carries all its rows), so the open transaction, committed only with a checkpoint after all
// of theirs, writes them in their place, ahead of its own rows. A restore from one of their
// checkpoints finds their Carry in its state and hands it on again (the open transaction is
// rolled back then). Without this, while barriers keep overtaking completions, each commit
// would pass the carried rows on to the next carrier and nothing would be written.
func (s *txnSink) handOn() error {
	for _, p := range s.Pending() {
		if p.State == txnPrepared {
			return nil // its carried rows come after its prepared ones: at its commit
		}
		if err := s.handOnCarry(p); err != nil {
			return err
		}
	}
	return nil
}

// commitPrepared commits t's prepared transaction, if it has one.
func (s *txnSink) commitPrepared(t *pgTxn) error {
	switch t.State {
	case txnEmpty:
		return nil
	case txnPrepared:
	default:
		return fmt.Errorf("transaction %s: %w", t.GID, operator.ErrNotCommittable)
	}
	same, err := s.samePrepared(t)
	if err != nil {
		return err
	}
	if same {
		err := s.exec(s.ctl, "COMMIT PREPARED "+quote(t.GID))
		if err == nil {
			return nil
		}
		if !isUndefined(err) {
			return fmt.Errorf("commit prepared %s: %w", t.GID, err)
		}
		// Committed or rolled back meanwhile by another session: the status tells.
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var status *string
	if err := s.ctl.QueryRow(ctx, "SELECT pg_xact_status(($1::text)::xid8)", t.XID).Scan(&status); err != nil {
		return fmt.Errorf("status of transaction %s (%s): %w", t.GID, t.XID, s.red.Err(err))
	}
	switch {
	case status == nil:
		// Older than the server's commit log: it was prepared long ago, and whoever ended it
		// is unknown. A pending transaction of a checkpoint being restored is not that old
		// unless it was committed long ago, so it counts as committed.
		return nil
	case *status == "committed":
		return nil
	case *status == "aborted":
		return fmt.Errorf("transaction %s (%s): %w", t.GID, t.XID, ErrDataLoss)
	default:
		return fmt.Errorf("transaction %s (%s) is %s but not prepared", t.GID, t.XID, *status)
	}
}

// isUndefined says err (redacted: only its text is left) is SQLSTATE 42704, a GID that is not
// prepared.
func isUndefined(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == sqlUndefinedObject
	}
	return err != nil && strings.Contains(err.Error(), "(SQLSTATE "+sqlUndefinedObject+")")
}

// Abort rolls back the live open transaction, a prepared one, or one restored as open that an
// earlier attempt prepared after the checkpoint. It is idempotent.
func (s *txnSink) Abort(t *pgTxn) error {
	if i := slices.Index(s.carriers, t); i >= 0 {
		s.carriers = slices.Delete(s.carriers, i, i+1) // its carried rows end with it
	}
	switch {
	case t.State == txnEmpty:
		return nil
	case t.live:
		s.w.reset()
		t.live = false
		if !t.begun {
			return nil
		}
		t.begun = false
		if err := s.exec(s.data, "ROLLBACK"); err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
		return nil
	}
	// Restored: open (a crashed session's transaction is gone, unless it was prepared after
	// the checkpoint) or prepared.
	same, err := s.samePrepared(t)
	if err != nil || !same {
		return err
	}
	return s.rollbackPrepared(t.GID)
}

func (s *txnSink) rollbackPrepared(gid string) error {
	if err := s.exec(s.ctl, "ROLLBACK PREPARED "+quote(gid)); err != nil && !isUndefined(err) {
		return fmt.Errorf("rollback prepared %s: %w", gid, err)
	}
	return nil
}

// AbortLingering rolls back the prepared transactions of this sink in the database that
// subtasks i with i % parallelism == this subtask prepared and no restored state references.
func (s *txnSink) AbortLingering(referenced []*pgTxn) error {
	refs := map[string]bool{}
	for _, t := range referenced {
		refs[t.GID] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rows, err := s.ctl.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)", s.prefix+"-")
	if err != nil {
		return fmt.Errorf("listing prepared transactions: %w", s.red.Err(err))
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("listing prepared transactions: %w", s.red.Err(err))
	}
	sub, par := s.Context().Subtask, max(s.Context().Parallelism, 1)
	var n int
	for _, gid := range gids {
		i, ok := s.parseGID(gid)
		if !ok || i%par != sub || refs[gid] {
			continue
		}
		if err := s.rollbackPrepared(gid); err != nil {
			return err
		}
		n++
	}
	if n > 0 {
		s.Context().Log().Info("rolled back lingering prepared transactions", "count", n)
	}
	return nil
}

// NotifyCheckpointComplete commits, then sends the rows held back while a transaction waited
// for its commit.
func (s *txnSink) NotifyCheckpointComplete(id int64) error {
	if err := s.TwoPhaseSink.NotifyCheckpointComplete(id); err != nil {
		return err
	}
	if err := s.handOn(); err != nil {
		return fmt.Errorf("postgres sink: %w", err)
	}
	t, ok := s.Current()
	switch {
	case !ok || len(s.Pending()) > 0:
	case s.ended && s.carried > 0:
		// The final checkpoint carried rows (mode upsert): write and commit them now.
		if err := s.send(t, false); err != nil {
			return fmt.Errorf("postgres sink: %w", err)
		}
		t.begun, t.live = false, false
		if err := s.exec(s.data, "COMMIT"); err != nil {
			return fmt.Errorf("postgres sink: commit of the rows the final checkpoint carried: %w", err)
		}
	case len(s.w.rows) >= s.w.batch:
		if err := s.send(t, false); err != nil {
			return fmt.Errorf("postgres sink: %w", err)
		}
	}
	return nil
}

func (s *txnSink) Encode(t *pgTxn) []byte {
	b, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("postgres sink: encode transaction: %v", err)) // a struct of strings
	}
	return b
}

func (s *txnSink) Decode(b []byte) (*pgTxn, error) {
	var t pgTxn
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("decode transaction: %w", err)
	}
	switch t.State {
	case txnOpen, txnEmpty, txnPrepared:
	default:
		return nil, fmt.Errorf("decode transaction %s: unknown state %q", t.GID, t.State)
	}
	if t.State == txnPrepared && t.XID == "" {
		return nil, fmt.Errorf("decode transaction %s: prepared without a transaction id", t.GID)
	}
	if _, err := s.w.decode(t.Carry); err != nil {
		return nil, fmt.Errorf("decode transaction %s: carried rows: %w", t.GID, err)
	}
	return &t, nil
}

// EndInput notes that the next barrier is the final one, which cannot carry rows.
func (s *txnSink) EndInput() error {
	s.ended = true
	return s.TwoPhaseSink.EndInput()
}

// Close rolls back the open transaction and closes the connections; prepared transactions
// stay for a restore to commit.
func (s *txnSink) Close() error {
	var err error
	if s.data != nil {
		err = s.TwoPhaseSink.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, c := range []**pgx.Conn{&s.data, &s.ctl} {
		if *c != nil {
			_ = (*c).Close(ctx) // a connection that fails to close is gone either way
			*c = nil
		}
	}
	return err
}

var (
	_ operator.TwoPhaseCommitter[*pgTxn] = (*txnSink)(nil)
	_ operator.LingeringAborter[*pgTxn]  = (*txnSink)(nil)
	_ operator.PreBarrier                = (*plainSink)(nil)
)
