package integration

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// hostileCallTimeout bounds one submission of a hostile spec: a refusal takes milliseconds, a
// JobManager spinning on one never answers.
const hostileCallTimeout = 20 * time.Second

// mapSpec is a job whose map computes field v with expr.
func mapSpec(expr string) string {
	return fmt.Sprintf(`name: hostile
operators:
  - {name: numbers, type: sequence, from: 1, to: 3}
  - {name: m, type: map, fields: {v: %q}}
  - {name: out, type: discard}
`, expr)
}

// Hostile submissions are refused over the real SubmitJob RPC with INVALID_ARGUMENT naming the
// field and the limit, promptly, and nothing is recorded; the JobManager goes on serving
// (security review F6: 1.5 million nested parentheses overflowed its stack, which is fatal; F7:
// parallelism.default 4000000000000000000 spun one of its goroutines for ever; F10: a spec of
// 40,000 operators cost 15 s and 8 GiB).
func TestHostileSubmissionsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2})
	parens := []byte(mapSpec(strings.Repeat("(", 1_500_000) + "value" + strings.Repeat(")", 1_500_000)))
	var many strings.Builder
	many.WriteString("name: many\noperators:\n  - {name: src, type: sequence, from: 1, to: 3}\n")
	for i := range 40000 {
		fmt.Fprintf(&many, "  - {name: m%d, type: map, fields: {value: \"value\"}}\n", i)
	}
	for _, tc := range []struct {
		name string
		req  *pb.SubmitJobRequest
		want string
	}{
		{"1.5 million nested parentheses", &pb.SubmitJobRequest{Spec: parens}, fmt.Sprintf("the spec is %d bytes; the limit is 1048576 bytes (1 MiB)", len(parens))},
		{"parentheses within the spec size",
			&pb.SubmitJobRequest{Spec: []byte(mapSpec(strings.Repeat("(", 300_000) + "value" + strings.Repeat(")", 300_000)))},
			`line 4: operators[1] "m".fields.v: expression "((((`},
		{"parentheses within the spec size: the limit",
			&pb.SubmitJobRequest{Spec: []byte(mapSpec(strings.Repeat("(", 300_000) + "value" + strings.Repeat(")", 300_000)))},
			`(600005 bytes): expression is 600005 bytes long; the limit is 65536 bytes`},
		{"parentheses nested 257 deep",
			&pb.SubmitJobRequest{Spec: []byte(mapSpec(strings.Repeat("(", 257) + "value" + strings.Repeat(")", 257)))},
			"brackets nest more than 256 deep (column 257)"},
		{"parallelism.default 4e18",
			&pb.SubmitJobRequest{Spec: []byte("config: {parallelism.default: 4000000000000000000}\n" + mapSpec("value"))},
			`config key "parallelism.default": 4000000000000000000 is above the maximum 32768`},
		{"a negative requested parallelism", &pb.SubmitJobRequest{Spec: []byte(mapSpec("value")), Parallelism: -1},
			"-p: the job's parallelism must be between 1 and 32768, got -1"},
		{"a requested parallelism above the bound", &pb.SubmitJobRequest{Spec: []byte(mapSpec("value")), Parallelism: math.MaxInt32},
			"-p: the job's parallelism must be between 1 and 32768, got 2147483647"},
		{"40,000 operators", &pb.SubmitJobRequest{Spec: []byte(many.String())}, "bytes; the limit is 1048576 bytes (1 MiB)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, hostileCallTimeout)
			defer cancel()
			_, err := cl.Submit(cctx, tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("Submit = %.300v, want INVALID_ARGUMENT with %q", err, tc.want)
			}
			if len(status.Convert(err).Message()) > 64<<10 {
				t.Errorf("the refusal is %d bytes long", len(status.Convert(err).Message()))
			}
		})
	}
	if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
		t.Errorf("List() = %v, %v; want no job recorded", jobs, err)
	}
	watchFinished(t, ctx, cl, submit(t, ctx, cl, mapSpec("value * 2")), 0)
}

// An expression that would build a terabyte fails its task with the budget's error, not the
// TaskManager, which runs the next job (security review F8: repeat(repeat("a", 999999),
// 1000000) killed the TaskManager).
func TestHostileExpressionFailsItsTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1})
	id := submit(t, ctx, cl, mapSpec(`len(repeat(repeat("a", 999999), 1000000))`))
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || !strings.Contains(last.GetFailureCause(), "beyond the 16777216 bytes an evaluation may build") {
		t.Fatalf("job ended %v (%s), want FAILED by the evaluation budget", last.GetStatus(), last.GetFailureCause())
	}
	watchFinished(t, ctx, cl, submit(t, ctx, cl, mapSpec(`len(repeat("ab", 1000))`)), 0)
	if n := len(c.TMs); n != 1 {
		t.Fatalf("%d TaskManagers", n)
	}
}

// A sequence at the top of the int64 range emits its values once each and finishes (security
// review F12: the exhaustion check overflowed; values wrapped to math.MinInt64).
func TestSequenceAtTheTopOfInt64(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2})
	out := filepath.Join(t.TempDir(), "out")
	id := submit(t, ctx, cl, fmt.Sprintf(`name: top
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 9223372036854775800, to: 9223372036854775807}
  - {name: out, type: file, path: %q}
`, out))
	watchFinished(t, ctx, cl, id, 0)
	got := committedValues(t, out)
	if len(got) != 8 {
		t.Errorf("committed %d distinct values, want 8: %v", len(got), got)
	}
	for v := int64(math.MaxInt64 - 7); ; v++ {
		if got[v] != 1 {
			t.Errorf("value %d committed %d times, want once", v, got[v])
		}
		if v == math.MaxInt64 {
			break
		}
	}
}
