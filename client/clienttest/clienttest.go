// Package clienttest holds the waits that tests of a running cluster share, whatever started
// the cluster (in process or as processes): each polls the cluster through a client with a
// deadline.
package clienttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/poll"
)

// WaitRunningAt waits until job id is RUNNING at parallelism p with every task RUNNING. It
// fails t at once if the job ends meanwhile, with the job's failure cause.
func WaitRunningAt(t testing.TB, ctx context.Context, cl *client.Client, id string, p int32) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("job %s to run at parallelism %d", id, p), func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if client.IsTerminal(d.GetStatus()) {
			t.Fatalf("job %s ended %v (%s)", id, d.GetStatus(), d.GetFailureCause())
		}
		return client.RunningAt(d, p)
	})
}
