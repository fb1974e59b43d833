// Package postgres is the PostgreSQL connector's runtime: the "postgres" operator type
// (described in pgspec), a sink that writes its input's records as rows of a table (columns
// named as the record's fields) by COPY (mode insert) or INSERT ... ON CONFLICT DO UPDATE
// (mode upsert), in batches. It builds on github.com/jackc/pgx/v5; TaskManagers register
// Type, JobManagers pgspec.Type.
//
// With delivery-guarantee exactly-once a subtask writes the records between two checkpoint
// barriers into one transaction on its own connection, which the barrier turns into a
// prepared transaction (PREPARE TRANSACTION, PostgreSQL's two-phase commit) and the
// checkpoint's completion commits (COMMIT PREPARED): see txnSink. With at-least-once it
// commits each full batch and the rest at every barrier, and a restore writes again what came
// after the checkpoint (see plainSink).
//
// CDCType is the "postgres-cdc" source (described in pgspec): a table's rows, then its changes
// from a logical replication slot (github.com/jackc/pglogrepl, pgoutput), exactly once with
// checkpoints; see cdcSource.
//
// A password never appears in the sink's errors: the DSN's password, and the one read from
// password-file or password-env, are replaced by "xxxxx" in every error that carries a
// server's or the client library's text.
package postgres

import (
	"context"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// Type is the "postgres" operator type with its runtime.
var Type = operator.Probes(operator.Runs(pgspec.Type, func(c pgspec.SinkConfig, in, _ *record.Schema) (any, error) {
	return newSink(&c, in)
}), func(ctx context.Context, c pgspec.SinkConfig, in, _ *record.Schema) error {
	return probeSink(ctx, &c, in)
})
