package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

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
