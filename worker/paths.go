package worker

import (
	"errors"
	"fmt"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/storage"
)

// errPathNotAllowed is wrapped by a task's failure when a path its job names lies outside this
// TaskManager's io.allowed-paths.
var errPathNotAllowed = errors.New("path not allowed on this taskmanager")

// checkPaths confines the local paths the task's job names before any operator of it is built
// (the Kafka sink reads its files then) or opened: its operators' (operator.PathNamer) and
// the checkpoint and savepoint directories the job's own configuration sets. The JobManager
// checked them at submit against its own io.allowed-paths; this TaskManager's are what count
// on its machine. A refusal is unrecoverable: a restart would be refused the same way.
func (t *task) checkPaths() error {
	var errs []error
	g := t.req.GetJobGraph()
	for _, key := range []string{config.CheckpointDir, config.SavepointDir} {
		// The job's own setting, as the JobManager made it absolute: the directory it uses.
		// A URI (s3://) is no local path: this TaskManager's S3 settings reach it.
		if _, ok := g.GetJobConfig()[key]; ok && !storage.IsURI(g.GetConfig()[key]) {
			if _, err := t.env.allowed.Check(g.GetConfig()[key]); err != nil {
				errs = append(errs, &operator.UserError{Operator: t.vertex.GetName(), Unrecoverable: true,
					Err: fmt.Errorf("%w: config key %s: %w", errPathNotAllowed, key, err)})
			}
		}
	}
	for _, op := range t.vertex.GetOperators() {
		paths, err := t.env.operators.LocalPaths(op)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, lp := range paths {
			if _, err := t.env.allowed.Check(lp.Path); err != nil {
				errs = append(errs, &operator.UserError{Operator: op.GetName(), Unrecoverable: true,
					Err: fmt.Errorf("%w: field %s: %w", errPathNotAllowed, lp.Field, err)})
			}
		}
	}
	return errors.Join(errs...)
}
