package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

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
	var buf bytes.Buffer
	env.stdout = &lockedWriter{w: &buf}
	output := func() string {
		env.stdout.mu.Lock()
		defer env.stdout.mu.Unlock()
		return buf.String()
	}

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

	took := func(n int64) func() error {
		return func() error {
			if got := consumer.meter.recordsIn.Load(); got < n {
				return fmt.Errorf("%d records in", got)
			}
			return nil
		}
	}
	// Many buffers of records arrive in the window's last millisecond.
	poll.Until(t, 20*time.Second, "the window task to take 100000 records", took(100_000))
	if got := output(); got != "" {
		t.Fatalf("the window fired in its own last millisecond:\n%s", got)
	}
	clock.Store(windowEnd)
	poll.Until(t, 20*time.Second, "the window to fire", func() error {
		if !strings.Contains(output(), "\n") {
			return errors.New("no result yet")
		}
		return nil
	})
	// More records in the next window's first millisecond fire nothing more.
	poll.Until(t, 20*time.Second, "the window task to take 100000 more records", took(consumer.meter.recordsIn.Load()+100_000))
	lines := strings.Split(strings.TrimSpace(output()), "\n")
	start := time.UnixMilli(windowEnd - 100).UTC().Format(time.RFC3339Nano)
	if len(lines) != 1 || !strings.Contains(lines[0], `"window_start":"`+start+`"`) {
		t.Fatalf("output:\n%s\nwant one result, of the window that starts at %s", output(), start)
	}
}
