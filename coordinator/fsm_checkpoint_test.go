package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// applyResult applies cmd and returns the FSM's response value.
func (a *applier) applyResult(cmd *pb.RaftCommand) any {
	a.t.Helper()
	data, err := proto.Marshal(cmd)
	if err != nil {
		a.t.Fatal(err)
	}
	a.index++
	return a.f.Apply(&raft.Log{Type: raft.LogCommand, Index: a.index, Data: data})
}

func allocCmd(job string, n int32) *pb.RaftCommand {
	return &pb.RaftCommand{Op: &pb.RaftCommand_AllocateCheckpointId{AllocateCheckpointId: &pb.AllocateCheckpointIdCommand{JobId: job, Count: n}}}
}

func completeCmd(job string, id int64, retain int32) *pb.RaftCommand {
	return &pb.RaftCommand{Op: &pb.RaftCommand_CompleteCheckpoint{CompleteCheckpoint: &pb.CompleteCheckpointCommand{
		JobId: job, Checkpoint: &pb.CompletedCheckpoint{Id: id, Path: fmt.Sprintf("chk-%d", id)}, NumRetained: retain}}}
}

func TestFSMCheckpointIDsAndStore(t *testing.T) {
	a := newApplier(t)
	if err := a.apply(submitCmd("j1", "job", ts(1))); err != nil {
		t.Fatal(err)
	}
	// IDs are reserved in blocks and never handed out twice, also across "leaders" (any
	// proposer just takes the next block).
	var firsts []int64
	for _, n := range []int32{64, 1, 0, 3} {
		first, ok := a.applyResult(allocCmd("j1", n)).(int64)
		if !ok {
			t.Fatalf("allocate %d: result is not an ID", n)
		}
		firsts = append(firsts, first)
	}
	if want := []int64{1, 65, 66, 67}; !slices.Equal(firsts, want) {
		t.Errorf("first IDs of the blocks = %v, want %v", firsts, want)
	}
	if rec, _ := a.f.job("j1"); rec.GetLastCheckpointId() != 69 {
		t.Errorf("counter = %d, want 69", rec.GetLastCheckpointId())
	}

	// A completion for an ID never allocated is refused.
	if res := a.applyResult(completeCmd("j1", 70, 2)); res == nil {
		t.Errorf("completing unallocated checkpoint 70 succeeded")
	}
	// The store keeps num_retained, reports the subsumed ones, and never goes back.
	var subsumed []int64
	for _, id := range []int64{3, 5, 5, 4, 9} {
		res := a.applyResult(completeCmd("j1", id, 2))
		r, ok := res.([]*pb.CompletedCheckpoint)
		if !ok {
			t.Fatalf("complete %d: %v", id, res)
		}
		for _, s := range r {
			subsumed = append(subsumed, s.GetId())
		}
	}
	rec, _ := a.f.job("j1")
	var kept []int64
	for _, c := range rec.GetCheckpoints() {
		kept = append(kept, c.GetId())
	}
	if !slices.Equal(kept, []int64{5, 9}) || !slices.Equal(subsumed, []int64{3}) {
		t.Errorf("store %v, subsumed %v; want [5 9] and [3] (a repeated or older completion is ignored)", kept, subsumed)
	}

	// Terminal jobs take neither IDs nor completions.
	if err := a.apply(statusCmd("j1", pb.JobStatus_JOB_STATUS_CANCELED, "", ts(2))); err != nil {
		t.Fatal(err)
	}
	if err, _ := a.applyResult(allocCmd("j1", 1)).(error); !errors.Is(err, ErrJobTerminal) {
		t.Errorf("allocate after cancel = %v, want ErrJobTerminal", err)
	}
	if err, _ := a.applyResult(completeCmd("j1", 9, 2)).(error); !errors.Is(err, ErrJobTerminal) {
		t.Errorf("complete after cancel = %v, want ErrJobTerminal", err)
	}
}
