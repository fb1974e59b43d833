package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/pgtest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestPostgresSinkExactlyOnce: sequence → key-by → count → two exactly-once postgres sinks on
// a real PostgreSQL (insert, and upsert by key), with a failure injected after the first
// checkpoints: the job restarts from a checkpoint, one table holds every running count
// exactly once, the other each key's last, and no prepared transaction is left. The short
// interval makes barriers overtake completions, so the upserting sink's rows meet its own
// prepared row locks and are carried (connector/postgres txnSink) instead of failing it.
func TestPostgresSinkExactlyOnce(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "CREATE TABLE counts (parity text NOT NULL, value bigint NOT NULL, count bigint NOT NULL); CREATE TABLE ups (parity text PRIMARY KEY, value bigint NOT NULL, count bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1})
	const n, failAt = 300, 151
	spec := fmt.Sprintf(`name: pg-counts
parallelism: 2
config:
  execution.checkpointing.interval: 20ms
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.delay: 50ms
  execution.checkpointing.dir: %s
operators:
  - {name: numbers, type: sequence, from: 1, to: %d, rate: 100}
  - {name: parity, type: map, fields: {parity: "value %% 2 == 0 ? 'even' : 'odd'", value: "value"}}
  - {name: by-parity, type: key-by, key: "parity"}
  - {name: counts, type: count}
  - {name: fail_at, type: fail, when: "value == %d", attempt: 0}
  - {name: out, type: postgres, dsn: %q, table: counts, batch-size: 7, delivery-guarantee: exactly-once}
  - {name: up, type: postgres, inputs: [fail_at], dsn: %q, table: ups, mode: upsert, key: [parity], batch-size: 1, delivery-guarantee: exactly-once}
`, filepath.Join(t.TempDir(), "checkpoints"), n, failAt, srv.DSN(srv.Database), srv.DSN(srv.Database))
	id := submit(t, ctx, cl, spec)
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), want FINISHED", last.GetStatus(), last.GetFailureCause())
	}
	// One restart: the injected failure.
	if last.GetRestarts() != 1 || last.GetRestoredCheckpointId() <= 0 {
		t.Fatalf("restarts = %d, restored checkpoint %d: want a restart from a checkpoint", last.GetRestarts(), last.GetRestoredCheckpointId())
	}

	poll.Until(t, testTimeout, "no prepared transaction left", func() error {
		var left []string
		rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts")
		if err == nil {
			left, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("prepared: %v", left)
		}
		return nil
	})

	// Every value once, with its running count: odd 2c-1 and even 2c are the c-th of their key.
	rows, err := conn.Query(ctx, "SELECT parity, value, count FROM counts")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	var total int
	for rows.Next() {
		var parity string
		var value, count int64
		if err := rows.Scan(&parity, &value, &count); err != nil {
			t.Fatal(err)
		}
		total++
		seen[value]++
		want := (value + 1) / 2
		if (value%2 == 0) != (parity == "even") || count != want {
			t.Errorf("row (%s, %d, %d): want (%s, %d, %d)", parity, value, count, map[bool]string{true: "even", false: "odd"}[value%2 == 0], value, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for v := int64(1); v <= n; v++ {
		if seen[v] != 1 {
			t.Errorf("value %d committed %d times, want exactly once", v, seen[v])
		}
	}
	if total != n {
		t.Errorf("committed %d rows, want %d", total, n)
	}
	// The upserting sink holds each key's last running count.
	ups, err := conn.Query(ctx, "SELECT parity || ' ' || value || ' ' || count FROM ups ORDER BY parity")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(ups, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"even 300 150", "odd 299 150"}; !slices.Equal(got, want) {
		t.Errorf("ups = %q, want %q", got, want)
	}
	t.Logf("%d restarts, restored from checkpoint %d", last.GetRestarts(), last.GetRestoredCheckpointId())
}

// TestPostgresProbeAtSubmit: the JobManager has a TaskManager probe a postgres sink at
// submit: a missing table, a missing column, a type mismatch, an upsert key without a unique
// constraint and a wrong password refuse the job with a spec error naming the operator and
// its line, and nothing is recorded; a sink that can write is accepted.
func TestPostgresProbeAtSubmit(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "CREATE TABLE counts (parity text NOT NULL, value bigint NOT NULL, count bigint NOT NULL); CREATE TABLE loose (parity text, value bigint, count bigint); CREATE TABLE narrow (parity text, value text)"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGTEST_PROBE_PW", pgtest.Password)
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2})
	spec := func(sink string) string {
		return fmt.Sprintf(`name: pg-probe
config:
  execution.checkpointing.interval: 1s
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: parity, type: map, fields: {parity: "value %% 2 == 0 ? 'even' : 'odd'", value: "value"}}
  - {name: by-parity, type: key-by, key: "parity"}
  - {name: counts, type: count}
  - {name: out, type: postgres, %s}
`, sink)
	}
	dsn := srv.DSN(srv.Database)
	for _, tc := range []struct{ name, sink, want string }{
		{"no table", fmt.Sprintf("dsn: %q, table: nope", dsn), `line 9: "out": table "nope" does not exist`},
		{"accepted", fmt.Sprintf("dsn: %q, table: loose", dsn), ""},
		{"accepted by host and port", fmt.Sprintf("host: %s, port: %d, database: %s, user: %s, password-env: PGTEST_PROBE_PW, table: loose",
			srv.Host, srv.Port, srv.Database, pgtest.User), ""},
		{"no column, type mismatch", fmt.Sprintf("dsn: %q, table: narrow", dsn),
			`field "value" is int64, but column "value" of table "narrow" is text: int64 needs a numeric column`},
		{"wrong password", fmt.Sprintf("dsn: %q, table: counts", srv.DSNFor(pgtest.User, "not-the-password", srv.Database)), `"out": connect: failed to connect`},
		{"upsert key", fmt.Sprintf("dsn: %q, table: counts, mode: upsert, key: [parity]", dsn), `has no primary key or unique constraint on exactly the key [parity]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec(tc.sink))})
			t.Logf("Submit: %v", err)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Submit: %v, want it accepted", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Submit: %v, want InvalidArgument containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "not-the-password") {
				t.Errorf("the error names the password: %v", err)
			}
		})
	}
	jobs, err := cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Errorf("jobs recorded: %d, want only the 2 accepted ones", len(jobs))
	}
}

// examplePostgresDSN is the server examples/postgres names; the tests point the specs at
// their own.
const examplePostgresDSN = "postgres://goflink@localhost:5432/goflink"

// exampleSpec reads examples/postgres/<name> with its DSN replaced by srv's (without the
// password, which the examples read from PGPASSWORD).
func exampleSpec(t *testing.T, srv *pgtest.Server, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", "postgres", name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), examplePostgresDSN) {
		t.Fatalf("examples/postgres/%s no longer names %s: update this test", name, examplePostgresDSN)
	}
	dsn := fmt.Sprintf("postgres://%s@%s:%d/%s", pgtest.User, srv.Host, srv.Port, srv.Database)
	return strings.ReplaceAll(string(b), examplePostgresDSN, dsn)
}

// TestPostgresCountsExample runs examples/postgres/counts.yaml as its README says: the table
// holds each parity's last running count, and nothing is left prepared.
func TestPostgresCountsExample(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "CREATE TABLE counts (parity text PRIMARY KEY, value bigint NOT NULL, count bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSWORD", pgtest.Password)
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
	spec := exampleSpec(t, srv, "counts.yaml")
	spec = strings.Replace(spec, "config:\n", fmt.Sprintf("config:\n  execution.checkpointing.dir: %s\n", filepath.Join(t.TempDir(), "chk")), 1)
	id := submit(t, ctx, cl, spec)
	if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED || last.GetRestarts() != 1 {
		t.Fatalf("job ended %v after %d restarts (%s), want FINISHED after the injected one", last.GetStatus(), last.GetRestarts(), last.GetFailureCause())
	}
	rows, err := conn.Query(ctx, "SELECT parity || ' ' || value || ' ' || count FROM counts ORDER BY parity")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"even 60 30", "odd 59 30"}; !slices.Equal(got, want) {
		t.Errorf("counts = %q, want %q", got, want)
	}
	var prepared int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared); err != nil || prepared != 0 {
		t.Errorf("prepared transactions left: %d (%v)", prepared, err)
	}
}

// TestPostgresCDCProbeAtSubmit: a postgres-cdc source is probed at submit too: a server
// without logical replication, a missing table and a declared column the table lacks refuse
// the job with spec errors.
func TestPostgresCDCProbeAtSubmit(t *testing.T) {
	logical := pgtest.Start(t)
	replica := pgtest.Start(t, "wal_level=replica")
	conn := logical.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "CREATE TABLE src (id bigint PRIMARY KEY, v bigint)"); err != nil {
		t.Fatal(err)
	}
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1})
	spec := func(dsn, table, schema string) string {
		return fmt.Sprintf(`name: cdc-probe
config:
  execution.checkpointing.interval: 1s
operators:
  - {name: src, type: postgres-cdc, dsn: %q, table: %s, slot: probe_slot, schema: {%s}}
  - {name: out, type: discard}
`, dsn, table, schema)
	}
	for _, tc := range []struct{ name, spec, want string }{
		{"wal_level", spec(replica.DSN(replica.Database), "src", "id: int64"), `line 5: "src": the server's wal_level is "replica"`},
		{"no table", spec(logical.DSN(logical.Database), "nope", "id: int64"), `line 5: "src": table "nope" does not exist`},
		{"no column", spec(logical.DSN(logical.Database), "src", "id: int64, w: string"), `schema.w: table "src" has no column "w"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(tc.spec)})
			t.Logf("Submit: %v", err)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Submit: %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
	var slots int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil || slots != 0 {
		t.Errorf("replication slots after refused submits: %d (%v), want none", slots, err)
	}
}

// TestPostgresCDCCopyExample runs examples/postgres/cdc-copy.yaml as its README says: the
// copy follows the source table's rows, updates and deletes; a cancel leaves nothing
// prepared.
func TestPostgresCDCCopyExample(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, `CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);
		CREATE TABLE accounts_copy (id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);
		INSERT INTO accounts VALUES (1, 'ann', 100), (2, 'bob', 50)`); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSWORD", pgtest.Password)
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2})
	spec := exampleSpec(t, srv, "cdc-copy.yaml")
	spec = strings.Replace(spec, "config:\n", fmt.Sprintf("config:\n  execution.checkpointing.dir: %s\n", filepath.Join(t.TempDir(), "chk")), 1)
	id := submit(t, ctx, cl, spec)
	copied := func(want ...string) {
		t.Helper()
		poll.Until(t, testTimeout/2, fmt.Sprintf("accounts_copy to hold %q", want), func() error {
			rows, err := conn.Query(ctx, "SELECT id || ' ' || owner || ' ' || balance FROM accounts_copy ORDER BY id")
			if err != nil {
				return err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("accounts_copy holds %q", got)
			}
			return nil
		})
	}
	copied("1 ann 100", "2 bob 50")
	if _, err := conn.Exec(ctx, "UPDATE accounts SET balance = balance - 30 WHERE id = 1; DELETE FROM accounts WHERE id = 2; INSERT INTO accounts VALUES (3, 'cy', 7)"); err != nil {
		t.Fatal(err)
	}
	copied("1 ann 70", "3 cy 7")
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if last := watchEnd(t, ctx, cl, id); last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("job ended %v (%s), want CANCELED", last.GetStatus(), last.GetFailureCause())
	}
	poll.Until(t, testTimeout/2, "no prepared transaction left", func() error {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%d prepared", n)
		}
		return nil
	})
}
