package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goflink/goflink/internal/leaderrpc"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// taskRecorder collects a task environment's reports and log lines.
type taskRecorder struct {
	mu      sync.Mutex
	reports map[int32][]*pb.UpdateTaskExecutionStateRequest // by vertex
	logs    strings.Builder
}

func (r *taskRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.Write(p)
}

func (r *taskRecorder) report(req *pb.UpdateTaskExecutionStateRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := req.GetExecution().GetVertexId()
	r.reports[v] = append(r.reports[v], req)
}

// last returns the last report of the vertex's task (nil if none).
func (r *taskRecorder) last(vertex int32) *pb.UpdateTaskExecutionStateRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rs := r.reports[vertex]; len(rs) > 0 {
		return rs[len(rs)-1]
	}
	return nil
}

func (r *taskRecorder) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.String()
}

func newTaskRecorder() *taskRecorder {
	return &taskRecorder{reports: map[int32][]*pb.UpdateTaskExecutionStateRequest{}}
}

// testEnv is a task environment that records into rec, with local address self.
func testEnv(t *testing.T, rec *taskRecorder, self string) *taskEnv {
	return &taskEnv{scratch: testScratch(t),
		selfAddr: self, partitions: newPartitionRegistry(), operators: operator.MustRegistry(), stdout: &lockedWriter{w: io.Discard}, now: time.Now,
		log: slog.New(slog.NewTextHandler(rec, nil)), credits: 2, queueCapacity: 2, partTimeout: 5 * time.Second,
		report: rec.report,
	}
}

// waitDone waits for a task to end.
func waitDone(t *testing.T, tk *task, what string) {
	t.Helper()
	select {
	case <-tk.done:
	case <-time.After(30 * time.Second):
		tk.requestCancel()
		<-tk.done
		t.Fatalf("%s did not end", what)
	}
}

// A task whose TaskManager stops (its context ends before the TaskManager cancels each task)
// is canceled: it reports CANCELED and logs so at INFO, not as a failure.
func TestTaskCanceledWhenItsTaskManagerStops(t *testing.T) {
	g, err := job.Build(job.Request{Spec: []byte("name: s\noperators:\n  - {name: numbers, type: sequence, from: 1, rate: 1000}\n  - {name: out, type: discard}\n")}, job.Env{})
	if err != nil {
		t.Fatal(err)
	}
	rec := newTaskRecorder()
	tmCtx, stopTM := context.WithCancel(context.Background())
	defer stopTM()
	tk, err := newTask(tmCtx, testEnv(t, rec, "tm"), &pb.SubmitTaskRequest{RegistrationId: "r", JobGraph: g, Execution: &pb.ExecutionAttemptID{JobId: "j"}})
	if err != nil {
		t.Fatal(err)
	}
	tk.start()
	deadline := time.Now().Add(10 * time.Second)
	for rec.last(0).GetState() != pb.ExecutionState_EXECUTION_STATE_RUNNING && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stopTM()
	waitDone(t, tk, "the task of a stopped TaskManager")
	if last := rec.last(0); last.GetState() != pb.ExecutionState_EXECUTION_STATE_CANCELED || last.GetFailure() != "" {
		t.Errorf("last report %v %q, want CANCELED without a failure", last.GetState(), last.GetFailure())
	}
	if logs := rec.log(); strings.Contains(logs, "level=WARN") || !strings.Contains(logs, `level=INFO msg="task canceled"`) {
		t.Errorf("logs:\n%s\nwant the task canceled at INFO and no WARN", logs)
	}
}

// A consumer whose producer is canceled first (a job cancellation or a region restart
// cancels both; the consumer's own CancelTask comes a moment later) is canceled too, as in
// Flink: it reports CANCELED naming the producer, and logs at INFO, not WARN "task failed".
// Both for a producer on the same TaskManager and for one reached over gRPC. A producer
// canceled because the job ended (jobEnded) makes the consumer end the job's work too, with
// the same last completed checkpoint, and release its own partitions saying so.
func TestConsumerOfACanceledProducerIsCanceled(t *testing.T) {
	g, err := job.Build(job.Request{Spec: []byte(`name: k
operators:
  - {name: numbers, type: sequence, from: 1, rate: 1000}
  - {name: by, type: key-by, key: "value % 3"}
  - {name: total, type: sum, field: value}
  - {name: out, type: discard}
`)}, job.Env{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ remote, jobEnded bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		remote := tc.remote
		t.Run(fmt.Sprintf("remote=%v,jobEnded=%v", remote, tc.jobEnded), func(t *testing.T) {
			rec := newTaskRecorder()
			prodEnv := testEnv(t, rec, "this-tm")
			consEnv, prodAddr := prodEnv, prodEnv.selfAddr
			if remote {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := grpc.NewServer()
				pb.RegisterDataExchangeServiceServer(srv, &dataServer{partitions: prodEnv.partitions, timeout: prodEnv.partTimeout})
				go func() { _ = srv.Serve(lis) }()
				defer srv.Stop()
				prodAddr = lis.Addr().String()
				prodEnv.selfAddr = prodAddr
				conn, err := grpc.NewClient(prodAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				consEnv = testEnv(t, rec, "other-tm")
				consEnv.dataClient = func(string) (pb.DataExchangeServiceClient, error) { return pb.NewDataExchangeServiceClient(conn), nil }
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			prodID := &pb.ExecutionAttemptID{JobId: "j", VertexId: 0}
			producer, err := newTask(ctx, prodEnv, &pb.SubmitTaskRequest{RegistrationId: "r", JobGraph: g, Execution: prodID})
			if err != nil {
				t.Fatal(err)
			}
			consumer, err := newTask(ctx, consEnv, &pb.SubmitTaskRequest{RegistrationId: "r", JobGraph: g,
				Execution: &pb.ExecutionAttemptID{JobId: "j", VertexId: 1},
				Inputs:    []*pb.InputGateDeployment{{Edge: 0, Producers: []*pb.ProducerLocation{{Execution: prodID, TaskmanagerAddress: prodAddr}}}}})
			if err != nil {
				t.Fatal(err)
			}
			producer.start()
			consumer.start()
			defer func() { consumer.requestCancel(); <-consumer.done; producer.requestCancel(); <-producer.done }()
			// Once the consumer reads the producer's subpartition, cancel the producer alone, as
			// CancelTask does.
			poll.Until(t, 10*time.Second, "the consumer to subscribe to the producer's partition", func() error {
				if !subscribed(prodEnv.partitions, partitionKey(prodID, 0)) {
					return errors.New("not subscribed")
				}
				return nil
			})
			if tc.jobEnded {
				producer.requestEndOfJob(7)
				prodEnv.partitions.releaseExecution(prodID, &jobEndedError{lastCompleted: 7})
			} else {
				producer.requestCancel()
				prodEnv.partitions.releaseExecution(prodID, errTaskCanceled)
			}
			waitDone(t, producer, "the canceled producer")
			waitDone(t, consumer, "the consumer of a canceled producer")
			switch last := consumer.jobEnded.Load(); {
			case tc.jobEnded && (last == nil || *last != 7):
				t.Errorf("consumer's job end = %v, want last completed checkpoint 7 from its producer", last)
			case !tc.jobEnded && last != nil:
				t.Errorf("consumer's job end = %d, want none (a plain cancellation)", *last)
			}
			if _, ok := jobEndedOf(consumer.canceledErr()); ok != tc.jobEnded {
				t.Errorf("consumer releases its partitions with %v, want a job end %v", consumer.canceledErr(), tc.jobEnded)
			}
			last := rec.last(1)
			if last.GetState() != pb.ExecutionState_EXECUTION_STATE_CANCELED || !strings.Contains(last.GetFailure(), "task canceled") ||
				last.GetFailedProducer().GetVertexId() != 0 || last.GetFailedProducer().GetJobId() != "j" {
				t.Errorf("consumer's last report %v %q (producer %v), want CANCELED saying its producer was canceled", last.GetState(), last.GetFailure(), last.GetFailedProducer())
			}
			logs := rec.log()
			if strings.Contains(logs, "level=WARN") || !strings.Contains(logs, `level=INFO msg="task canceled: its producer was canceled"`) {
				t.Errorf("logs:\n%s\nwant the consumer canceled at INFO and no WARN", logs)
			}
		})
	}
}

// subscribed reports whether a consumer took subpartition 0 of a registered partition.
func subscribed(r *partitionRegistry, key string) bool {
	r.mu.Lock()
	p := r.parts[key]
	r.mu.Unlock()
	if p == nil {
		return false
	}
	s := p.subs[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken
}

// A producer canceled because the job ended tells its consumers so, on this TaskManager (the
// release cause) and on another (the stream's PRODUCER_CANCELED status), with the job's
// newest completed checkpoint; a plain cancellation does not.
func TestJobEndedCancellationReachesConsumers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		want  int64 // -1: not a job end
	}{
		{"job ended", &jobEndedError{lastCompleted: 7}, 7},
		{"job ended without a checkpoint", &jobEndedError{}, 0},
		{"canceled", errTaskCanceled, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := fmt.Errorf("%w: %w", errPartitionReleased, tc.cause)
			remote := releasedStatus(tc.cause)
			for where, err := range map[string]error{"local": local, "remote": remote} {
				last, ok := jobEndedOf(err)
				switch {
				case tc.want < 0 && ok:
					t.Errorf("%s: jobEndedOf(%v) = %d, want no job end", where, err, *last)
				case tc.want >= 0 && (!ok || *last != tc.want):
					t.Errorf("%s: jobEndedOf(%v) = %v, %v, want %d", where, err, last, ok, tc.want)
				}
			}
			if !errors.Is(local, errTaskCanceled) {
				t.Errorf("%v is not an errTaskCanceled", local)
			}
			if got := leaderrpc.Reason(remote); got != reasonProducerCanceled {
				t.Errorf("releasedStatus(%v) has reason %q, want %q", tc.cause, got, reasonProducerCanceled)
			}
		})
	}
}
