package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/execid"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/state"
)

// listener records the checkpoint notifications it receives.
type listener struct{ calls []string }

func (l *listener) NotifyCheckpointComplete(id int64) error {
	l.calls = append(l.calls, fmt.Sprintf("complete(%d)", id))
	return nil
}

func (l *listener) NotifyCheckpointAborted(id int64) error {
	l.calls = append(l.calls, fmt.Sprintf("aborted(%d)", id))
	return nil
}

func TestCheckpointNotificationsAreMonotonic(t *testing.T) {
	l := &listener{}
	tk := &task{chain: []chainMember{{name: "sink", impl: l}}, aborted: map[int64]bool{}}
	steps := []struct {
		name string
		do   func() error
	}{
		{"complete 3", func() error { return tk.notifyComplete(3) }},
		{"late complete 2 is ignored", func() error { return tk.notifyComplete(2) }},
		{"duplicate complete 3 is ignored", func() error { return tk.notifyComplete(3) }},
		// The completion of 4 was lost: the abort of 5 carries it and redelivers it first.
		{"abort 5 with latest completed 4", func() error { return tk.notifyAborted(5, 4) }},
		{"abort 6 with latest completed 4 again", func() error { return tk.notifyAborted(6, 4) }},
		{"complete 7 skips 5 and 6", func() error { return tk.notifyComplete(7) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	want := []string{"complete(3)", "complete(4)", "aborted(5)", "aborted(6)", "complete(7)"}
	if !slices.Equal(l.calls, want) {
		t.Errorf("operator saw %v, want %v", l.calls, want)
	}
	// An aborted checkpoint whose barrier has not come yet is remembered, so the barrier is
	// answered with a cancellation marker instead of a snapshot.
	if !tk.aborted[5] || !tk.aborted[6] {
		t.Errorf("aborted IDs %v, want 5 and 6 remembered", tk.aborted)
	}
}

// The JobManager triggers a task by RPC once all its producers finished; their end of
// partition may still be on the way. The task takes such checkpoints when its input has
// ended, oldest first, instead of declining them.
func TestTriggerBeforeInputEndIsDeferred(t *testing.T) {
	acks := make(chan int64, 4)
	tk := &task{
		ctx: t.Context(), id: &pb.ExecutionAttemptID{}, vertex: &pb.JobVertex{Parallelism: 1, MaxParallelism: 128},
		env:     &taskEnv{ack: func(r *pb.AcknowledgeCheckpointRequest) { acks <- r.GetCheckpointId() }},
		chain:   []chainMember{{name: "sum", store: state.NewOperatorStateStore()}},
		aborted: map[int64]bool{}, meter: newTaskMeter(),
	}
	for _, id := range []int64{5, 4} {
		if err := tk.triggerFromRPC(&pb.CheckpointBarrier{CheckpointId: id}); err != nil {
			t.Fatalf("trigger %d: %v", id, err)
		}
	}
	if tk.lastCheckpoint != 0 || len(acks) != 0 {
		t.Fatalf("checkpoint taken before the input ended (last %d, %d acks)", tk.lastCheckpoint, len(acks))
	}
	tk.ending = true
	if err := tk.takeDeferred(); err != nil {
		t.Fatal(err)
	}
	tk.async.Wait()
	close(acks)
	var got []int64
	for id := range acks {
		got = append(got, id)
	}
	// Both were taken: had 5 gone first, 4 would have been skipped as overtaken. (The acks
	// themselves go out from the asynchronous parts, in any order.)
	slices.Sort(got)
	if !slices.Equal(got, []int64{4, 5}) || tk.lastCheckpoint != 5 || tk.deferred != nil {
		t.Errorf("acknowledged %v (last %d, deferred %v), want 4 and 5", got, tk.lastCheckpoint, tk.deferred)
	}
}

// A checkpoint command to a task that ended successfully says so (the trigger RPC then
// succeeds: the task's FINISHED report hands its final state to the checkpoint); one to a
// task that failed or was cancelled says it is not running.
func TestCommandToEndedTask(t *testing.T) {
	for _, ok := range []bool{true, false} {
		tk := &task{mail: make(chan func() error), done: make(chan struct{})}
		tk.ctx, tk.cancel = context.WithCancelCause(t.Context())
		tk.finished.Store(ok)
		tk.cancel(errTaskCanceled)
		close(tk.done)
		want := errTaskNotRunning
		if ok {
			want = errTaskFinished
		}
		if err := tk.post(t.Context(), func() error { return nil }); !errors.Is(err, want) {
			t.Errorf("post to a task that ended (finished=%v) = %v, want %v", ok, err, want)
		}
	}
}

// A notification naming several tasks reaches each at once: a task whose mailbox stays full
// (its loop blocked) holds up only its own, not the others' (they would otherwise wait for
// the RPC's deadline and then miss it).
func TestNotifyDoesNotWaitForABlockedTask(t *testing.T) {
	blocked := &task{mail: make(chan func() error), done: make(chan struct{})} // nobody reads
	blocked.ctx = t.Context()
	reading := &task{mail: make(chan func() error, 1), done: make(chan struct{})}
	reading.ctx = t.Context()
	ids := []*pb.ExecutionAttemptID{{JobId: "j", VertexId: 0}, {JobId: "j", VertexId: 1}}
	tm := &TaskManager{ctx: t.Context(), registration: "r", leaderTerm: 2,
		tasks: map[string]*task{execid.Key(ids[0]): blocked, execid.Key(ids[1]): reading}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := notify(ctx, tm, "r", 2, ids, &pb.NotifyCheckpointCompleteResponse{}, func(*task) error { return nil })
		done <- err
	}()
	select {
	case <-reading.mail: // delivered while the other task's mailbox stays full
	case <-time.After(10 * time.Second):
		t.Fatal("the reading task got no notification while another task was blocked")
	}
	cancel() // the RPC's deadline: the blocked task's post gives up
	if err := <-done; err != nil {
		t.Fatalf("notify = %v, want nil (best effort)", err)
	}
}
