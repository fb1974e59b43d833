package postgres

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/internal/pgtest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

const cdcWait = 30 * time.Second

// cdcEnv is a real PostgreSQL (wal_level logical) for the source's tests.
type cdcEnv struct {
	srv  *pgtest.Server
	conn *pgx.Conn
}

func (e *cdcEnv) exec(t *testing.T, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := e.conn.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func (e *cdcEnv) spec(table, slot string, schema ...record.Field) *pgspec.CDCConfig {
	return &pgspec.CDCConfig{DSN: e.srv.DSN(e.srv.Database), Table: table, Schema: schema, Slot: slot, Publication: "goflink_" + slot}
}

// confirmed is the slot's confirmed_flush_lsn.
func (e *cdcEnv) confirmed(t *testing.T, slot string) string {
	t.Helper()
	var lsn string
	if err := e.conn.QueryRow(t.Context(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&lsn); err != nil {
		t.Fatalf("confirmed_flush_lsn of %s: %v", slot, err)
	}
	return lsn
}

func (e *cdcEnv) slotExists(t *testing.T, slot string) bool {
	t.Helper()
	var n int
	if err := e.conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// cdcRun is a source opened by a test, with what it emitted.
type cdcRun struct {
	*cdcSource
	out *operatortest.Capture
	sc  *operatortest.StateContext
}

func openCDC(t *testing.T, c *pgspec.CDCConfig, attempt int, restoredID int64, state [][]byte) (*cdcRun, error) {
	t.Helper()
	s, err := newCDCSource(c)
	if err != nil {
		t.Fatal(err)
	}
	sc := operatortest.NewStateContext(restoredID, map[string][][]byte{cdcStateName: state})
	if err := s.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	r := &cdcRun{s, &operatortest.Capture{}, sc}
	t.Cleanup(func() { _ = s.Close() })
	return r, s.Open(&operator.Context{JobID: "job", OperatorName: "src", Parallelism: 1, Attempt: attempt, Now: time.Now, Metrics: &operator.Metrics{}}, r.out)
}

func mustOpenCDC(t *testing.T, c *pgspec.CDCConfig, attempt int, restoredID int64, state [][]byte) *cdcRun {
	t.Helper()
	r, err := openCDC(t, c, attempt, restoredID, state)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

// read emits, limit records at a time, until the run captured want records in all.
func (r *cdcRun) read(t *testing.T, want, limit int) {
	t.Helper()
	poll.Until(t, cdcWait, fmt.Sprintf("%d records", want), func() error {
		for len(r.out.Rows) < want {
			n, _, done, err := r.Emit(min(limit, want-len(r.out.Rows)))
			if err != nil {
				t.Fatalf("Emit: %v", err)
			}
			if done {
				t.Fatal("the source reported done")
			}
			if n == 0 {
				break
			}
		}
		if len(r.out.Rows) < want {
			return fmt.Errorf("%d records", len(r.out.Rows))
		}
		return nil
	})
}

// emitUntilErr emits until Emit fails, and returns the error.
func (r *cdcRun) emitUntilErr(t *testing.T) error {
	t.Helper()
	var got error
	poll.Until(t, cdcWait, "an error", func() error {
		if _, _, _, err := r.Emit(100); err != nil {
			got = err
			return nil
		}
		return fmt.Errorf("no error after %d records", len(r.out.Rows))
	})
	return got
}

func (r *cdcRun) snapshot(t *testing.T, id int64) cdcState {
	t.Helper()
	if err := r.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	elems := operatortest.Checkpoint(t, cdcStateName, pb.ListDistribution_LIST_DISTRIBUTION_SPLIT, r.sc)
	if len(elems) != 1 {
		t.Fatalf("state of checkpoint %d: %d elements, want 1", id, len(elems))
	}
	var st cdcState
	if err := json.Unmarshal(elems[0], &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func stateElems(st cdcState) [][]byte {
	b, _ := json.Marshal(st)
	return [][]byte{b}
}

// formatRows renders records as "op col=value ...", in the schema's order.
func formatRows(c *pgspec.CDCConfig, rows []record.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		parts := []string{r[0].Str()}
		for j, f := range c.Schema {
			v := r[j+1].Format(f.Type)
			if f.Type == record.Bytes {
				v = hex.EncodeToString([]byte(r[j+1].Str()))
			}
			parts = append(parts, f.Name+"="+v)
		}
		out[i] = strings.Join(parts, " ")
	}
	return out
}

func wantRows(t *testing.T, step string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: records\n%s\nwant\n%s", step, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCDCSource runs the postgres-cdc source by hand against a real PostgreSQL.
func TestCDCSource(t *testing.T) {
	e := &cdcEnv{srv: pgtest.Start(t)}
	e.conn = e.srv.Connect(t)

	// The snapshot in chunks, checkpoints declined meanwhile, then inserts, updates and
	// deletes with default and full replica identity, each type parsed from its text.
	t.Run("SnapshotThenStream", func(t *testing.T) {
		e.exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, name text, price double precision, ok boolean, at timestamptz, day date, raw bytea, extra text)`,
			`INSERT INTO items VALUES (1, 'one', 1.5, true, '2026-01-02 03:04:05.123456+00', '2026-01-02', '\x0102', 'x'),
				(2, 'two', -2, false, '2026-02-03 04:05:06+02', '2026-02-03', '', 'y'), (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`)
		c := e.spec("items", "items_slot", record.Field{Name: "id", Type: record.Int64}, record.Field{Name: "name", Type: record.String},
			record.Field{Name: "price", Type: record.Float64}, record.Field{Name: "ok", Type: record.Bool}, record.Field{Name: "at", Type: record.Timestamp},
			record.Field{Name: "day", Type: record.Timestamp}, record.Field{Name: "raw", Type: record.Bytes})
		r := mustOpenCDC(t, c, 0, 0, nil)
		if reason := r.DeclineCheckpoint(1); !strings.Contains(reason, "initial snapshot of table items") {
			t.Errorf("DeclineCheckpoint in the snapshot phase = %q, want a reason naming the snapshot", reason)
		}
		r.read(t, 3, 2)
		snapshot := formatRows(c, r.out.Rows)
		slices.Sort(snapshot)
		wantRows(t, "snapshot", snapshot, []string{
			"insert id=1 name=one price=1.5 ok=true at=2026-01-02T03:04:05.123456Z day=2026-01-02T00:00:00Z raw=0102",
			"insert id=2 name=two price=-2 ok=false at=2026-02-03T02:05:06Z day=2026-02-03T00:00:00Z raw=",
			"insert id=3 name= price=0 ok=false at=1970-01-01T00:00:00Z day=1970-01-01T00:00:00Z raw=",
		})
		// The last chunk was short: streaming started.
		poll.Until(t, cdcWait, "the streaming phase", func() error {
			if _, _, _, err := r.Emit(1); err != nil {
				t.Fatal(err)
			}
			if r.phase != phaseStreaming {
				return fmt.Errorf("phase %s", r.phase)
			}
			return nil
		})
		if reason := r.DeclineCheckpoint(2); reason != "" {
			t.Errorf("DeclineCheckpoint while streaming = %q, want none", reason)
		}
		r.out.Rows = nil
		e.exec(t, `INSERT INTO items VALUES (4, 'four', 4.25, true, '2026-04-04 04:04:04+00', '2026-04-04', '\xff', 'z')`,
			`UPDATE items SET name = 'uno' WHERE id = 1`,
			`DELETE FROM items WHERE id = 2`,
			`UPDATE items SET id = 30 WHERE id = 3`,
			`ALTER TABLE items REPLICA IDENTITY FULL`,
			`UPDATE items SET price = 5 WHERE id = 4`,
			`DELETE FROM items WHERE id = 1`)
		r.read(t, 8, 100)
		wantRows(t, "stream", formatRows(c, r.out.Rows), []string{
			"insert id=4 name=four price=4.25 ok=true at=2026-04-04T04:04:04Z day=2026-04-04T00:00:00Z raw=ff",
			"update_after id=1 name=uno price=1.5 ok=true at=2026-01-02T03:04:05.123456Z day=2026-01-02T00:00:00Z raw=0102",
			// Default replica identity: the key only.
			"delete id=2 name= price=0 ok=false at=1970-01-01T00:00:00Z day=1970-01-01T00:00:00Z raw=",
			// A changed key: the old key comes along.
			"update_before id=3 name= price=0 ok=false at=1970-01-01T00:00:00Z day=1970-01-01T00:00:00Z raw=",
			"update_after id=30 name= price=0 ok=false at=1970-01-01T00:00:00Z day=1970-01-01T00:00:00Z raw=",
			// REPLICA IDENTITY FULL: the whole old row.
			"update_before id=4 name=four price=4.25 ok=true at=2026-04-04T04:04:04Z day=2026-04-04T00:00:00Z raw=ff",
			"update_after id=4 name=four price=5 ok=true at=2026-04-04T04:04:04Z day=2026-04-04T00:00:00Z raw=ff",
			"delete id=1 name=uno price=1.5 ok=true at=2026-01-02T03:04:05.123456Z day=2026-01-02T00:00:00Z raw=0102",
		})
	})

	// A barrier in the middle of a transaction: the restore resumes after the records emitted
	// before it, with nothing lost and nothing twice.
	t.Run("RestoreMidTransaction", func(t *testing.T) {
		e.exec(t, `CREATE TABLE mid (id bigint PRIMARY KEY, v bigint NOT NULL)`)
		c := e.spec("mid", "mid_slot", record.Field{Name: "id", Type: record.Int64}, record.Field{Name: "v", Type: record.Int64})
		r := mustOpenCDC(t, c, 0, 0, nil)
		r.read(t, 0, 10)
		poll.Until(t, cdcWait, "the streaming phase", func() error {
			if _, _, _, err := r.Emit(1); err != nil {
				t.Fatal(err)
			}
			if r.phase != phaseStreaming {
				return fmt.Errorf("phase %s", r.phase)
			}
			return nil
		})
		e.exec(t, `INSERT INTO mid SELECT i, i * 10 FROM generate_series(1, 5) i`,
			`INSERT INTO mid SELECT i, i * 10 FROM generate_series(6, 7) i`)
		r.read(t, 1, 1)
		first := r.snapshot(t, 1) // after 1 record of the first transaction
		r.read(t, 3, 2)
		st := r.snapshot(t, 2) // after 3
		if st.Skip != 3 || first.Skip != 1 || st.LSN != first.LSN {
			t.Errorf("states %+v then %+v: want the same lsn, skipping 1 then 3", first, st)
		}
		r.read(t, 6, 10) // into the second transaction, past the checkpoint
		before := formatRows(c, r.out.Rows[:3])
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}

		r2 := mustOpenCDC(t, c, 1, 2, stateElems(st))
		e.exec(t, `INSERT INTO mid VALUES (100, 1000)`)
		r2.read(t, 5, 3)
		got := append(before, formatRows(c, r2.out.Rows)...)
		var want []string
		for _, id := range []int{1, 2, 3, 4, 5, 6, 7, 100} {
			want = append(want, fmt.Sprintf("insert id=%d v=%d", id, id*10))
		}
		wantRows(t, "before and after the restore", got, want)
		if _, _, _, err := r2.Emit(100); err != nil {
			t.Fatal(err)
		}
		if len(r2.out.Rows) != 5 {
			t.Errorf("the restored source emitted %d records, want 5", len(r2.out.Rows))
		}
	})

	// A restore while the earlier attempt's session still holds the slot (its TaskManager
	// gone unnoticed) ends that session and resumes.
	t.Run("RestoreWhileHeld", func(t *testing.T) {
		e.exec(t, `CREATE TABLE held (id bigint PRIMARY KEY)`)
		c := e.spec("held", "held_slot", record.Field{Name: "id", Type: record.Int64})
		r := mustOpenCDC(t, c, 0, 0, nil)
		poll.Until(t, cdcWait, "the streaming phase", func() error {
			if _, _, _, err := r.Emit(1); err != nil {
				t.Fatal(err)
			}
			if r.phase != phaseStreaming {
				return fmt.Errorf("phase %s", r.phase)
			}
			return nil
		})
		e.exec(t, `INSERT INTO held VALUES (1)`)
		r.read(t, 1, 10)
		st := r.snapshot(t, 1)
		// r is not closed: its replication session still holds the slot.
		r2 := mustOpenCDC(t, c, 1, 1, stateElems(st))
		e.exec(t, `INSERT INTO held VALUES (2)`)
		r2.read(t, 1, 10)
		wantRows(t, "the restore", formatRows(c, r2.out.Rows), []string{"insert id=2"})
	})

	// The position is confirmed to the server only when its checkpoint completes, and then
	// exactly that checkpoint's position.
	t.Run("AckOnCompletion", func(t *testing.T) {
		e.exec(t, `CREATE TABLE acks (id bigint PRIMARY KEY)`)
		c := e.spec("acks", "acks_slot", record.Field{Name: "id", Type: record.Int64})
		r := mustOpenCDC(t, c, 0, 0, nil)
		poll.Until(t, cdcWait, "the streaming phase", func() error {
			if _, _, _, err := r.Emit(1); err != nil {
				t.Fatal(err)
			}
			if r.phase != phaseStreaming {
				return fmt.Errorf("phase %s", r.phase)
			}
			return nil
		})
		start := e.confirmed(t, "acks_slot")
		e.exec(t, `INSERT INTO acks VALUES (1)`, `INSERT INTO acks VALUES (2)`)
		r.read(t, 2, 10)
		poll.Until(t, cdcWait, "the second transaction's commit", func() error {
			if _, _, _, err := r.Emit(10); err != nil {
				t.Fatal(err)
			}
			if r.inTxn {
				return fmt.Errorf("in a transaction")
			}
			return nil
		})
		st := r.snapshot(t, 7)
		if st.Skip != 0 || st.LSN == start {
			t.Fatalf("state %+v: want a position after the two transactions (the slot started at %s)", st, start)
		}
		e.exec(t, `INSERT INTO acks VALUES (3)`)
		r.read(t, 3, 10)
		if got := e.confirmed(t, "acks_slot"); got != start {
			t.Errorf("confirmed_flush_lsn %s before the checkpoint completed, want %s still", got, start)
		}
		if err := r.NotifyCheckpointAborted(6); err != nil {
			t.Fatal(err)
		}
		if err := r.NotifyCheckpointComplete(7); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, cdcWait, "the checkpoint's position confirmed", func() error {
			if _, _, _, err := r.Emit(10); err != nil {
				t.Fatal(err)
			}
			if got := e.confirmed(t, "acks_slot"); got != st.LSN {
				return fmt.Errorf("confirmed_flush_lsn %s, want %s", got, st.LSN)
			}
			return nil
		})
	})

	// A slot that exists without a checkpoint to resume: the first attempt fails for good; a
	// later attempt (its own slot, left by an earlier attempt) drops it and starts over. A
	// source closed during its snapshot drops its slot.
	t.Run("SlotExists", func(t *testing.T) {
		e.exec(t, `CREATE TABLE taken (id bigint PRIMARY KEY)`, `INSERT INTO taken VALUES (1), (2)`,
			`SELECT pg_create_logical_replication_slot('taken_slot', 'pgoutput')`)
		c := e.spec("taken", "taken_slot", record.Field{Name: "id", Type: record.Int64})
		_, err := openCDC(t, c, 0, 0, nil)
		if err == nil || !strings.Contains(err.Error(), "replication slot taken_slot exists already and there is no checkpoint") || !operator.IsUnrecoverable(err) {
			t.Fatalf("Open with the slot taken = %v, want an unrecoverable error saying so", err)
		}
		// In use by another job's session: even a later attempt leaves it alone.
		other, err := pgconn.Connect(t.Context(), e.srv.DSN(e.srv.Database)+"&replication=database&application_name=other-job")
		if err != nil {
			t.Fatal(err)
		}
		if err := pglogrepl.StartReplication(t.Context(), other, "taken_slot", 0, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication,
			PluginArgs: []string{"proto_version '1'", "publication_names 'goflink_taken_slot'"}}); err != nil {
			t.Fatal(err)
		}
		_, err = openCDC(t, c, 1, 0, nil)
		if err == nil || !strings.Contains(err.Error(), `replication slot taken_slot is in use by another session`) || !strings.Contains(err.Error(), `"other-job"`) {
			t.Errorf("Open with the slot in use by another job = %v, want an error saying so", err)
		}
		other.Close(t.Context())
		r := mustOpenCDC(t, c, 1, 0, nil)
		r.read(t, 2, 1)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if e.slotExists(t, "taken_slot") {
			t.Error("the slot outlived a source closed during its snapshot")
		}
	})

	// An unchanged TOASTed value comes from the old row with REPLICA IDENTITY FULL, and fails
	// the task without it; so does a truncate a publication publishes.
	t.Run("ToastAndTruncate", func(t *testing.T) {
		big := "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i)"
		e.exec(t, `CREATE TABLE toast (id bigint PRIMARY KEY, n bigint, doc text)`, `ALTER TABLE toast REPLICA IDENTITY FULL`,
			`CREATE PUBLICATION toast_pub FOR TABLE toast`)
		c := e.spec("toast", "toast_slot", record.Field{Name: "id", Type: record.Int64}, record.Field{Name: "n", Type: record.Int64},
			record.Field{Name: "doc", Type: record.String})
		c.Publication = "toast_pub"
		r := mustOpenCDC(t, c, 0, 0, nil)
		r.read(t, 0, 10)
		poll.Until(t, cdcWait, "the streaming phase", func() error {
			if _, _, _, err := r.Emit(1); err != nil {
				t.Fatal(err)
			}
			if r.phase != phaseStreaming {
				return fmt.Errorf("phase %s", r.phase)
			}
			return nil
		})
		e.exec(t, `INSERT INTO toast VALUES (1, 0, `+big+`)`, `UPDATE toast SET n = 1 WHERE id = 1`)
		r.read(t, 3, 10)
		var doc string
		if err := e.conn.QueryRow(t.Context(), "SELECT "+big).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		for i, op := range []string{"insert", "update_before", "update_after"} {
			if got := r.out.Rows[i]; got[0].Str() != op || got[3].Str() != doc {
				t.Errorf("record %d: %s with a doc of %d bytes, want %s with the whole doc (%d bytes)", i, got[0].Str(), len(got[3].Str()), op, len(doc))
			}
		}
		e.exec(t, `ALTER TABLE toast REPLICA IDENTITY DEFAULT`, `UPDATE toast SET n = 2 WHERE id = 1`)
		if err := r.emitUntilErr(t); err == nil || !strings.Contains(err.Error(), "column doc of an update of table toast is an unchanged TOASTed value") ||
			!strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
			t.Errorf("Emit of an update without the TOASTed value = %v, want an error saying to set REPLICA IDENTITY FULL", err)
		}
		_ = r.Close()

		c.Slot = "toast_slot2"
		r = mustOpenCDC(t, c, 0, 0, nil)
		r.read(t, 1, 10)
		poll.Until(t, cdcWait, "the streaming phase", func() error {
			if _, _, _, err := r.Emit(1); err != nil {
				t.Fatal(err)
			}
			if r.phase != phaseStreaming {
				return fmt.Errorf("phase %s", r.phase)
			}
			return nil
		})
		e.exec(t, `TRUNCATE toast`)
		if err := r.emitUntilErr(t); err == nil || !strings.Contains(err.Error(), "table toast was truncated") || !operator.IsUnrecoverable(err) {
			t.Errorf("Emit after a truncate = %v, want an unrecoverable error saying so", err)
		}
	})

	// Values that do not parse, columns the table lacks, and a restore whose slot is gone.
	t.Run("Errors", func(t *testing.T) {
		e.exec(t, `CREATE TABLE bad (id bigint PRIMARY KEY, word text)`, `INSERT INTO bad VALUES (1, 'abc')`)
		c := e.spec("bad", "bad_slot", record.Field{Name: "id", Type: record.Int64}, record.Field{Name: "word", Type: record.Int64})
		r := mustOpenCDC(t, c, 0, 0, nil)
		err := r.emitUntilErr(t)
		if err == nil || !strings.Contains(err.Error(), `column word: want an int64, got "abc"`) || !operator.IsUnrecoverable(err) {
			t.Errorf("Emit of a bad value = %v, want an unrecoverable error naming the column and type", err)
		}
		_ = r.Close()

		c = e.spec("bad", "bad_slot2", record.Field{Name: "id", Type: record.Int64}, record.Field{Name: "nope", Type: record.String})
		if _, err := openCDC(t, c, 0, 0, nil); err == nil || !strings.Contains(err.Error(), `schema.nope: table bad has no column "nope"`) {
			t.Errorf("Open with a missing column = %v, want an error naming it", err)
		}

		c = e.spec("bad", "gone_slot", record.Field{Name: "id", Type: record.Int64})
		_, err = openCDC(t, c, 1, 3, stateElems(cdcState{Phase: phaseStreaming, LSN: "0/1000000"}))
		if err == nil || !strings.Contains(err.Error(), "replication slot gone_slot does not exist") {
			t.Errorf("restore without the slot = %v, want an error saying it is gone", err)
		}

		pw := "s3cret-pw"
		c = e.spec("bad", "pw_slot", record.Field{Name: "id", Type: record.Int64})
		c.DSN = e.srv.DSNFor(pgtest.User, pw, e.srv.Database)
		if _, err := openCDC(t, c, 0, 0, nil); err == nil || strings.Contains(err.Error(), pw) {
			t.Errorf("Open with a wrong password = %v, want an error without the password", err)
		}
	})
}
