package integration

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/pgtest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// cdcInitialRows is how many rows the source table holds before the job starts: enough for
// its snapshot to span several checkpoint intervals, which it declines.
const cdcInitialRows = 5000

// cdcWriter changes the source table src (id bigint PRIMARY KEY, v bigint) while a job reads
// it: inserts of new ids with v = 0, updates setting v to the next value of their id,
// deletes, some of them in multi-statement transactions. Every value of an id is set once.
type cdcWriter struct {
	wg   sync.WaitGroup
	err  error         // the first failure (read after wait)
	stop chan struct{} // closed to end early
}

// startCDCWriter runs the writer on its own connection: steps changes, one every pace.
func startCDCWriter(t *testing.T, srv *pgtest.Server, steps int, pace time.Duration) *cdcWriter {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), srv.DSN(srv.Database))
	if err != nil {
		t.Fatal(err)
	}
	w := &cdcWriter{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer conn.Close(context.Background())
		tick := time.NewTicker(pace)
		defer tick.Stop()
		next := int64(cdcInitialRows + 1)
		for i := 0; i < steps; i++ {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			var sqls []string
			switch i % 4 {
			case 0, 1:
				sqls = []string{fmt.Sprintf("INSERT INTO src VALUES (%d, 0)", next)}
				next++
			case 2: // an update of an initial row and of a new one, in one transaction
				sqls = []string{"BEGIN", fmt.Sprintf("UPDATE src SET v = v + 1 WHERE id = %d", 1+i%cdcInitialRows),
					fmt.Sprintf("UPDATE src SET v = v + 1 WHERE id = %d", next-1), "COMMIT"}
			case 3:
				sqls = []string{fmt.Sprintf("DELETE FROM src WHERE id = %d", cdcInitialRows-i)}
			}
			for _, sql := range sqls {
				if _, err := conn.Exec(context.Background(), sql); err != nil {
					w.err = fmt.Errorf("%s: %w", sql, err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() { w.halt() })
	return w
}

// wait waits for the writer to end and returns its failure.
func (w *cdcWriter) wait() error {
	w.wg.Wait()
	return w.err
}

func (w *cdcWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// startCDCTable starts PostgreSQL with the source table and its initial rows.
func startCDCTable(t *testing.T, ctx context.Context) (*pgtest.Server, *pgx.Conn) {
	t.Helper()
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE src (id bigint PRIMARY KEY, v bigint NOT NULL);
		INSERT INTO src SELECT i, 0 FROM generate_series(1, %d) i`, cdcInitialRows)); err != nil {
		t.Fatal(err)
	}
	return srv, conn
}

// waitSlot waits until the job created its slot: the changes written after it are streamed
// (the injected failures wait for updates, which the snapshot does not show).
func waitSlot(t *testing.T, ctx context.Context, conn *pgx.Conn, slot string) {
	t.Helper()
	poll.Until(t, testTimeout, "the slot "+slot, func() error {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no slot")
		}
		return nil
	})
}

// waitConfirmed waits until the slot confirmed a position at or after lsn.
func waitConfirmed(t *testing.T, ctx context.Context, conn *pgx.Conn, slot, lsn string) {
	t.Helper()
	poll.Until(t, testTimeout, "the slot to confirm "+lsn, func() error {
		var ok *bool
		var confirmed *string
		err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot, lsn).Scan(&ok, &confirmed)
		if err != nil {
			return err
		}
		if ok == nil || !*ok {
			return fmt.Errorf("confirmed_flush_lsn %v", confirmed)
		}
		return nil
	})
}

// cdcConfig is the jobs' configuration: frequent checkpoints, none of whose failures is
// tolerated (the snapshot phase's declines do not count), and quick restarts.
func cdcConfig(t *testing.T) string {
	return fmt.Sprintf(`config:
  execution.checkpointing.interval: 30ms
  execution.checkpointing.tolerable-failed-checkpoints: 0
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 10
  restart-strategy.fixed-delay.delay: 50ms
  execution.checkpointing.dir: %s
`, filepath.Join(t.TempDir(), "checkpoints"))
}

// TestPostgresCDCChangelogExactlyOnce: postgres-cdc → fail → an exactly-once postgres sink
// appending every change to a changelog table, while the source table is changed, with a
// failure in the first attempt and one in the second. Replaying the changelog in order gives
// the source table; no change is in it twice (each value of an id is set once); the slot
// confirms what the job read.
func TestPostgresCDCChangelogExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	srv, conn := startCDCTable(t, ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE changelog (seq bigserial PRIMARY KEY, op text NOT NULL, id bigint NOT NULL, v bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1})
	dsn := srv.DSN(srv.Database)
	spec := fmt.Sprintf(`name: pg-cdc-changelog
parallelism: 1
%soperators:
  - {name: src, type: postgres-cdc, dsn: %q, table: src, slot: changelog_slot, schema: {id: int64, v: int64}}
  - {name: fail1, type: fail, when: "op == 'update_after' && id == 43", attempt: 0}
  - {name: fail2, type: fail, when: "op == 'delete' && id < %d", attempt: 1}
  - {name: out, type: postgres, dsn: %q, table: changelog, delivery-guarantee: exactly-once, batch-size: 100}
`, cdcConfig(t), dsn, cdcInitialRows-150, dsn)
	id := submit(t, ctx, cl, spec)
	waitSlot(t, ctx, conn, "changelog_slot")
	w := startCDCWriter(t, srv, 400, 2*time.Millisecond)
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
	var end string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	want, err := pgtest.KeyValues(ctx, conn, "SELECT id, v FROM src")
	if err != nil {
		t.Fatal(err)
	}
	var dups []string
	poll.Until(t, testTimeout, "the changelog to replay to the source table", func() error {
		rows, err := conn.Query(ctx, "SELECT op, id, v FROM changelog ORDER BY seq")
		if err != nil {
			return err
		}
		got, seen := map[int64]int64{}, map[string]bool{}
		dups = nil
		var op string
		var id, v int64
		_, err = pgx.ForEachRow(rows, []any{&op, &id, &v}, func() error {
			change := fmt.Sprintf("%s %d %d", op, id, v)
			if seen[change] {
				dups = append(dups, change)
			}
			seen[change] = true
			switch op {
			case "insert", "update_after":
				got[id] = v
			case "delete":
				delete(got, id)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("the changelog replays to %d rows: %s", len(got), pgtest.DiffKeyValues(got, want))
		}
		return nil
	})
	if len(dups) > 0 {
		t.Errorf("changes in the changelog twice: %v", dups[:min(len(dups), 10)])
	}
	waitConfirmed(t, ctx, conn, "changelog_slot", end)
	d, err := cl.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetRestarts() < 2 {
		t.Errorf("%d restarts, want the 2 injected failures", d.GetRestarts())
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("job ended %v (%s), want CANCELED", last.GetStatus(), last.GetFailureCause())
	}
	t.Logf("%d restarts, last restored from checkpoint %d; %d checkpoints declined during the snapshot",
		d.GetRestarts(), d.GetRestoredCheckpointId(), declined(t, ctx, cl, id))
}

// declined counts the job's checkpoints in its history that a task declined as not ready
// (the postgres-cdc source reading its snapshot).
func declined(t *testing.T, ctx context.Context, cl *client.Client, id string) int {
	t.Helper()
	cps, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cp := range cps {
		if cp.GetFailureReason() == pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_TASK_NOT_READY {
			n++
		}
	}
	return n
}

// TestPostgresCDCToUpsertSink: postgres-cdc → key-by id → (injected failures) → a postgres
// sink upserting by id with op-field op (upserts for insert and update_after, deletes by key
// for delete, update_before skipped), exactly-once, in 2 subtasks on 2 TaskManagers, while the
// source table is changed: the target table ends equal to the source table, and the slot
// confirms what the job read. The key-by comes right after the source: through a rebalance
// edge (the failures at the job's parallelism reading the source's one subtask) the changes
// of a row would be reordered, a snapshot row's insert overtaken by its delete, which the job
// builder refuses. Exactly-once, because a failure before the first checkpoint of the
// streaming phase restarts the source with a new snapshot, which has no deletes for the rows
// deleted meanwhile: an at-least-once sink would keep the first attempt's rows of them.
func TestPostgresCDCToUpsertSink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	spec := func(dsn, cfg string) string {
		return fmt.Sprintf(`name: pg-cdc-upsert
parallelism: 2
%soperators:
  - {name: src, type: postgres-cdc, dsn: %q, table: src, slot: upsert_slot, schema: {id: int64, v: int64}}
  - {name: by-id, type: key-by, key: id}
  - {name: fail1, type: fail, when: "op == 'update_after' && id == 43", attempt: 0}
  - {name: fail2, type: fail, when: "op == 'delete' && id < %d", attempt: 1}
  - {name: out, type: postgres, dsn: %q, table: dst, mode: upsert, key: [id], op-field: op, delivery-guarantee: exactly-once, batch-size: 50}
`, cfg, dsn, cdcInitialRows-150, dsn)
	}
	srv, conn := startCDCTable(t, ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE dst (id bigint PRIMARY KEY, v bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
	id := submit(t, ctx, cl, spec(srv.DSN(srv.Database), cdcConfig(t)))
	waitSlot(t, ctx, conn, "upsert_slot")
	w := startCDCWriter(t, srv, 400, 2*time.Millisecond)
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
	var end string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	want, err := pgtest.KeyValues(ctx, conn, "SELECT id, v FROM src")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, testTimeout/2, "the target table to equal the source table", func() error {
		got, err := pgtest.KeyValues(ctx, conn, "SELECT id, v FROM dst")
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			d, _ := cl.Job(ctx, id)
			return fmt.Errorf("dst has %d rows: %s (job %v, %d restarts, %s)", len(got), pgtest.DiffKeyValues(got, want), d.GetStatus(), d.GetRestarts(), d.GetFailureCause())
		}
		return nil
	})
	waitConfirmed(t, ctx, conn, "upsert_slot", end)
	d, err := cl.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetRestarts() < 2 {
		t.Errorf("%d restarts, want the 2 injected failures", d.GetRestarts())
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("job ended %v (%s), want CANCELED", last.GetStatus(), last.GetFailureCause())
	}
}
