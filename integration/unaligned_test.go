package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// A job with unaligned checkpoints is refused at submit with more than one concurrent
// checkpoint or at-least-once, and one that is valid runs through a throttle: every record
// arrives, no sooner than the throttle's rate allows, and its checkpoints complete.
func TestUnalignedJobThroughThrottle(t *testing.T) {
	out := &miniclustertest.Buffer{}
	_, cl := miniclustertest.StartT(t, minicluster.Options{Slots: 2, Stdout: out})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	spec := func(extra string) string {
		return fmt.Sprintf(`name: unaligned
parallelism: 2
config:
  execution.checkpointing.interval: 100ms
  execution.checkpointing.dir: %q
  execution.checkpointing.unaligned: true
%soperators:
  - {name: numbers, type: sequence, from: 1, to: 60}
  - {name: slow, type: throttle, rate: 40}
  - {name: out, type: print}
`, filepath.Join(t.TempDir(), "cp"), extra)
	}
	for _, tc := range []struct{ extra, want string }{
		{"  execution.checkpointing.max-concurrent-checkpoints: 2\n", "execution.checkpointing.max-concurrent-checkpoints = 1, got 2"},
		{"  execution.checkpointing.mode: AT_LEAST_ONCE\n", "execution.checkpointing.mode = EXACTLY_ONCE, got AT_LEAST_ONCE"},
	} {
		_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec(tc.extra))})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Submit(%s) = %v, want INVALID_ARGUMENT saying %q", strings.TrimSpace(tc.extra), err, tc.want)
		}
	}
	if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("List() after the refused submits = %v, %v; want no job", jobs, err)
	}

	id := submit(t, ctx, cl, spec("  execution.checkpointing.aligned-checkpoint-timeout: 50ms\n"))
	d := watchFinished(t, ctx, cl, id, 0)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var got []string
	for _, l := range lines {
		_, rec, _ := strings.Cut(l, "> ")
		got = append(got, rec)
	}
	slices.Sort(got)
	var want []string
	for i := 1; i <= 60; i++ {
		want = append(want, fmt.Sprintf(`{"value":%d}`, i))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("printed %d lines, want the values 1..60 once each:\n%s", len(lines), out.String())
	}
	// 30 records a subtask at 20 a second: at least 1.5 s (less the first second's burst, which
	// the pace does not allow at its start).
	if took := d.GetEndTime().AsTime().Sub(d.GetStartTime().AsTime()); took.Seconds() < 1.4 {
		t.Errorf("the job took %v through a throttle of 40 records/s for 60 records, want at least 1.4 s", took)
	}
	cps, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	completed := 0
	for _, cp := range cps {
		if cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && !cp.GetSavepoint() {
			completed++
		}
	}
	if completed == 0 {
		t.Errorf("no checkpoint of the unaligned job completed: %v", cps)
	}
}
