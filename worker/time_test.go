package worker

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// syncBuffer is a bytes.Buffer that the task goroutines write and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A processing-time window fires once, after the last record of its last millisecond: while
// the clock stands still at the window's last millisecond the records keep going into the
// window and nothing fires; when the clock moves on, the window fires once with all of them.
// (A timer that fired in its own millisecond fired the window before some of its records,
// which then opened the window again: the same window fired several times.)
func TestProcessingTimeWindowFiresAfterItsLastMillisecond(t *testing.T) {
	g, err := job.Build(job.Request{Spec: []byte(`name: pt
operators:
  - {name: numbers, type: sequence, from: 1}
  - {name: by, type: key-by, key: "0"}
  - {name: w, type: window, time: processing, size: 100ms, aggregates: {n: "count()"}}
  - {name: out, type: print}
`)}, job.Env{})
	if err != nil {
		t.Fatal(err)
	}
	const windowEnd = 1_000_000_100 // epoch ms; the window is [windowEnd−100, windowEnd)
	var clock atomic.Int64
	clock.Store(windowEnd - 1)
	env := testEnv(t, newTaskRecorder(), "tm")
	env.now = func() time.Time { return time.UnixMilli(clock.Load()) }
	out := &syncBuffer{}
	env.stdout = &lockedWriter{w: out}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prodID := &pb.ExecutionAttemptID{JobId: "j", VertexId: 0}
	producer, err := newTask(ctx, env, &pb.SubmitTaskRequest{RegistrationId: "r", JobGraph: g, Execution: prodID})
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := newTask(ctx, env, &pb.SubmitTaskRequest{RegistrationId: "r", JobGraph: g,
		Execution: &pb.ExecutionAttemptID{JobId: "j", VertexId: 1},
		Inputs:    []*pb.InputGateDeployment{{Edge: 0, Producers: []*pb.ProducerLocation{{Execution: prodID, TaskmanagerAddress: "tm"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	producer.start()
	consumer.start()
	defer func() { consumer.requestCancel(); <-consumer.done; producer.requestCancel(); <-producer.done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s; output:\n%s", what, out.String())
			}
		}
	}
	// Many buffers of records arrive in the window's last millisecond.
	waitFor("the window task took 100000 records", func() bool { return consumer.recordsIn.Load() >= 100_000 })
	if got := out.String(); got != "" {
		t.Fatalf("the window fired in its own last millisecond:\n%s", got)
	}
	clock.Store(windowEnd)
	waitFor("the window fired", func() bool { return strings.Contains(out.String(), "\n") })
	// More records in the next window's last-but-99 millisecond fire nothing more.
	in := consumer.recordsIn.Load()
	waitFor("the window task took 100000 more records", func() bool { return consumer.recordsIn.Load() >= in+100_000 })
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	start := time.UnixMilli(windowEnd - 100).UTC().Format(time.RFC3339Nano)
	if len(lines) != 1 || !strings.Contains(lines[0], `"window_start":"`+start+`"`) {
		t.Fatalf("output:\n%s\nwant one result, of the window that starts at %s", out.String(), start)
	}
}
