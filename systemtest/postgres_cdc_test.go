package systemtest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/faultinject"
	"github.com/goflink/goflink/internal/pgtest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// CDC end to end with TaskManager kills (issue 19): postgres-cdc → key-by id → the postgres
// sink upserting by id with op-field op, exactly-once, copying a table that a writer changes
// meanwhile into another one, on real processes.

const (
	// cdcChaosRows is how many rows the source table holds before the job starts: more than
	// the network buffers between the source and the sinks hold (about 20,000), so that a
	// sink that cannot write stops the snapshot.
	cdcChaosRows = 50000
	// cdcChaosSlot is the job's replication slot.
	cdcChaosSlot = "chaos_slot"
	// The log lines of the source that tell its phases.
	cdcLogSnapshot  = "postgres-cdc: created replication slot; reading the snapshot"
	cdcLogStreaming = "postgres-cdc: read the snapshot; streaming changes"
	cdcLogDropped   = "postgres-cdc: dropped the replication slot of an earlier attempt"
)

// TestChaosCDCPostgres copies a table's change stream into another table while a writer
// inserts, updates and deletes rows of it (some in multi-statement transactions, some rolled
// back) and TaskManagers die under the job:
//
//  1. The TaskManager running the source is SIGKILLed in the snapshot phase, as soon as it
//     logs that it created the slot, while the test holds a lock on the target table that
//     keeps the sinks from writing, so the snapshot cannot end before the kill (the killed
//     TaskManager's log shows it did not): the next attempt restores no checkpoint, drops
//     the slot its predecessor left and reads the table anew.
//  2. Its replacement SIGKILLs itself between PREPARE TRANSACTION and COMMIT PREPARED (fault
//     point before-commit, at a seeded notification; its log says the point fired): the test
//     sees the prepared transaction while no TaskManager is free to run the job, and the
//     restore commits it. (Rarely the transaction holds no row, all of them carried to the
//     next checkpoint, and nothing is prepared; the run says so.)
//  3. Once the job runs again and a checkpoint completed after the restore (the streaming
//     phase), a TaskManager running its tasks is SIGKILLed at a seeded time.
//
// When the writer stopped, the target table ends equal to the source table, and the slot
// confirmed a position at or after the end of the WAL at that moment. A cancel then leaves
// no prepared transaction.
//
// GOFLINK_CDC_CHAOS_SEEDS sets the seeds (as GOFLINK_CHAOS_SEEDS does); the default is 2.
func TestChaosCDCPostgres(t *testing.T) {
	skipShort(t)
	for _, seed := range seedsFrom(t, "GOFLINK_CDC_CHAOS_SEEDS", "2") {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { cdcChaosRun(t, seed) })
	}
}

func cdcChaosRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0xc2b2ae35))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	// Triggers record every change of both tables after the initial rows in history, with
	// its transaction and WAL position: a failure shows the changes of the rows that differ.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE src (id bigint PRIMARY KEY, v bigint NOT NULL);
		INSERT INTO src SELECT i, 0 FROM generate_series(1, %d) i;
		CREATE TABLE dst (id bigint PRIMARY KEY, v bigint NOT NULL);
		CREATE TABLE history (seq bigserial PRIMARY KEY, tab text NOT NULL, op text NOT NULL, id bigint NOT NULL, v bigint, xid text NOT NULL, lsn pg_lsn NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE FUNCTION record_history() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF TG_OP = 'DELETE' THEN
				INSERT INTO history (tab, op, id, v, xid, lsn) VALUES (TG_TABLE_NAME, TG_OP, OLD.id, NULL, pg_current_xact_id()::text, pg_current_wal_insert_lsn());
			ELSE
				INSERT INTO history (tab, op, id, v, xid, lsn) VALUES (TG_TABLE_NAME, TG_OP, NEW.id, NEW.v, pg_current_xact_id()::text, pg_current_wal_insert_lsn());
			END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER src_history AFTER INSERT OR UPDATE OR DELETE ON src FOR EACH ROW EXECUTE FUNCTION record_history();
		CREATE TRIGGER dst_history AFTER INSERT OR UPDATE OR DELETE ON dst FOR EACH ROW EXECUTE FUNCTION record_history()`, cdcChaosRows)); err != nil {
		t.Fatal(err)
	}

	// Two TaskManagers of one slot each, the job's two: after a kill it waits for the test to
	// start a TaskManager, so the database can be looked at before any restore.
	c := startClusterOf(t, proccluster.Options{TaskManagers: 2, Slots: 1})
	cl := c.newClient()
	live := map[string]*proccluster.Proc{}
	for i, p := range c.TMs {
		live[fmt.Sprintf("tm-%d", i)] = p
	}
	var log []string
	start := currentLSN(t, ctx, conn)
	w := startChaosWriter(t, ctx, srv, rng.Uint64())
	// The first attempt's sinks cannot write until the kill: its snapshot stops when the
	// buffers to them are full.
	lock := srv.Connect(t)
	if _, err := lock.Exec(ctx, "BEGIN; LOCK TABLE dst IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	id := c.submit(cdcChaosSpec(t, fmt.Sprintf("cdc-chaos-%d", seed), srv))

	// 1. A kill in the snapshot phase.
	var victim string
	poll.Until(t, time.Minute, "a TaskManager to create the slot", func() error {
		for name, p := range live {
			if out, _ := p.Output(); strings.Contains(out, cdcLogSnapshot) {
				victim = name
				return nil
			}
		}
		return fmt.Errorf("no TaskManager logged %q", cdcLogSnapshot)
	})
	d, err := cl.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	at := live[victim].Kill()
	if out, _ := live[victim].Output(); strings.Contains(out, cdcLogStreaming) {
		t.Fatalf("%s read the whole snapshot of %d rows before the kill: the kill was not in the snapshot phase", victim, cdcChaosRows)
	}
	delete(live, victim)
	if _, err := lock.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	commitAt := 4 + rng.IntN(5) // past the first checkpoints after the snapshot, which catch up on its rows
	armed := c.startArmed(ctx, fmt.Sprintf("%s@%d", faultinject.BeforeCommit, commitAt), "tm-a0")
	live["tm-a0"] = armed[0]
	restarts, ok := waitRestart(t, ctx, cl, id, d.GetRestarts())
	if !ok {
		t.Fatal("the unbounded job ended after a TaskManager kill")
	}
	log = append(log, fmt.Sprintf("kill %s in the snapshot phase (%s) → restart %d", victim, at.Format("15:04:05.000"), restarts))

	// The next attempt starts over: no checkpoint to restore, its source drops the slot the
	// killed one left.
	if d = waitJobRunning(t, ctx, cl, id); d == nil {
		t.Fatal("the unbounded job ended")
	}
	if r := d.GetRestoredCheckpointId(); r != 0 {
		t.Fatalf("the job restored checkpoint %d after a kill in the snapshot phase, which declines checkpoints", r)
	}
	poll.Until(t, time.Minute, "the next attempt to drop the slot of the killed one", func() error {
		for _, p := range live {
			if out, _ := p.Output(); strings.Contains(out, cdcLogDropped) {
				return nil
			}
		}
		return fmt.Errorf("no TaskManager logged %q", cdcLogDropped)
	})

	// 2. A kill between PREPARE TRANSACTION and COMMIT PREPARED leaves it prepared.
	dead := waitSelfKilled(t, ctx, armed, faultinject.BeforeCommit, func() {})
	delete(live, dead)
	poll.Until(t, time.Minute, "the job to notice the dead TaskManager", func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if d.GetRestarts() == restarts && d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING {
			return fmt.Errorf("job %v, %d restarts", d.GetStatus(), d.GetRestarts())
		}
		return nil
	})
	// Its transaction may hold no row, and nothing is prepared: its barrier carried them all
	// (see the postgres sink's row locks). The other sink's are committed.
	prepared := preparedXacts(t, ctx, conn)
	if len(prepared) == 0 {
		log = append(log, fmt.Sprintf("%s killed before commit %d of a transaction without rows: none prepared", dead, commitAt))
	} else {
		log = append(log, fmt.Sprintf("%s killed before commit %d, leaving prepared %v", dead, commitAt, prepared))
	}
	live["tm-b0"] = c.startTM("tm-b0")

	// 3. A kill in the streaming phase, after a checkpoint of the restored job completed.
	if d = waitJobRunning(t, ctx, cl, id); d == nil {
		t.Fatal("the unbounded job ended")
	}
	restored := waitCheckpointAfter(t, ctx, cl, id, d.GetRestoredCheckpointId())
	if d = jobAfter(t, ctx, cl, id, time.Duration(200+rng.IntN(1500))*time.Millisecond); d == nil {
		t.Fatal("the unbounded job ended")
	}
	if victim = pickVictim(d, live, rng); victim == "" {
		t.Fatalf("no live TaskManager runs a task of the job: %v", d.GetTasks())
	}
	at = live[victim].Kill()
	delete(live, victim)
	live["tm-b1"] = c.startTM("tm-b1")
	if restarts, ok = waitRestart(t, ctx, cl, id, d.GetRestarts()); !ok {
		t.Fatal("the unbounded job ended after a TaskManager kill")
	}
	log = append(log, fmt.Sprintf("kill %s after checkpoint %d completed (%s) → restart %d", victim, restored, at.Format("15:04:05.000"), restarts))

	// The writer stops once the job streams again: its last changes come after every kill.
	if d = waitJobRunning(t, ctx, cl, id); d == nil {
		t.Fatal("the unbounded job ended")
	}
	waitCheckpointAfter(t, ctx, cl, id, d.GetRestoredCheckpointId())
	changes, err := w.halt()
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	end := currentLSN(t, ctx, conn)
	want, err := pgtest.KeyValues(ctx, conn, "SELECT id, v FROM src")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the target table to equal the source table", func() error {
		got, err := pgtest.KeyValues(ctx, conn, "SELECT id, v FROM dst")
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			d, _ := cl.Job(ctx, id)
			return fmt.Errorf("dst has %d rows, src %d: %s (job %v, %d restarts, %s; faults: %v)\n%s",
				len(got), len(want), pgtest.DiffKeyValues(got, want), d.GetStatus(), d.GetRestarts(), d.GetFailureCause(), log, historyOf(ctx, conn, got, want))
		}
		return nil
	})
	var confirmed string
	poll.Until(t, time.Minute, "the slot to confirm "+end, func() error {
		var ok *bool
		var lsn *string
		err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
			cdcChaosSlot, end).Scan(&ok, &lsn)
		if err != nil {
			return err
		}
		if ok == nil || !*ok {
			return fmt.Errorf("confirmed_flush_lsn %v", lsn)
		}
		confirmed = *lsn
		return nil
	})

	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	var last *pb.JobDetails
	poll.Until(t, time.Minute, "the job to be canceled", func() (err error) {
		if last, err = cl.Job(ctx, id); err != nil {
			return err
		}
		switch {
		case last.GetStatus() == pb.JobStatus_JOB_STATUS_CANCELED:
			return nil
		case client.IsTerminal(last.GetStatus()):
			return poll.Stop(fmt.Errorf("job ended %v: %s", last.GetStatus(), last.GetFailureCause()))
		}
		return fmt.Errorf("job %v", last.GetStatus())
	})
	waitNoPreparedXacts(t, ctx, conn, "after the cancel")
	if last.GetRestarts() < 3 {
		t.Errorf("%d restarts after 3 kills (%v)", last.GetRestarts(), log)
	}
	t.Logf("seed %d: %d restarts: %v; %d writer transactions; %d rows equal in both tables; the slot confirmed %s ≥ %s (the WAL began at %s)",
		seed, last.GetRestarts(), log, changes, len(want), confirmed, end, start)
}

// cdcChaosSpec writes the job: postgres-cdc reading src from slot cdcChaosSlot, keyed by id,
// into the exactly-once postgres sink upserting dst by id with op-field op; checkpoints every
// 200 ms, fixed-delay restarts.
func cdcChaosSpec(t *testing.T, name string, srv *pgtest.Server) string {
	dsn := srv.DSN(srv.Database)
	return writeSpec(t, fmt.Sprintf(`name: %s
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
  execution.checkpointing.dir: %s
  execution.checkpointing.tolerable-failed-checkpoints: 1000
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 100
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: src, type: postgres-cdc, dsn: %q, table: src, slot: %s, schema: {id: int64, v: int64}}
  - {name: by-id, type: key-by, key: id}
  - {name: out, type: postgres, dsn: %q, table: dst, mode: upsert, key: [id], op-field: op, delivery-guarantee: exactly-once, batch-size: 50}
`, name, filepath.Join(t.TempDir(), "checkpoints"), dsn, cdcChaosSlot, dsn))
}

// waitCheckpointAfter waits until a checkpoint after after completed, and returns its ID.
func waitCheckpointAfter(t *testing.T, ctx context.Context, cl *client.Client, id string, after int64) int64 {
	t.Helper()
	var done int64
	poll.Until(t, time.Minute, fmt.Sprintf("a checkpoint after %d", after), func() error {
		cps, err := cl.Checkpoints(ctx, id)
		if err != nil {
			return err
		}
		for _, cp := range cps {
			if cp.GetId() > after && cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && !cp.GetSavepoint() {
				done = cp.GetId()
				return nil
			}
		}
		return fmt.Errorf("no checkpoint after %d completed", after)
	})
	return done
}

// currentLSN is the server's pg_current_wal_lsn().
func currentLSN(t *testing.T, ctx context.Context, conn *pgx.Conn) string {
	t.Helper()
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// chaosWriter changes the table src (id bigint PRIMARY KEY, v bigint) while a job copies it,
// on its own connection, one transaction every few milliseconds until halted: inserts of
// new ids, updates of live ids (v = v + 1) and deletes of live ids, a seeded mix of single
// statements and transactions of several, a tenth of those rolled back.
type chaosWriter struct {
	stop chan struct{} // closed by halt
	done chan struct{} // closed when the goroutine ended
	err  error         // the first failure (read after done)
	txns int           // transactions committed (read after done)
}

// chaosWriterPace is the time between two of the writer's transactions.
const chaosWriterPace = 3 * time.Millisecond

// startChaosWriter starts the writer; it is halted when the test ends at the latest.
func startChaosWriter(t *testing.T, ctx context.Context, srv *pgtest.Server, seed uint64) *chaosWriter {
	t.Helper()
	conn, err := pgx.Connect(ctx, srv.DSN(srv.Database))
	if err != nil {
		t.Fatal(err)
	}
	w := &chaosWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		w.err = w.run(ctx, conn, rand.New(rand.NewPCG(seed, seed^0x27d4eb2f)))
	}()
	t.Cleanup(func() { _, _ = w.halt() }) // the test reads the writer's error where it stops it
	return w
}

// halt stops the writer after its transaction in progress and returns how many it committed
// and its failure.
func (w *chaosWriter) halt() (int, error) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.txns, w.err
}

func (w *chaosWriter) run(ctx context.Context, conn *pgx.Conn, rng *rand.Rand) error {
	// live holds the ids src has (the writer is its only other writer), at holds each one's
	// index in live.
	live := make([]int64, 0, cdcChaosRows)
	at := map[int64]int{}
	for id := int64(1); id <= cdcChaosRows; id++ {
		at[id] = len(live)
		live = append(live, id)
	}
	remove := func(id int64) { // a transaction may delete an id twice
		i, ok := at[id]
		if !ok {
			return
		}
		last := live[len(live)-1]
		live[i], at[last] = last, i
		live = live[:len(live)-1]
		delete(at, id)
	}
	next := int64(cdcChaosRows + 1)
	tick := time.NewTicker(chaosWriterPace)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		n, rollback := 1, false
		if rng.IntN(3) == 0 {
			n, rollback = 2+rng.IntN(4), rng.IntN(10) == 0
		}
		// A transaction rolled back leaves live as it was: its statements are chosen on a
		// view of live that they do not change (its inserts take ids no one uses again).
		var sqls []string
		for range n {
			switch r := rng.IntN(10); {
			case r < 4 || len(live) == 0:
				sqls = append(sqls, fmt.Sprintf("INSERT INTO src VALUES (%d, 0)", next))
				if !rollback {
					at[next] = len(live)
					live = append(live, next)
				}
				next++
			case r < 8:
				sqls = append(sqls, fmt.Sprintf("UPDATE src SET v = v + 1 WHERE id = %d", live[rng.IntN(len(live))]))
			default:
				id := live[rng.IntN(len(live))]
				sqls = append(sqls, fmt.Sprintf("DELETE FROM src WHERE id = %d", id))
				if !rollback {
					remove(id)
				}
			}
		}
		if n > 1 {
			end := "COMMIT"
			if rollback {
				end = "ROLLBACK"
			}
			sqls = append(append([]string{"BEGIN"}, sqls...), end)
		}
		for _, sql := range sqls {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		if !rollback {
			w.txns++
		}
	}
}

// historyOf shows the changes of the ids in which got and want differ (at most a few).
func historyOf(ctx context.Context, conn *pgx.Conn, got, want map[int64]int64) string {
	var ids []int64
	for id, v := range want {
		if g, ok := got[id]; !ok || g != v {
			ids = append(ids, id)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			ids = append(ids, id)
		}
	}
	ids = ids[:min(len(ids), 5)]
	rows, err := conn.Query(ctx, "SELECT seq, tab, op, id, coalesce(v, -1), xid, lsn::text, to_char(at, 'HH24:MI:SS.MS') FROM history WHERE id = ANY($1) ORDER BY id, seq", ids)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	var seq, id, v int64
	var tab, op, xid, lsn, at string
	_, err = pgx.ForEachRow(rows, []any{&seq, &tab, &op, &id, &v, &xid, &lsn, &at}, func() error {
		fmt.Fprintf(&b, "  %d %s %s id=%d v=%d xid=%s lsn=%s at=%s\n", seq, tab, op, id, v, xid, lsn, at)
		return nil
	})
	if err != nil {
		return err.Error()
	}
	return b.String()
}
