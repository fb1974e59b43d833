package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/goflink/goflink/internal/pgtest"
	"github.com/goflink/goflink/internal/proccluster"
)

// pgVariant is one configuration of the PostgreSQL sink in the sink comparison.
type pgVariant struct {
	mode, guarantee string
	n               int64 // rows the job writes
	rates           []float64
	restarts        int
}

func (v *pgVariant) String() string { return v.mode + " " + v.guarantee }

// postgresSection measures the PostgreSQL connector against a private PostgreSQL server
// (pgtest.Run: initdb in a temporary directory, on loopback, fsync and synchronous_commit off)
// on one cluster (a JobManager and 2 TaskManager processes, 1 slot each).
//
// Sink: a bounded sequence → map (key, value, label) → postgres sink, parallelism 2,
// checkpoints every -postgres-interval, with delivery-guarantee at-least-once (a transaction
// per batch) and exactly-once (a prepared transaction per subtask and checkpoint), in mode
// insert (COPY) and mode upsert (pipelined INSERT … ON CONFLICT on -keys keys, key-by key
// before the sink so that each key is one subtask's); the runs are
// interleaved, each into a table of its own, whose rows are counted after it. It prints rows/s
// (JobManager start → end) and the ratio exactly-once/at-least-once of the medians per mode.
//
// Source: postgresCDC, the postgres-cdc source's changes/s against the server's own decoding.
func postgresSection(o options) (err error) {
	srv, err := pgtest.Run()
	if srv != nil {
		unregister := onInterrupt(srv.Stop)
		defer func() { srv.Stop(); unregister() }()
	}
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	ctx := context.Background()
	const db = "bench"
	if err := srv.CreateDatabase(ctx, db); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.Background())
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return fmt.Errorf("postgres: server version: %w", err)
	}
	c, err := startCluster(o.bin, 1, 2, 1, false)
	if err != nil {
		return fmt.Errorf("postgres: start the cluster: %w", err)
	}
	defer c.finish(&err)

	variants := []*pgVariant{
		{mode: "insert", guarantee: "at-least-once", n: o.pgN},
		{mode: "insert", guarantee: "exactly-once", n: o.pgN},
	}
	if o.pgUpsertN > 0 {
		variants = append(variants,
			&pgVariant{mode: "upsert", guarantee: "at-least-once", n: o.pgUpsertN},
			&pgVariant{mode: "upsert", guarantee: "exactly-once", n: o.pgUpsertN})
	}
	fmt.Printf("\n== postgres ==\n")
	fmt.Printf("PostgreSQL %s (pgtest: a private server on loopback, fsync and synchronous_commit off), one cluster: a JobManager and 2 TaskManager processes (1 slot each)\n", version)
	fmt.Printf("\nsink: sequence 1..n -> map (key = value %% %d, value, label) -> postgres sink, parallelism 2, batch-size %d, checkpoints every %s (min-pause %s);\n",
		o.keys, o.pgBatch, durText(o.pgInterval), durText(o.pgInterval/4))
	fmt.Printf("mode insert (COPY; n = %d) and upsert (key-by key -> ON CONFLICT (key); n = %d, off when 0), delivery-guarantee at-least-once (a commit per batch)\n", o.pgN, o.pgUpsertN)
	fmt.Printf("against exactly-once (PREPARE TRANSACTION per subtask and checkpoint, COMMIT PREPARED on completion); a table per run, its rows counted;\n")
	fmt.Printf("%d runs each, interleaved with rotating order; rows/s from the JobManager's start to the end of the job\n\n", o.pgRuns)

	run := 0
	err = interleaved(o.pgRuns, len(variants), func(i int) (string, error) {
		vr := variants[i]
		run++
		table := fmt.Sprintf("sink_%s_%d", strings.ReplaceAll(vr.String(), "-", "_"), run)
		table = strings.ReplaceAll(table, " ", "_")
		secs, restarts, err := postgresSinkRun(c, o, srv.DSN(db), conn, vr, table, run)
		if err != nil {
			return "", fmt.Errorf("postgres, %s: %w", vr, err)
		}
		rate := float64(vr.n) / secs
		vr.rates = append(vr.rates, rate)
		vr.restarts += restarts
		part := fmt.Sprintf("%s %.0f k rows/s", vr, rate/1e3)
		if restarts > 0 {
			part += fmt.Sprintf(" (%d %s)", restarts, plural(restarts, "restart"))
		}
		return part, nil
	})
	if err != nil {
		return err
	}
	fmt.Println()
	for _, vr := range variants {
		note := ""
		if vr.restarts > 0 {
			note = fmt.Sprintf("; %d %s", vr.restarts, plural(vr.restarts, "restart"))
		}
		fmt.Printf("  %-34s %8.0f k rows/s (median of %d%s)\n", vr.String()+":", median(vr.rates)/1e3, len(vr.rates), note)
	}
	for i := 0; i+1 < len(variants); i += 2 {
		alo, eo := variants[i], variants[i+1]
		var each []string
		for r := range eo.rates {
			each = append(each, fmt.Sprintf("%.3f", eo.rates[r]/alo.rates[r]))
		}
		fmt.Printf("  %-34s %8.3f (same-round: %s; informational, no target)\n",
			"ratio exactly-once/at-least-once, "+alo.mode+":", median(eo.rates)/median(alo.rates), strings.Join(each, ", "))
	}
	return postgresCDC(c, o, srv)
}

// postgresSinkRun runs the sink job of vr once into a new table and checks its rows: n in
// mode insert, one per key in mode upsert. It returns the job's seconds and restarts.
func postgresSinkRun(c *cluster, o options, dsn string, conn *pgx.Conn, vr *pgVariant, table string, run int) (float64, int, error) {
	ctx := context.Background()
	ddl := "CREATE TABLE " + table + " (key bigint NOT NULL, value bigint NOT NULL, label text NOT NULL)"
	sink := fmt.Sprintf("{name: out, type: postgres, dsn: %q, table: %s, mode: %s, batch-size: %d, delivery-guarantee: %s}",
		dsn, table, vr.mode, o.pgBatch, vr.guarantee)
	route := ""
	if vr.mode == "upsert" {
		ddl = "CREATE TABLE " + table + " (key bigint PRIMARY KEY, value bigint NOT NULL, label text NOT NULL)"
		sink = strings.Replace(sink, "mode: upsert", "mode: upsert, key: [key]", 1)
		// Each key's rows to one subtask: otherwise the subtasks' transactions wait for each
		// other's row locks, which exactly-once holds until the checkpoint completes.
		route = "  - {name: by-key, type: key-by, key: key}\n"
	}
	if _, err := conn.Exec(ctx, ddl); err != nil {
		return 0, 0, fmt.Errorf("create table %s: %w", table, err)
	}
	spec, err := c.writeSpec(fmt.Sprintf("pg-sink-%d", run), fmt.Sprintf(`name: bench-postgres-%d
parallelism: 2
%soperators:
  - {name: numbers, type: sequence, from: 1, to: %d}
  - {name: row, type: map, fields: {key: "value %% %d", value: value, label: "'record-' + string(value)"}}
%s  - %s
`, run, checkpointConfig(fmt.Sprintf("%dms", o.pgInterval.Milliseconds()), filepath.Join(c.dir, "pg-checkpoints"),
		"execution.checkpointing.min-pause", fmt.Sprintf("%dms", (o.pgInterval/4).Milliseconds())), vr.n, o.keys, route, sink))
	if err != nil {
		return 0, 0, err
	}
	st, secs, err := c.runToEnd(spec)
	if err != nil {
		return 0, 0, err
	}
	want := vr.n
	if vr.mode == "upsert" {
		want = min(vr.n, int64(o.keys))
	}
	var rows int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		return 0, 0, fmt.Errorf("count the rows of %s: %w", table, err)
	}
	switch {
	case vr.guarantee == "at-least-once" && vr.mode == "insert" && rows >= want && st.Restarts > 0:
		// A restart may write rows again.
	case rows != want:
		return 0, 0, fmt.Errorf("%s holds %d rows after the job, want %d (%d restarts)", table, rows, want, st.Restarts)
	}
	var prepared int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared); err != nil {
		return 0, 0, fmt.Errorf("count prepared transactions: %w", err)
	}
	if prepared > 0 {
		return 0, 0, fmt.Errorf("%d prepared transactions left after the job finished", prepared)
	}
	if _, err := conn.Exec(ctx, "DROP TABLE "+table); err != nil {
		return 0, 0, fmt.Errorf("drop table %s: %w", table, err)
	}
	return secs, st.Restarts, nil
}

// cdcInterval is the checkpoint interval of the CDC runs: the source confirms a position to
// the server only when a checkpoint completes, so it bounds how late the end is seen.
const cdcInterval = 200 * time.Millisecond

// postgresCDC measures the postgres-cdc source's streaming phase on the same server and
// cluster: a job postgres-cdc → discard reads a table that is empty when it starts (the
// snapshot is trivial); once its first checkpoint completed, -postgres-cdc-n rows are
// inserted, then updated, then deleted, one statement (transaction) each: 3n changes. The
// figure is the changes over the time from the first statement until the slot's
// confirmed_flush_lsn reaches the WAL's end after the last, which includes writing the WAL
// (timed alone too) and up to one checkpoint interval. The baseline in the same run is the
// server decoding the same changes alone: a second slot made before the statements,
// read once with pg_logical_slot_get_binary_changes (pgoutput, no network).
func postgresCDC(c *cluster, o options, srv *pgtest.Server) error {
	if o.pgCDCN == 0 {
		return nil
	}
	ctx := context.Background()
	const db = "bench_cdc"
	if err := srv.CreateDatabase(ctx, db); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		return fmt.Errorf("postgres cdc: connect: %w", err)
	}
	defer conn.Close(context.Background())
	changes := 3 * o.pgCDCN
	fmt.Printf("\nCDC: postgres-cdc -> discard, checkpoints every %s; per run %d rows inserted, updated, deleted (%d changes, one transaction per statement)\n",
		durText(cdcInterval), o.pgCDCN, changes)
	fmt.Printf("into a table empty at the start; changes/s until the slot confirmed the WAL's end, against the server decoding them alone (pgoutput, a second slot)\n\n")
	var rates, gens, raws []float64
	for run := 1; run <= o.pgRuns; run++ {
		rate, gen, raw, err := postgresCDCRun(c, conn, srv.DSN(db), o.pgCDCN, run)
		if err != nil {
			return fmt.Errorf("postgres cdc, run %d: %w", run, err)
		}
		rates, gens, raws = append(rates, rate), append(gens, gen), append(raws, raw)
		fmt.Printf("  run %d: %.0f k changes/s (writing them %.0f k/s, the server decoding them %.0f k/s)\n", run, rate/1e3, gen/1e3, raw/1e3)
	}
	fmt.Printf("\n  %-34s %8.0f k changes/s (median of %d)\n", "postgres-cdc:", median(rates)/1e3, len(rates))
	fmt.Printf("  %-34s %8.0f k changes/s\n", "writing the changes (SQL):", median(gens)/1e3)
	fmt.Printf("  %-34s %8.0f k changes/s\n", "server decoding alone (baseline):", median(raws)/1e3)
	fmt.Printf("  %-34s %8.3f (informational, no target)\n", "ratio postgres-cdc/decoding:", median(rates)/median(raws))
	return nil
}

// postgresCDCRun is one CDC run (see postgresCDC): changes/s of the source, of writing them,
// and of the server decoding them.
func postgresCDCRun(c *cluster, conn *pgx.Conn, dsn string, n int64, run int) (rate, gen, raw float64, err error) {
	ctx := context.Background()
	table, slot, rawSlot, pub := fmt.Sprintf("cdc_src_%d", run), fmt.Sprintf("bench_cdc_%d", run), fmt.Sprintf("bench_raw_%d", run), fmt.Sprintf("bench_pub_%d", run)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, v bigint NOT NULL, label text NOT NULL); CREATE PUBLICATION %s FOR TABLE %s", table, pub, table)); err != nil {
		return 0, 0, 0, fmt.Errorf("create table: %w", err)
	}
	id, err := c.startJob(fmt.Sprintf("pg-cdc-%d", run), fmt.Sprintf(`name: bench-postgres-cdc-%d
%soperators:
  - {name: src, type: postgres-cdc, dsn: %q, table: %s, slot: %s, publication: %s, schema: {id: int64, v: int64, label: string}}
  - {name: out, type: discard}
`, run, checkpointConfig(fmt.Sprintf("%dms", cdcInterval.Milliseconds()), filepath.Join(c.dir, "pg-cdc-checkpoints")), dsn, table, slot, pub), 50*time.Millisecond)
	defer func() { c.cancelAtReturn(id, &err) }() // id is "" once cancelled below
	if err != nil {
		return 0, 0, 0, err
	}
	// Streaming once a checkpoint completed: the snapshot phase declines them.
	if err := c.waitStatus(id, 60*time.Second, 50*time.Millisecond, "a completed checkpoint", func(*proccluster.JobStatus) bool {
		cps, err := c.checkpoints(id)
		return err == nil && slices.ContainsFunc(cps, func(cp proccluster.Checkpoint) bool { return cp.Status == "COMPLETED" })
	}); err != nil {
		return 0, 0, 0, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", rawSlot); err != nil {
		return 0, 0, 0, fmt.Errorf("create the baseline slot: %w", err)
	}
	defer func() {
		if _, derr := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", rawSlot); derr != nil && err == nil {
			err = fmt.Errorf("drop the baseline slot: %w", derr)
		}
	}()
	start := time.Now()
	for _, sql := range []string{
		fmt.Sprintf("INSERT INTO %s SELECT i, i, 'row-' || i FROM generate_series(1, %d) i", table, n),
		"UPDATE " + table + " SET v = v + 1",
		"DELETE FROM " + table,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", sql, err)
		}
	}
	written := time.Since(start)
	var end string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		return 0, 0, 0, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var caught bool
		if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", slot, end).Scan(&caught); err != nil {
			return 0, 0, 0, fmt.Errorf("the slot's position: %w", err)
		}
		if caught {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("slot %s did not confirm %s within 5 minutes", slot, end)
		}
		time.Sleep(10 * time.Millisecond) // a poll of the server's view, not a synchronisation
	}
	took := time.Since(start)
	rawStart := time.Now()
	var msgs int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_logical_slot_get_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)", rawSlot, pub).Scan(&msgs); err != nil {
		return 0, 0, 0, fmt.Errorf("decode on the baseline slot: %w", err)
	}
	rawTook := time.Since(rawStart)
	if msgs < 3*n {
		return 0, 0, 0, fmt.Errorf("the baseline slot decoded %d messages, want at least %d", msgs, 3*n)
	}
	if err := c.cancel(id); err != nil {
		return 0, 0, 0, err
	}
	id = ""
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_drop_replication_slot('%s'); DROP PUBLICATION %s; DROP TABLE %s", slot, pub, table)); err != nil {
		return 0, 0, 0, fmt.Errorf("clean up: %w", err)
	}
	ch := float64(3 * n)
	return ch / took.Seconds(), ch / written.Seconds(), ch / rawTook.Seconds(), nil
}
