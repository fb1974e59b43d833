package coordinator

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/confine"
	"github.com/goflink/goflink/internal/dirsync"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// defaultCheckpointDirName is the directory in the JobManager's data dir that holds the
// checkpoints of jobs when execution.checkpointing.dir is set nowhere.
const defaultCheckpointDirName = "checkpoints"

// jobPaths is what the JobManager knows of the local paths jobs use.
type jobPaths struct {
	// defaultCheckpointDir is the absolute checkpoint directory of jobs that set none, and
	// whose cluster configuration sets none.
	defaultCheckpointDir string
	// allowed are the directories every local path a job or a request names must lie in
	// (io.allowed-paths). The paths the cluster's own configuration names are not checked.
	allowed *confine.Dirs
}

// newJobPaths prepares the default checkpoint directory <dataDir>/checkpoints: a directory of
// this JobManager's own, created 0700, instead of one under the world-writable temporary
// directory, where another user could have created it first (and so read, replace or delete
// the checkpoints) and where the system's cleanup deletes old files. It is made absolute:
// TaskManagers on the same machine find it whatever their working directory; on several
// machines execution.checkpointing.dir must name a shared directory anyway.
func newJobPaths(dataDir string, settings *config.Config) (jobPaths, error) {
	abs, err := filepath.Abs(filepath.Join(dataDir, defaultCheckpointDirName))
	if err != nil {
		return jobPaths{}, fmt.Errorf("jobmanager: default checkpoint directory: %w", err)
	}
	if err := dirsync.MkdirAll(abs, 0o700); err != nil {
		return jobPaths{}, fmt.Errorf("jobmanager: default checkpoint directory: %w", err)
	}
	return jobPaths{defaultCheckpointDir: abs, allowed: confine.FromSettings(settings, abs)}, nil
}

// check confines a path that what names: an error wrapping ErrPathNotAllowed, or the path
// resolved.
func (p jobPaths) check(what, path string) (string, error) {
	resolved, err := p.allowed.Check(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrPathNotAllowed, what, err)
	}
	return resolved, nil
}

// checkLocation checks a location that what names (a savepoint's target, a restore path, a
// savepoint to dispose of): an s3:// URI of valid form (storage.CheckLocation), or a local
// path confined to io.allowed-paths. Other URIs (file://) are refused: they would slip past
// the confinement.
func (p jobPaths) checkLocation(what, loc string) error {
	if !storage.IsURI(loc) {
		_, err := p.check(what, loc)
		return err
	}
	if scheme, _, _ := strings.Cut(loc, "://"); !strings.EqualFold(scheme, "s3") {
		return fmt.Errorf("%w: %s %q: only s3:// locations and local paths are supported", ErrInvalidArgument, what, loc)
	}
	if err := storage.CheckLocation(loc); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrInvalidArgument, what, loc, err)
	}
	return nil
}

// outputDir is a directory a sink of a job writes into and owns.
type outputDir struct {
	dir      string // resolved
	operator string
	line     int32
	field    string
}

// checkGraph confines every local path a job graph names — its operators' (PathNamer), and
// the checkpoint and savepoint directories its own configuration sets — and returns the
// directories its sinks own, refusing one that two of its sinks name.
func (p jobPaths) checkGraph(g *pb.JobGraph, ops *operator.Registry) ([]outputDir, error) {
	var errs []error
	var outputs []outputDir
	for _, key := range []string{config.CheckpointDir, config.SavepointDir} {
		// The job's own setting, as resolveCheckpointDir made it absolute (tasks use that).
		// An s3:// URI is no local path: the cluster's S3 settings reach it; other URIs
		// (file://) are refused, since they would slip past the confinement.
		if _, ok := g.GetJobConfig()[key]; ok {
			if err := p.checkLocation("config key "+key, g.GetConfig()[key]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	add := func(out outputDir, what string) {
		for _, o := range outputs {
			if o.dir == out.dir {
				errs = append(errs, fmt.Errorf("%w: %s: %s is also the output of operator %q (line %d) of this job; a directory holds the output of one sink",
					ErrOutputInUse, what, out.dir, o.operator, o.line))
			}
		}
		outputs = append(outputs, out)
	}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			paths, err := ops.LocalPaths(op)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, lp := range paths {
				what := fmt.Sprintf("operator %q (line %d), field %s", op.GetName(), op.GetLine(), lp.Field)
				resolved, err := p.check(what, lp.Path)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if lp.Output {
					add(outputDir{dir: resolved, operator: op.GetName(), line: op.GetLine(), field: lp.Field}, what)
				}
			}
			// An S3 location is no local path: not confined, but owned like a directory.
			locs, err := ops.Locations(op)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, l := range locs {
				what := fmt.Sprintf("operator %q (line %d), field %s", op.GetName(), op.GetLine(), l.Field)
				clean, err := storage.CleanS3Location(l.URI)
				if err != nil {
					errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidArgument, what, err))
					continue
				}
				if l.Output {
					add(outputDir{dir: clean, operator: op.GetName(), line: op.GetLine(), field: l.Field}, what)
				}
			}
		}
	}
	return outputs, errors.Join(errs...)
}

// checkOutputsFree refuses outputs that a sink of a job that has not ended (running, or
// restarting) writes into: its pending files would be deleted as lingering ones by the new
// job, and the two jobs' part files mixed.
func (p jobPaths) checkOutputsFree(outputs []outputDir, jobs []*pb.JobRecord, ops *operator.Registry) error {
	if len(outputs) == 0 {
		return nil
	}
	var errs []error
	for _, rec := range jobs {
		if isTerminalJob(rec.GetStatus()) {
			continue
		}
		for _, v := range rec.GetGraph().GetVertices() {
			for _, op := range v.GetOperators() {
				paths, err := ops.LocalPaths(op)
				if err != nil {
					continue // a graph this JobManager cannot decode names nothing it can compare
				}
				var owned []string
				for _, lp := range paths {
					if !lp.Output {
						continue
					}
					if resolved, err := confine.Resolve(lp.Path); err == nil {
						owned = append(owned, resolved)
					}
				}
				locs, _ := ops.Locations(op) // decoded above
				for _, l := range locs {
					if clean, err := storage.CleanS3Location(l.URI); err == nil && l.Output {
						owned = append(owned, clean)
					}
				}
				for _, resolved := range owned {
					for _, o := range outputs {
						if o.dir == resolved {
							errs = append(errs, fmt.Errorf("%w: operator %q (line %d), field %s: %s is the output of operator %q of job %s (%s), which is %s; a directory holds the output of one sink: stop or cancel that job first, or choose another directory",
								ErrOutputInUse, o.operator, o.line, o.field, o.dir, op.GetName(), rec.GetId(), rec.GetGraph().GetName(), statusName(rec.GetStatus())))
						}
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}
