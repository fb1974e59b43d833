package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// settings returns a cluster configuration with the given keys.
func settings(t *testing.T, kv map[string]string) *config.Config {
	t.Helper()
	c := config.New()
	if err := c.SetAll(kv); err != nil {
		t.Fatal(err)
	}
	return c
}

// A job's exception history grew with every failure for as long as the job lived; it keeps
// the newest web.exception-history-size entries, as in Flink.
func TestExceptionHistoryKeepsTheNewest(t *testing.T) {
	_, cl := miniclustertest.StartT(t, minicluster.Options{Settings: settings(t, map[string]string{config.ExceptionHistorySize: "2"})})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	id := submit(t, ctx, cl, fmt.Sprintf(`name: failing
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %q
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 4
  restart-strategy.fixed-delay.delay: 0ms
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: boom, type: fail, when: "value == 1"}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "cp")))
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || last.GetRestarts() != 4 {
		t.Fatalf("job ended %v after %d restarts (%s), want FAILED after 4", last.GetStatus(), last.GetRestarts(), last.GetFailureCause())
	}
	ex := last.GetExceptions()
	if len(ex) != 2 {
		t.Fatalf("exception history has %d entries, want the newest 2: %v", len(ex), ex)
	}
	if ex[0].GetRestartAttempt() != 4 || ex[1].GetHandling() != pb.FailureHandling_FAILURE_HANDLING_SUPPRESSED {
		t.Errorf("exception history = %v, want the 4th restart, then the failure that suppressed recovery", ex)
	}
}

// execution.checkpointing.num-retained has a maximum, checked at submit: every retained
// checkpoint is a record in every JobManager's replicated state.
func TestNumRetainedIsBoundedAtSubmit(t *testing.T) {
	_, cl := miniclustertest.StartT(t, minicluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	spec := func(n int) string {
		return fmt.Sprintf(`name: retained
config:
  execution.checkpointing.interval: 1s
  execution.checkpointing.dir: %q
  execution.checkpointing.num-retained: %d
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: out, type: discard}
`, filepath.Join(t.TempDir(), "cp"), n)
	}
	_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec(101))})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"execution.checkpointing.num-retained": 101 is above the maximum 100`) {
		t.Fatalf("Submit(num-retained 101) = %v, want INVALID_ARGUMENT naming the key and the maximum", err)
	}
	if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("List() after the refused submit = %v, %v; want no job", jobs, err)
	}
	id := submit(t, ctx, cl, spec(100))
	watchFinished(t, ctx, cl, id, 0)
}
