package postgres

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/internal/pgtest"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/operator/operatortest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

var testSchema = record.MustSchema(record.Field{Name: "k", Type: record.String}, record.Field{Name: "n", Type: record.Int64})

func kv(k string, n int64) record.Row { return record.Row{record.StringValue(k), record.IntValue(n)} }

// changeSchema is testSchema with an op field first, the input of a sink with op-field op.
var changeSchema = record.MustSchema(record.Field{Name: "op", Type: record.String}, record.Field{Name: "k", Type: record.String}, record.Field{Name: "n", Type: record.Int64})

// change is a row of changeSchema.
func change(op, k string, n int64) record.Row {
	return record.Row{record.StringValue(op), record.StringValue(k), record.IntValue(n)}
}

// pgEnv is a real PostgreSQL with table out (k text, n bigint) and table up, keyed by k.
type pgEnv struct {
	srv  *pgtest.Server
	conn *pgx.Conn
}

func startPG(t *testing.T) *pgEnv {
	t.Helper()
	e := &pgEnv{srv: pgtest.Start(t)}
	e.conn = e.srv.Connect(t)
	for _, sql := range []string{"CREATE TABLE out (k text NOT NULL, n bigint NOT NULL)",
		"CREATE TABLE up (k text PRIMARY KEY, n bigint NOT NULL)"} {
		if _, err := e.conn.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *pgEnv) spec(table, guarantee string) *pgspec.SinkConfig {
	c := &pgspec.SinkConfig{DSN: e.srv.DSN(e.srv.Database), Table: table, Mode: pgspec.ModeInsert, BatchSize: 2, DeliveryGuarantee: guarantee}
	if table == "up" {
		c.Mode, c.Key = pgspec.ModeUpsert, []string{"k"}
	}
	return c
}

// rows are the committed rows of a table as "k=n", sorted.
func (e *pgEnv) rows(t *testing.T, table string) []string {
	t.Helper()
	rows, err := e.conn.Query(t.Context(), "SELECT k || '=' || n FROM "+table+" ORDER BY k, n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (e *pgEnv) wantRows(t *testing.T, step, table string, want ...string) {
	t.Helper()
	if got := e.rows(t, table); !slices.Equal(got, want) {
		t.Errorf("%s: %s holds %q, want %q", step, table, got, want)
	}
}

// prepared are the GIDs of the prepared transactions, sorted.
func (e *pgEnv) prepared(t *testing.T) []string {
	t.Helper()
	rows, err := e.conn.Query(t.Context(), "SELECT gid FROM pg_prepared_xacts ORDER BY gid")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// testSink is one subtask's exactly-once sink driven through the operator hooks.
type testSink struct {
	*txnSink
	sc *operatortest.StateContext
}

func (e *pgEnv) openTxn(t *testing.T, c *pgspec.SinkConfig, job string, sub, par int, restoredID int64, state [][]byte) (*testSink, error) {
	t.Helper()
	in := testSchema
	if c.OpField != "" {
		in = changeSchema
	}
	o, err := newSink(c, in)
	if err != nil {
		t.Fatal(err)
	}
	s := o.(*txnSink)
	sc := operatortest.NewStateContext(restoredID, map[string][][]byte{operator.TwoPhaseStateName: state})
	if err := s.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	ctx := &operator.Context{JobID: job, OperatorName: "sink", Subtask: sub, Parallelism: par, Checkpointing: true}
	ts := &testSink{s, sc}
	t.Cleanup(func() { ts.crash() }) // closes the connections if the test did not
	return ts, s.Open(ctx, &operatortest.Capture{})
}

func (e *pgEnv) mustOpenTxn(t *testing.T, sub, par int, restoredID int64, state [][]byte) *testSink {
	t.Helper()
	s, err := e.openTxn(t, e.spec("out", pgspec.ExactlyOnce), "job1", sub, par, restoredID, state)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// crash abandons the sink without Close: its connections drop, so the server rolls back
// its open transaction and keeps the prepared ones.
func (s *testSink) crash() {
	for _, c := range []**pgx.Conn{&s.data, &s.ctl} {
		if *c != nil {
			_ = (*c).Close(context.Background())
			*c = nil
		}
	}
}

func (s *testSink) write(t *testing.T, rows ...record.Row) {
	t.Helper()
	for _, r := range rows {
		if err := s.Process(r); err != nil {
			t.Fatalf("Process: %v", err)
		}
	}
}

// checkpoint runs the synchronous part of checkpoint id and returns the sink's state in it.
func (s *testSink) checkpoint(t *testing.T, id int64) [][]byte {
	t.Helper()
	if err := s.PrepareSnapshotPreBarrier(id); err != nil {
		t.Fatalf("PrepareSnapshotPreBarrier(%d): %v", id, err)
	}
	if err := s.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return operatortest.Checkpoint(t, operator.TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION, s.sc)
}

func (s *testSink) complete(t *testing.T, id int64) {
	t.Helper()
	if err := s.NotifyCheckpointComplete(id); err != nil {
		t.Fatalf("NotifyCheckpointComplete(%d): %v", id, err)
	}
}

// TestTxnSinkExactlyOnce: a checkpoint's rows are a prepared transaction, invisible until the
// checkpoint completes; after a crash the prepared transaction survives, the restore commits
// it and rolls back the newer one; a second restore and a second Commit change nothing.
func TestTxnSinkExactlyOnce(t *testing.T) {
	e := startPG(t)
	a := e.mustOpenTxn(t, 0, 1, 0, nil)
	a.write(t, kv("a", 1), kv("a", 2), kv("a", 3)) // a batch of 2 goes out before the barrier
	chk1 := a.checkpoint(t, 1)
	a.write(t, kv("b", 1)) // after barrier 1
	a.checkpoint(t, 2)
	a.write(t, kv("c", 1)) // after barrier 2: open, not prepared
	e.wantRows(t, "before any completion", "out")
	if got := e.prepared(t); len(got) != 2 {
		t.Fatalf("prepared before the crash: %q, want the transactions of checkpoints 1 and 2", got)
	}
	pending := a.Pending()

	// Crash (no Close, no completion); the prepared transactions survive it.
	a.crash()
	if got := e.prepared(t); len(got) != 2 {
		t.Fatalf("prepared after the crash: %q, want 2", got)
	}
	b := e.mustOpenTxn(t, 0, 1, 1, chk1)
	e.wantRows(t, "after restoring checkpoint 1", "out", "a=1", "a=2", "a=3")
	if got := e.prepared(t); len(got) != 0 {
		t.Errorf("prepared after the restore: %q, want none (checkpoint 2's was rolled back)", got)
	}

	// Commit twice: the committed transaction of checkpoint 1 is a success again.
	if err := b.Commit(pending[0]); err != nil {
		t.Errorf("Commit of a committed transaction: %v", err)
	}
	// Checkpoint 2's was rolled back: committing it now is data loss, and says so.
	if err := b.Commit(pending[1]); err == nil || !strings.Contains(err.Error(), ErrDataLoss.Error()) {
		t.Errorf("Commit of a rolled-back transaction: %v, want %v", err, ErrDataLoss)
	}
	// A transaction never prepared is not committable.
	open, _ := b.Current()
	if err := b.Commit(open); err == nil || !strings.Contains(err.Error(), operator.ErrNotCommittable.Error()) {
		t.Errorf("Commit of an open transaction: %v, want %v", err, operator.ErrNotCommittable)
	}

	b.write(t, kv("d", 1))
	b.checkpoint(t, 3)
	b.complete(t, 3)
	e.wantRows(t, "after checkpoint 3", "out", "a=1", "a=2", "a=3", "d=1")
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A second restore of checkpoint 1 re-commits idempotently.
	c := e.mustOpenTxn(t, 0, 1, 1, chk1)
	e.wantRows(t, "after restoring checkpoint 1 again", "out", "a=1", "a=2", "a=3", "d=1")
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := e.prepared(t); len(got) != 0 {
		t.Errorf("prepared at the end: %q, want none", got)
	}
}

// TestTxnSinkAbortLingering: a restored subtask rolls back its own prepared transactions that
// the checkpoint does not reference, and keeps the other subtask's and another job's.
func TestTxnSinkAbortLingering(t *testing.T) {
	e := startPG(t)
	a0, a1 := e.mustOpenTxn(t, 0, 2, 0, nil), e.mustOpenTxn(t, 1, 2, 0, nil)
	other, err := e.openTxn(t, e.spec("out", pgspec.ExactlyOnce), "job2", 0, 2, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	other.write(t, kv("x", 1))
	other.checkpoint(t, 1)
	a0.write(t, kv("a", 1))
	a1.write(t, kv("b", 1))
	a0.checkpoint(t, 1)
	a1.checkpoint(t, 1)
	chk1 := operatortest.Checkpoint(t, operator.TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION, a0.sc, a1.sc)
	// Checkpoint 2: each subtask's checkpoint-1-open transaction prepared (referenced in chk1
	// as open); checkpoint 3: prepared, referenced by nothing (lingering).
	a0.write(t, kv("a", 2))
	a1.write(t, kv("b", 2))
	a0.checkpoint(t, 2)
	a1.checkpoint(t, 2)
	a0.write(t, kv("a", 4))
	a1.write(t, kv("b", 4))
	a0.checkpoint(t, 3)
	a1.checkpoint(t, 3)
	a1Pending := a1.Pending()
	a0.crash()
	a1.crash()
	if got := e.prepared(t); len(got) != 7 {
		t.Fatalf("prepared before the restore: %q, want 7", got)
	}

	// Only subtask 0 restores (subtask 1 is slower): it commits its checkpoint 1, rolls back
	// its checkpoints 2 and 3, and leaves subtask 1's three and job2's one prepared.
	b0 := e.mustOpenTxn(t, 0, 2, 1, chk1)
	e.wantRows(t, "after subtask 0 restored", "out", "a=1")
	var want []string
	for _, p := range a1Pending {
		want = append(want, p.GID)
	}
	otherPending := other.Pending()
	want = append(want, otherPending[0].GID)
	slices.Sort(want)
	if got := e.prepared(t); !slices.Equal(got, want) {
		t.Errorf("prepared after subtask 0 restored: %q, want subtask 1's and job2's %q", got, want)
	}
	if err := b0.Close(); err != nil {
		t.Fatal(err)
	}

	// Subtask 1 restores: it commits its checkpoint 1 and rolls back the rest of its own.
	b1 := e.mustOpenTxn(t, 1, 2, 1, chk1)
	e.wantRows(t, "after both restored", "out", "a=1", "b=1")
	if got := e.prepared(t); !slices.Equal(got, []string{otherPending[0].GID}) {
		t.Errorf("prepared after both restored: %q, want only job2's %s", got, otherPending[0].GID)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(otherPending[0]); err != nil {
		t.Fatal(err)
	}
}

// TestTxnSinkUpsert: exactly-once upserts of a key in consecutive checkpoints: the rows of
// the next checkpoint wait in the sink while the previous transaction, which holds the key's
// row lock, is prepared, so the task never blocks on its own lock.
func TestTxnSinkUpsert(t *testing.T) {
	e := startPG(t)
	c := e.spec("up", pgspec.ExactlyOnce)
	c.BatchSize = 1
	s, err := e.openTxn(t, c, "job1", 0, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.write(t, kv("a", 1), kv("b", 1), kv("a", 2))
	s.checkpoint(t, 1)
	s.write(t, kv("a", 3), kv("b", 3), kv("a", 4)) // held: checkpoint 1's holds a's and b's locks
	e.wantRows(t, "before completion", "up")
	s.complete(t, 1)
	e.wantRows(t, "after checkpoint 1", "up", "a=2", "b=1")
	s.checkpoint(t, 2)
	s.complete(t, 2)
	e.wantRows(t, "after checkpoint 2", "up", "a=4", "b=3")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPlainSink: at-least-once commits each full batch, the rest at the barrier and at the
// end of input, inserting and upserting.
func TestPlainSink(t *testing.T) {
	e := startPG(t)
	for _, table := range []string{"out", "up"} {
		o, err := newSink(e.spec(table, pgspec.AtLeastOnce), testSchema)
		if err != nil {
			t.Fatal(err)
		}
		s := o.(*plainSink)
		if err := s.Open(&operator.Context{OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []record.Row{kv("a", 1), kv("b", 1), kv("a", 2)} {
			if err := s.Process(r); err != nil {
				t.Fatal(err)
			}
		}
		e.wantRows(t, "before the barrier (the full batch)", table, "a=1", "b=1")
		if err := s.PrepareSnapshotPreBarrier(1); err != nil {
			t.Fatal(err)
		}
		if table == "up" {
			e.wantRows(t, "after the barrier", table, "a=2", "b=1")
		} else {
			e.wantRows(t, "after the barrier", table, "a=1", "a=2", "b=1")
		}
		if err := s.Process(kv("c", 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.EndInput(); err != nil {
			t.Fatal(err)
		}
		if err := s.Process(kv("z", 1)); err != nil { // rolled back by Close
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := e.rows(t, table); len(got) != map[string]int{"out": 4, "up": 3}[table] || slices.Contains(got, "z=1") {
			t.Errorf("%s at the end: %q", table, got)
		}
	}
}

// TestConnectErrors: a wrong password, from the DSN, a file or the environment, and a server
// that is not there fail Open with a clear error that does not contain the password.
func TestConnectErrors(t *testing.T) {
	e := startPG(t)
	const secret = "s3cr3t-wrong-pw"
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGTEST_PW", secret)
	noPW := strings.Replace(e.srv.DSN(e.srv.Database), ":"+pgtest.Password+"@", "@", 1)
	for _, tc := range []struct {
		name string
		spec func(c *pgspec.SinkConfig)
		want string
	}{
		{"dsn", func(c *pgspec.SinkConfig) { c.DSN = e.srv.DSNFor(pgtest.User, secret, e.srv.Database) }, "password authentication failed"},
		{"file", func(c *pgspec.SinkConfig) { c.DSN, c.PasswordFile = noPW, pwFile }, "password authentication failed"},
		{"env", func(c *pgspec.SinkConfig) { c.DSN, c.PasswordEnv = noPW, "PGTEST_PW" }, "password authentication failed"},
		{"env unset", func(c *pgspec.SinkConfig) { c.DSN, c.PasswordEnv = noPW, "PGTEST_UNSET" }, "the environment variable PGTEST_UNSET is not set"},
		{"no server", func(c *pgspec.SinkConfig) {
			c.DSN = "postgres://goflink:" + secret + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"
		}, "connect: "},
		{"bad dsn", func(c *pgspec.SinkConfig) { c.DSN = "postgres://goflink:" + secret + "@127.0.0.1:99999999/x" }, "dsn: "},
	} {
		for _, g := range []string{pgspec.ExactlyOnce, pgspec.AtLeastOnce} {
			t.Run(tc.name+"/"+g, func(t *testing.T) {
				c := e.spec("out", g)
				tc.spec(c)
				o, err := newSink(c, testSchema)
				if err != nil {
					t.Fatal(err)
				}
				var openErr error
				switch s := o.(type) {
				case *txnSink:
					sc := operatortest.NewStateContext(0, nil)
					if err := s.InitializeState(sc); err != nil {
						t.Fatal(err)
					}
					openErr = s.Open(&operator.Context{JobID: "j", OperatorName: "sink", Parallelism: 1, Checkpointing: true}, &operatortest.Capture{})
				case *plainSink:
					openErr = s.Open(&operator.Context{OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{})
				}
				if err := o.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				t.Logf("Open: %v", openErr)
				if openErr == nil || !strings.Contains(openErr.Error(), tc.want) {
					t.Fatalf("Open: %v, want an error containing %q", openErr, tc.want)
				}
				if strings.Contains(openErr.Error(), secret) {
					t.Errorf("Open's error contains the password: %v", openErr)
				}
			})
		}
	}
	// The right password from a file works.
	pw := filepath.Join(t.TempDir(), "ok")
	if err := os.WriteFile(pw, []byte(pgtest.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := e.spec("out", pgspec.AtLeastOnce)
	c.DSN, c.PasswordFile = noPW, pw
	o, err := newSink(c, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.(*plainSink).Open(&operator.Context{OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{}); err != nil {
		t.Errorf("Open with password-file: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTxnSinkCarriesLockedRows: a barrier that comes before the previous checkpoint's
// completion meets the row locks of the sink's own prepared transaction. The locked rows are
// not sent but carried in the checkpoint's state: the task does not block, checkpoint 2's
// completion hands them to the next transaction ahead of its own rows, and a restore from
// checkpoint 2 writes them once.
func TestTxnSinkCarriesLockedRows(t *testing.T) {
	e := startPG(t)
	c := e.spec("up", pgspec.ExactlyOnce)
	c.BatchSize = 1
	s := e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, kv("a", 1), kv("b", 1))
	s.checkpoint(t, 1)
	s.write(t, kv("c", 2), kv("a", 2)) // a is locked by checkpoint 1's transaction
	chk2 := s.checkpoint(t, 2)         // does not block: c and a are carried
	s.write(t, kv("a", 3), kv("d", 3))
	e.wantRows(t, "before completion", "up")

	// Restore from checkpoint 2 on another sink: checkpoint 1's rows, then the carried ones.
	s.crash()
	r := e.mustOpenTxnSpec(t, c, 2, chk2)
	e.wantRows(t, "after the restore", "up", "a=1", "b=1")
	r.write(t, kv("d", 4))
	r.checkpoint(t, 3)
	r.complete(t, 3)
	e.wantRows(t, "after checkpoint 3 of the restored sink", "up", "a=2", "b=1", "c=2", "d=4")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if p := e.prepared(t); len(p) > 0 {
		t.Errorf("prepared transactions left: %q", p)
	}

	// The same without a crash: completions in order, the carried rows one checkpoint later.
	if _, err := e.conn.Exec(t.Context(), "TRUNCATE up"); err != nil {
		t.Fatal(err)
	}
	s = e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, kv("a", 1))
	s.checkpoint(t, 1)
	s.write(t, kv("a", 2), kv("b", 2))
	s.checkpoint(t, 2)
	s.write(t, kv("a", 3))
	s.checkpoint(t, 3) // a locked again: 3 carries a=3 behind 2's carried a=2, b=2
	s.complete(t, 1)
	e.wantRows(t, "after checkpoint 1", "up", "a=1")
	s.write(t, kv("b", 5))
	s.complete(t, 3) // commits 2 and 3: their carried rows go ahead of b=5 and are sent
	e.wantRows(t, "after checkpoint 3", "up", "a=1")
	s.checkpoint(t, 4)
	s.complete(t, 4)
	e.wantRows(t, "after checkpoint 4", "up", "a=3", "b=5")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTxnSinkCarriedRowsKeepTheirOrder: carried rows are older than every row after their
// barrier, and in mode upsert a key ends as its last change says only if they are written
// before those. A completion hands the carried rows of pending checkpoints that hold no row
// on to the open transaction at once (checkpoint 1's completion: checkpoint 2 holds only
// carried rows), ahead of its rows; a barrier while carried rows still wait behind a pending
// checkpoint's prepared rows carries its rows too, although nothing locks them; and a
// restore keeps the order.
func TestTxnSinkCarriedRowsKeepTheirOrder(t *testing.T) {
	e := startPG(t)
	c := e.spec("up", pgspec.ExactlyOnce)
	c.BatchSize = 1
	s := e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, kv("a", 1))
	s.checkpoint(t, 1)
	s.write(t, kv("a", 2))
	s.checkpoint(t, 2) // a is locked by checkpoint 1's transaction: a=2 is carried
	s.complete(t, 1)   // hands a=2 on: checkpoint 2 holds no row
	s.write(t, kv("a", 3))
	s.checkpoint(t, 3) // nothing locks a now: a=2, a=3 are written, in that order
	s.complete(t, 3)
	e.wantRows(t, "after checkpoint 3", "up", "a=3")
	s.checkpoint(t, 4)
	s.complete(t, 4)
	e.wantRows(t, "after checkpoint 4", "up", "a=3")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A batch with a locked row is carried whole; while carried rows wait behind a pending
	// prepared transaction (checkpoint 1's), later barriers carry all their rows, and the
	// completion hands them all on in order.
	if _, err := e.conn.Exec(t.Context(), "TRUNCATE up"); err != nil {
		t.Fatal(err)
	}
	s = e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, kv("a", 1))
	s.checkpoint(t, 1)
	s.write(t, kv("b", 2), kv("a", 2))
	s.checkpoint(t, 2) // a is locked: b=2, a=2 are carried
	s.write(t, kv("b", 3))
	s.checkpoint(t, 3) // b is not locked, but 2's carried rows wait: b=3 is carried
	s.complete(t, 3)   // commits 1, 2, 3: b=2, a=2, b=3 go to the open transaction
	e.wantRows(t, "after checkpoint 3", "up", "a=1")
	s.checkpoint(t, 4)
	s.complete(t, 4)
	e.wantRows(t, "after checkpoint 4", "up", "a=2", "b=3")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := e.conn.Exec(t.Context(), "TRUNCATE up"); err != nil {
		t.Fatal(err)
	}
	s = e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, kv("a", 1))
	s.checkpoint(t, 1)
	s.write(t, kv("a", 2))
	s.checkpoint(t, 2) // carries a=2
	s.complete(t, 1)
	s.write(t, kv("a", 3))
	s.checkpoint(t, 3) // a=2 (handed on by 1's completion), a=3 prepared
	s.complete(t, 2)
	s.write(t, kv("b", 4))
	chk4 := s.checkpoint(t, 4) // b=4 prepared (not locked by 3)
	e.wantRows(t, "after checkpoint 2", "up", "a=1")

	// Restore from checkpoint 4: it commits 3 and 4.
	s.crash()
	r := e.mustOpenTxnSpec(t, c, 4, chk4)
	r.checkpoint(t, 5)
	r.complete(t, 5)
	e.wantRows(t, "after checkpoint 5 of the restored sink", "up", "a=3", "b=4")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if p := e.prepared(t); len(p) > 0 {
		t.Errorf("prepared transactions left: %q", p)
	}
}

// TestTxnSinkFinalBarrier: after the end of input the final barrier has no next transaction
// to carry locked rows to. In mode upsert the final checkpoint's completion writes and
// commits them; in mode insert (a unique column) a locked row fails the task after the lock
// timeout, saying why, instead of blocking it, and the restore commits the earlier
// transaction.
func TestTxnSinkFinalBarrier(t *testing.T) {
	e := startPG(t)
	c := e.spec("up", pgspec.ExactlyOnce)
	s := e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, kv("a", 1))
	s.checkpoint(t, 1)
	s.write(t, kv("a", 2), kv("b", 2))
	if err := s.EndInput(); err != nil {
		t.Fatal(err)
	}
	s.checkpoint(t, 2) // checkpoint 1 not complete yet: a is locked, the rows are carried
	s.complete(t, 2)
	e.wantRows(t, "upsert: after the final checkpoint", "up", "a=2", "b=2")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if p := e.prepared(t); len(p) > 0 {
		t.Errorf("prepared transactions left: %q", p)
	}

	if _, err := e.conn.Exec(t.Context(), "CREATE TABLE uniq (k text UNIQUE, n bigint)"); err != nil {
		t.Fatal(err)
	}
	c = e.spec("uniq", pgspec.ExactlyOnce)
	s = e.mustOpenTxnSpec(t, c, 0, nil)
	s.lockTimeout = 200 * time.Millisecond
	s.write(t, kv("a", 1))
	chk1 := s.checkpoint(t, 1)
	s.write(t, kv("a", 2))
	if err := s.EndInput(); err != nil {
		t.Fatal(err)
	}
	err := s.PrepareSnapshotPreBarrier(2) // a's unique entry is locked
	if err == nil || !strings.Contains(err.Error(), "this sink's prepared transaction of an earlier checkpoint") {
		t.Fatalf("insert: PrepareSnapshotPreBarrier(2) = %v, want the lock timeout explained", err)
	}
	t.Logf("%v", err)
	s.crash()
	r := e.mustOpenTxnSpec(t, c, 1, chk1)
	e.wantRows(t, "insert: after the restore", "uniq", "a=1")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTxnSinkDeleteAfterPreparedInsert: a delete of a row that the previous checkpoint's
// prepared transaction inserted, at a barrier before that checkpoint's completion, would not
// see the row (it deletes nothing and does not wait for a lock) and the earlier commit would
// bring the row back: the barrier carries it instead, and the row ends deleted, with and
// without a restore from the barrier's checkpoint.
func TestTxnSinkDeleteAfterPreparedInsert(t *testing.T) {
	e := startPG(t)
	c := e.spec("up", pgspec.ExactlyOnce)
	c.OpField, c.BatchSize = "op", 1
	s := e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, change("insert", "a", 1), change("insert", "b", 1))
	s.checkpoint(t, 1)
	s.write(t, change("delete", "a", 0), change("insert", "c", 2))
	s.checkpoint(t, 2) // checkpoint 1 is not complete: its rows are prepared
	s.complete(t, 2)   // commits 1, and hands 2's carried rows on to checkpoint 3
	e.wantRows(t, "after checkpoint 2", "up", "a=1", "b=1")
	s.checkpoint(t, 3)
	s.complete(t, 3)
	e.wantRows(t, "after checkpoint 3", "up", "b=1", "c=2")
	s.crash()

	// A restore from checkpoint 2 (its completion lost) writes the carried rows once.
	if _, err := e.conn.Exec(t.Context(), "TRUNCATE up"); err != nil {
		t.Fatal(err)
	}
	s = e.mustOpenTxnSpec(t, c, 0, nil)
	s.write(t, change("insert", "a", 1))
	s.checkpoint(t, 1)
	s.write(t, change("delete", "a", 0), change("insert", "c", 2))
	chk2 := s.checkpoint(t, 2)
	s.crash()
	r := e.mustOpenTxnSpec(t, c, 2, chk2)
	e.wantRows(t, "after the restore", "up", "a=1")
	r.checkpoint(t, 3)
	r.complete(t, 3)
	e.wantRows(t, "after checkpoint 3 of the restored sink", "up", "c=2")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if p := e.prepared(t); len(p) > 0 {
		t.Errorf("prepared transactions left: %q", p)
	}
}

// TestTxnSinkChangelog: with an op field, deletes delete the key's row and update_before is
// skipped, in both guarantees; an unknown kind of change fails the record.
func TestTxnSinkChangelog(t *testing.T) {
	e := startPG(t)
	in := record.MustSchema(record.Field{Name: "op", Type: record.String}, record.Field{Name: "k", Type: record.String}, record.Field{Name: "n", Type: record.Int64})
	ch := func(op, k string, n int64) record.Row {
		return record.Row{record.StringValue(op), record.StringValue(k), record.IntValue(n)}
	}
	for _, g := range []string{pgspec.AtLeastOnce, pgspec.ExactlyOnce} {
		if _, err := e.conn.Exec(t.Context(), "TRUNCATE up"); err != nil {
			t.Fatal(err)
		}
		c := e.spec("up", g)
		c.OpField = "op"
		o, err := newSink(c, in)
		if err != nil {
			t.Fatal(err)
		}
		sc := operatortest.NewStateContext(0, nil)
		if sf, ok := o.(operator.Stateful); ok {
			if err := sf.InitializeState(sc); err != nil {
				t.Fatal(err)
			}
		}
		ctx := &operator.Context{JobID: "j", OperatorName: "sink", Parallelism: 1, Checkpointing: g == pgspec.ExactlyOnce}
		if err := o.Open(ctx, &operatortest.Capture{}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []record.Row{ch("insert", "a", 1), ch("insert", "b", 1), ch("insert", "c", 1),
			ch("update_before", "a", 1), ch("update_after", "a", 2), ch("delete", "b", 0), ch("insert", "b", 7), ch("delete", "c", 1)} {
			if err := o.Process(r); err != nil {
				t.Fatalf("%s: Process: %v", g, err)
			}
		}
		if err := o.Process(ch("upsert", "x", 1)); err == nil || !strings.Contains(err.Error(), `unknown kind of change "upsert"`) {
			t.Errorf("%s: an unknown op = %v", g, err)
		}
		pb := o.(operator.PreBarrier)
		if err := pb.PrepareSnapshotPreBarrier(1); err != nil {
			t.Fatal(err)
		}
		if n, ok := o.(operator.CheckpointListener); ok {
			if err := n.NotifyCheckpointComplete(1); err != nil {
				t.Fatal(err)
			}
		}
		e.wantRows(t, g, "up", "a=2", "b=7")
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *pgEnv) mustOpenTxnSpec(t *testing.T, c *pgspec.SinkConfig, restoredID int64, state [][]byte) *testSink {
	t.Helper()
	s, err := e.openTxn(t, c, "job1", 0, 1, restoredID, state)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// TestSinkTypes: every field type is written into the column types the probe accepts for it,
// and reads back as it was.
func TestSinkTypes(t *testing.T) {
	e := startPG(t)
	if _, err := e.conn.Exec(t.Context(), `CREATE TABLE typed (id bigint, small integer, f double precision, num numeric,
		b boolean, s text, v varchar(20), raw bytea, at timestamptz, day date, m jsonb)`); err != nil {
		t.Fatal(err)
	}
	in := record.MustSchema(record.Field{Name: "id", Type: record.Int64}, record.Field{Name: "small", Type: record.Int64},
		record.Field{Name: "f", Type: record.Float64}, record.Field{Name: "num", Type: record.Float64},
		record.Field{Name: "b", Type: record.Bool}, record.Field{Name: "s", Type: record.String}, record.Field{Name: "v", Type: record.String},
		record.Field{Name: "raw", Type: record.Bytes}, record.Field{Name: "at", Type: record.Timestamp}, record.Field{Name: "day", Type: record.Timestamp},
		record.Field{Name: "m", Type: record.Map})
	at := time.Date(2026, 12, 3, 10, 11, 12, 345678000, time.UTC)
	row := record.Row{record.IntValue(1 << 40), record.IntValue(-7), record.FloatValue(2.5), record.FloatValue(0.125),
		record.BoolValue(true), record.StringValue("héllo"), record.StringValue("short"), record.BytesValue([]byte{0, 1, 255}),
		record.TimeValue(at), record.TimeValue(at), record.MapValue(map[string]string{"a": "1", "b": "x"})}
	c := e.spec("typed", pgspec.AtLeastOnce)
	if err := probeSink(t.Context(), c, in); err != nil {
		t.Fatalf("probe: %v", err)
	}
	o, err := newSink(c, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Open(&operator.Context{OperatorName: "sink", Parallelism: 1}, &operatortest.Capture{}); err != nil {
		t.Fatal(err)
	}
	if err := o.Process(row); err != nil {
		t.Fatal(err)
	}
	if err := o.(operator.PreBarrier).PrepareSnapshotPreBarrier(1); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := e.conn.QueryRow(t.Context(), `SELECT concat_ws('|', id, small, f, num, b, s, v, encode(raw, 'hex'),
		to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), day, m->>'a', m->>'b') FROM typed`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := "1099511627776|-7|2.5|0.125|t|héllo|short|0001ff|2026-12-03 10:11:12.345678|2026-12-03|1|x"; got != want {
		t.Errorf("row = %q, want %q", got, want)
	}
}

// TestTxnSinkCarriedRowsWhileOvertaken: when every barrier overtakes the previous
// checkpoint's completion, carried rows are still written, one checkpoint late, instead of
// passing from one checkpoint's state to the next.
func TestTxnSinkCarriedRowsWhileOvertaken(t *testing.T) {
	e := startPG(t)
	c := e.spec("up", pgspec.ExactlyOnce)
	c.BatchSize = 1
	s := e.mustOpenTxnSpec(t, c, 0, nil)
	for id := int64(1); id <= 8; id++ {
		s.write(t, kv("a", id))
		s.checkpoint(t, id)
		if id > 1 {
			s.complete(t, id-1) // after barrier id: always overtaken
		}
		if id > 3 {
			var n int64
			if err := e.conn.QueryRow(t.Context(), "SELECT n FROM up WHERE k = 'a'").Scan(&n); err != nil || n < id-3 {
				t.Fatalf("after checkpoint %d completed, a = %d (%v): want at least %d", id-1, n, err, id-3)
			}
		}
	}
	s.complete(t, 8)
	s.checkpoint(t, 9)
	s.complete(t, 9)
	e.wantRows(t, "at the end", "up", "a=8")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
