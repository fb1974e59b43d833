package worker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestFailedReportMarksUnrecoverable runs the first task of a job and checks its FAILED
// report: an expression failing at run time (in an operator or in a key-by key) is
// unrecoverable, the fail operator's injected failure is not.
func TestFailedReportMarksUnrecoverable(t *testing.T) {
	tests := []struct {
		name      string
		spec      string
		wantCause string
		want      bool
	}{
		{"map expression", `name: m
operators:
  - {name: numbers, type: sequence, from: 0, to: 10}
  - {name: ratio, type: map, fields: {r: "10 % value"}}
  - {name: out, type: discard}
`, "integer divide by zero", true},
		{"key expression", `name: k
operators:
  - {name: numbers, type: sequence, from: 0, to: 10, parallelism: 1}
  - {name: by, type: key-by, key: "10 % value"}
  - {name: total, type: sum, field: value, parallelism: 2}
  - {name: out, type: discard}
`, `operator "total": key: evaluate`, true},
		{"injected failure", `name: f
operators:
  - {name: numbers, type: sequence, from: 0, to: 10}
  - {name: boom, type: fail, when: "value == 3"}
  - {name: out, type: discard}
`, "injected failure", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := job.Build(job.Request{Spec: []byte(tc.spec), SpecName: tc.name}, job.Env{})
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			var mu sync.Mutex
			var reports []*pb.UpdateTaskExecutionStateRequest
			env := &taskEnv{scratch: testScratch(t),
				partitions: newPartitionRegistry(), operators: operator.MustRegistry(), stdout: &lockedWriter{w: io.Discard}, now: time.Now,
				log: slog.New(slog.NewTextHandler(io.Discard, nil)), credits: 2, queueCapacity: 2, partTimeout: time.Second,
				report: func(r *pb.UpdateTaskExecutionStateRequest) {
					mu.Lock()
					defer mu.Unlock()
					reports = append(reports, r)
				},
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tk, err := newTask(ctx, env, &pb.SubmitTaskRequest{
				RegistrationId: "r", JobGraph: g, Execution: &pb.ExecutionAttemptID{JobId: "j", VertexId: 0},
			})
			if err != nil {
				t.Fatalf("newTask: %v", err)
			}
			tk.start()
			select {
			case <-tk.done:
			case <-time.After(30 * time.Second):
				tk.requestCancel()
				<-tk.done
				t.Fatal("task did not end")
			}
			mu.Lock()
			defer mu.Unlock()
			last := reports[len(reports)-1]
			if last.GetState() != pb.ExecutionState_EXECUTION_STATE_FAILED || !strings.Contains(last.GetFailure(), tc.wantCause) {
				t.Fatalf("last report = %v %q, want FAILED with %q", last.GetState(), last.GetFailure(), tc.wantCause)
			}
			if last.GetUnrecoverable() != tc.want {
				t.Errorf("FAILED report %q: unrecoverable = %v, want %v", last.GetFailure(), last.GetUnrecoverable(), tc.want)
			}
			for _, r := range reports[:len(reports)-1] {
				if r.GetUnrecoverable() {
					t.Errorf("%v report is unrecoverable", r.GetState())
				}
			}
		})
	}
}
