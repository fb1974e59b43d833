package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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

// The exactly-once PostgreSQL sink with real processes (issue 19, acceptance 1): sequence →
// key-by → count → postgres sink (mode insert, PREPARE TRANSACTION at each barrier, COMMIT
// PREPARED when the checkpoint completed) on a private PostgreSQL server (pgtest).

const (
	pgKeys    = 8
	pgRecords = 2400 // 300 per key
	pgRate    = 240  // records per second over the whole job: about 10 s of input
)

// TestChaosExactlyOncePostgres kills TaskManagers under the exactly-once PostgreSQL sink:
//
//  1. Both TaskManagers SIGKILL themselves between a PREPARE TRANSACTION and its COMMIT
//     PREPARED (fault point before-commit, at a seeded notification): the test sees the
//     prepared transactions in pg_prepared_xacts while no TaskManager runs the job, and the
//     restore must commit them.
//  2. Once the job runs again on replacements, a TaskManager running its tasks is SIGKILLed
//     at a seeded time.
//
// When the job has finished, the table holds the failure-free result exactly: every (key,
// seq) once with its running count seq+1, and no prepared transaction is left.
func TestChaosExactlyOncePostgres(t *testing.T) {
	skipShort(t)
	for _, seed := range seedsFrom(t, "GOFLINK_PG_CHAOS_SEEDS", "2") {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { pgChaosRun(t, seed) })
	}
}

func pgChaosRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x85ebca6b))
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createCountsTable(t, ctx, conn)

	// No spare slot: after the self-kill the job waits for the test to start a TaskManager,
	// so the database can be looked at before any restore.
	c := startClusterOf(t, proccluster.Options{TaskManagers: 0, Slots: 1})
	cl := c.newClient()
	commitAt := 3 + rng.IntN(6)
	tms := c.startArmed(ctx, fmt.Sprintf("%s@%d", faultinject.BeforeCommit, commitAt), "tm-a0", "tm-a1")
	id := c.submit(pgSpec(t, fmt.Sprintf("pg-chaos-%d", seed), srv, pgRecords, pgRate, ""))
	var log []string

	// 1. A kill between PREPARE TRANSACTION and COMMIT PREPARED leaves it prepared.
	dead := waitSelfKilled(t, ctx, tms, faultinject.BeforeCommit, func() {})
	poll.Until(t, time.Minute, "the job to notice the dead TaskManager", func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if d.GetRestarts() == 0 && d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING {
			return fmt.Errorf("job %v, %d restarts", d.GetStatus(), d.GetRestarts())
		}
		return nil
	})
	prepared := preparedXacts(t, ctx, conn)
	if len(prepared) == 0 {
		t.Fatalf("%s killed itself before a commit, but no transaction is prepared", dead)
	}
	log = append(log, fmt.Sprintf("%s killed before commit %d, leaving prepared %v", dead, commitAt, prepared))

	// Unarmed TaskManagers replace the dead ones, now and whenever one dies (the survivor of
	// step 1 is still armed, and may reach its fault point later).
	live := map[string]*proccluster.Proc{}
	for _, p := range tms {
		live[p.Name] = p
	}
	replaced := 0
	replaceDead := func() {
		for name, p := range live {
			if exited(p) {
				delete(live, name)
				next := fmt.Sprintf("tm-b%d", replaced)
				live[next] = c.startTM(next)
				replaced++
			}
		}
	}
	replaceDead()

	// 2. A TaskManager running tasks of the job is SIGKILLed at a seeded time.
	poll.Until(t, time.Minute, "the job running with every task", func() error {
		replaceDead()
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if client.IsTerminal(d.GetStatus()) {
			return poll.Stop(fmt.Errorf("job ended %v: %s (faults: %v)", d.GetStatus(), d.GetFailureCause(), log))
		}
		if !allRunning(d) {
			return fmt.Errorf("job %v", d.GetStatus())
		}
		return nil
	})
	kills := 0
	if d := jobAfter(t, ctx, cl, id, time.Duration(300+rng.IntN(2500))*time.Millisecond); d == nil {
		log = append(log, "the job ended before the random kill")
	} else if victim := pickVictim(d, live, rng); victim == "" {
		t.Fatalf("no live TaskManager runs a task of the job: %v", d.GetTasks())
	} else {
		at := live[victim].Kill()
		replaceDead()
		if restarts, ok := waitRestart(t, ctx, cl, id, d.GetRestarts()); ok {
			kills++
			log = append(log, fmt.Sprintf("kill %s (%s) → restart %d", victim, at.Format("15:04:05.000"), restarts))
		} else {
			log = append(log, fmt.Sprintf("kill %s: the job had ended, no fault", victim))
		}
	}

	var last *pb.JobDetails
	err := poll.Wait(ctx, func() (err error) {
		replaceDead()
		if last, err = cl.Job(ctx, id); err != nil {
			return err
		}
		if !client.IsTerminal(last.GetStatus()) {
			return fmt.Errorf("job %v", last.GetStatus())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %d: the job did not end: %v\nfaults: %v", seed, err, log)
	}
	if replaced > 0 {
		log = append(log, fmt.Sprintf("%d TaskManagers replaced", replaced))
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("seed %d: job ended %v: %s\nfaults: %v", seed, last.GetStatus(), last.GetFailureCause(), log)
	}
	if last.GetRestarts() < int32(1+kills) {
		t.Errorf("seed %d: %d restarts after a self-kill and %d kills (%v)", seed, last.GetRestarts(), kills, log)
	}
	waitNoPreparedXacts(t, ctx, conn, "after the job finished")
	rows := checkPGCounts(t, ctx, conn, true)
	t.Logf("seed %d: %d restarts: %v; %d committed rows, each (key, seq) exactly once with count = seq+1",
		seed, last.GetRestarts(), log, rows)
}

// TestCancelLeavesNoPreparedTransactionPostgres cancels an unbounded job with the
// exactly-once PostgreSQL sink after a TaskManager was SIGKILLed under it, while its sinks
// hold prepared transactions no checkpoint will complete (the checkpoint directory became a
// file: every checkpoint since fails). PostgreSQL never ends a prepared transaction by itself,
// and it holds its locks until it ends: after the cancel none of the job's may be left. The
// table then holds the output of the last completed checkpoint, each (key, seq) at most once
// with count = seq+1 and a gapless prefix of seqs per key.
func TestCancelLeavesNoPreparedTransactionPostgres(t *testing.T) {
	skipShort(t)
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createCountsTable(t, ctx, conn)

	c := startCluster(t, 3, 1) // a spare slot for the restart
	cl := c.newClient()
	chk := filepath.Join(t.TempDir(), "checkpoints")
	id := c.submit(pgSpec(t, "pg-cancel", srv, 0, pgRate, chk))
	d := waitJobRunning(t, ctx, cl, id)
	waitCompletedCheckpoints(t, ctx, cl, id, 2)

	live := map[string]*proccluster.Proc{}
	for i, p := range c.TMs {
		live[fmt.Sprintf("tm-%d", i)] = p
	}
	victim := pickVictim(d, live, rand.New(rand.NewPCG(1, 2)))
	if victim == "" {
		t.Fatalf("no TaskManager runs a task of the job: %v", d.GetTasks())
	}
	live[victim].Kill()
	delete(live, victim)
	if _, ok := waitRestart(t, ctx, cl, id, d.GetRestarts()); !ok {
		t.Fatal("the unbounded job ended after a TaskManager kill")
	}
	d = waitJobRunning(t, ctx, cl, id)
	if d == nil {
		t.Fatal("the unbounded job ended")
	}
	// The restored sinks committed what the restored checkpoint holds; a checkpoint after
	// the restore completes.
	restored := d.GetRestoredCheckpointId()
	poll.Until(t, time.Minute, "a checkpoint after the restore", func() error {
		cps, err := cl.Checkpoints(ctx, id)
		if err != nil {
			return err
		}
		for _, cp := range cps {
			if cp.GetId() > restored && cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				return nil
			}
		}
		return fmt.Errorf("no checkpoint after %d completed", restored)
	})

	// From now on every checkpoint fails: the sinks prepare a transaction at each barrier,
	// and none is committed.
	if err := os.Rename(chk, chk+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	broken := time.Now()
	poll.Until(t, time.Minute, "failed checkpoints with transactions prepared for them", func() error {
		cps, err := cl.Checkpoints(ctx, id)
		if err != nil {
			return err
		}
		failed := 0
		for _, cp := range cps {
			if cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED && cp.GetTriggerTime().AsTime().After(broken) {
				failed++
			}
		}
		if failed < 2 {
			return fmt.Errorf("%d checkpoints failed since the directory became a file", failed)
		}
		if p := preparedXacts(t, ctx, conn); len(p) < 2 {
			return fmt.Errorf("prepared: %v", p)
		}
		return nil
	})
	prepared := preparedXacts(t, ctx, conn)

	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	pollJob(t, cl, id, time.Minute, func(d *pb.JobDetails) bool { return d.GetStatus() == pb.JobStatus_JOB_STATUS_CANCELED })
	waitNoPreparedXacts(t, ctx, conn, fmt.Sprintf("after the cancel (%d were prepared before it)", len(prepared)))
	rows := checkPGCounts(t, ctx, conn, false)
	// A sink task may see its producer's release before its own CancelTask: it ends its
	// transactions all the same (the release says the job ended).
	viaProducer := 0
	for _, p := range c.Procs() {
		out, _ := p.Output()
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "its producer was canceled") && strings.Contains(line, "-> out") {
				viaProducer++
			}
		}
	}
	t.Logf("%d transactions prepared at the cancel, none left after it (%d sink tasks canceled by their producer's release); %d committed rows, each (key, seq) at most once with count = seq+1, gapless per key",
		len(prepared), viaProducer, rows)
}

// createCountsTable creates the sink's table: no key, so that a duplicate row shows.
func createCountsTable(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(ctx, "CREATE TABLE counts (key bigint NOT NULL, seq bigint NOT NULL, count bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
}

// pgSpec writes an exactly-once job of pgKeys keys: a sequence of records (unbounded when
// records is 0) at rate made (key, seq) records, counted per key into the table counts in
// mode insert; checkpoints in chkDir (a temporary directory when ""), fixed-delay restarts.
func pgSpec(t *testing.T, name string, srv *pgtest.Server, records, rate int, chkDir string) string {
	if chkDir == "" {
		chkDir = filepath.Join(t.TempDir(), "checkpoints")
	}
	to := ""
	if records > 0 {
		to = fmt.Sprintf(", to: %d", records-1)
	}
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
  - {name: numbers, type: sequence, from: 0%s, rate: %d}
  - {name: keyed, type: map, fields: {key: "value %% %d", seq: "int(value / %d)"}}
  - {name: by-key, type: key-by, key: key}
  - {name: counts, type: count}
  - {name: out, type: postgres, dsn: %q, table: counts, mode: insert, batch-size: 20, delivery-guarantee: exactly-once}
`, name, chkDir, to, rate, pgKeys, pgKeys, srv.DSN(srv.Database)))
}

// preparedXacts lists the GIDs of the server's prepared transactions.
func preparedXacts(t *testing.T, ctx context.Context, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts ORDER BY gid")
	if err != nil {
		t.Fatalf("list prepared transactions: %v", err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("list prepared transactions: %v", err)
	}
	return gids
}

// waitNoPreparedXacts waits until pg_prepared_xacts is empty.
func waitNoPreparedXacts(t *testing.T, ctx context.Context, conn *pgx.Conn, when string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "no prepared transaction left "+when, func() error {
		if left := preparedXacts(t, ctx, conn); len(left) > 0 {
			return fmt.Errorf("prepared: %v", left)
		}
		return nil
	})
}

// checkPGCounts checks the table counts and returns its number of rows: every (key, seq) at
// most once with count seq+1, the seqs of a key gapless from 0; complete: every (key, seq) of
// pgRecords exactly once.
func checkPGCounts(t *testing.T, ctx context.Context, conn *pgx.Conn, complete bool) int {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT key, seq, count FROM counts")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]int64]int{}
	maxSeq := map[int64]int64{}
	n := 0
	for rows.Next() {
		var key, seq, count int64
		if err := rows.Scan(&key, &seq, &count); err != nil {
			t.Fatal(err)
		}
		n++
		if key < 0 || key >= pgKeys || seq < 0 || complete && seq >= pgRecords/pgKeys {
			t.Errorf("row (%d, %d, %d) out of range", key, seq, count)
			continue
		}
		seen[[2]int64{key, seq}]++
		if m, ok := maxSeq[key]; !ok || seq > m {
			maxSeq[key] = seq
		}
		if count != seq+1 {
			t.Errorf("key %d seq %d has count %d, want %d: the keyed state saw a record twice or missed one", key, seq, count, seq+1)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for key := range int64(pgKeys) {
		last, ok := maxSeq[key]
		switch {
		case complete:
			last = pgRecords/pgKeys - 1
		case !ok:
			continue
		}
		for seq := range last + 1 {
			if k := seen[[2]int64{key, seq}]; k != 1 {
				t.Errorf("key %d seq %d committed %d times, want exactly once", key, seq, k)
			}
		}
	}
	return n
}
