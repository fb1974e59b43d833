package worker

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/confine"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestCheckPathsUsesTheDirectoryTheTaskWrites: a checkpoint directory the job sets relative is
// made absolute by the JobManager, against its own working directory; the TaskManager must
// confine that absolute directory, which its tasks write into, not the job's relative text
// taken against the TaskManager's working directory.
func TestCheckPathsUsesTheDirectoryTheTaskWrites(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	g, err := job.Build(job.Request{Spec: []byte(`name: rel
config:
  execution.checkpointing.interval: 1 h
  execution.checkpointing.dir: cp
operators:
  - {name: numbers, type: sequence, from: 1, to: 3}
  - {name: out, type: discard}
`)}, job.Env{})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "cp") // the JobManager's working directory is not ours
	g.Config[config.CheckpointDir] = elsewhere
	env := &taskEnv{operators: operator.MustRegistry(), allowed: confine.New(wd), log: slog.New(slog.DiscardHandler)}
	tk, err := newTask(context.Background(), env, &pb.SubmitTaskRequest{JobGraph: g, Execution: &pb.ExecutionAttemptID{JobId: "j"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.cancel(nil)
	err = tk.checkPaths()
	if !errors.Is(err, errPathNotAllowed) || !strings.Contains(err.Error(), elsewhere) || !operator.IsUnrecoverable(err) {
		t.Errorf("checkPaths() = %v, want an unrecoverable refusal of %s", err, elsewhere)
	}
	g.Config[config.CheckpointDir] = filepath.Join(wd, "cp")
	if err := tk.checkPaths(); err != nil {
		t.Errorf("checkPaths() with the directory allowed = %v", err)
	}
}
