package coordinator

import (
	"errors"
	"strings"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

func TestRescaledGraph(t *testing.T) {
	g := &pb.JobGraph{
		Vertices: []*pb.JobVertex{
			{Id: 0, Name: "src", Parallelism: 2, MaxParallelism: 128},
			{Id: 1, Name: "count", Parallelism: 2, MaxParallelism: 128},
			{Id: 2, Name: "sink", Parallelism: 1, MaxParallelism: 128, FixedParallelism: true},
			{Id: 3, Name: "side", Parallelism: 2, MaxParallelism: 128},
		},
		Edges: []*pb.JobEdge{
			{Source: 0, Target: 1, Partitioner: pb.Partitioner_PARTITIONER_HASH},
			{Source: 1, Target: 2, Partitioner: pb.Partitioner_PARTITIONER_REBALANCE},
			{Source: 0, Target: 3, Partitioner: pb.Partitioner_PARTITIONER_FORWARD},
			{Source: 3, Target: 2, Partitioner: pb.Partitioner_PARTITIONER_FORWARD},
		},
	}
	out, changed, err := rescaledGraph(g, 4)
	if err != nil || !changed {
		t.Fatalf("rescaledGraph(4) = %v, %v", changed, err)
	}
	for i, want := range []int32{4, 4, 1, 4} {
		if got := out.GetVertices()[i].GetParallelism(); got != want {
			t.Errorf("vertex %d parallelism %d, want %d", i, got, want)
		}
	}
	if got := out.GetEdges()[2].GetPartitioner(); got != pb.Partitioner_PARTITIONER_FORWARD {
		t.Errorf("forward edge between equal parallelisms became %v", got)
	}
	if got := out.GetEdges()[3].GetPartitioner(); got != pb.Partitioner_PARTITIONER_REBALANCE {
		t.Errorf("forward edge into the fixed sink (4 → 1) is %v, want REBALANCE", got)
	}
	if g.GetVertices()[0].GetParallelism() != 2 {
		t.Errorf("rescaledGraph changed its input")
	}
	if _, changed, err := rescaledGraph(g, 2); err != nil || changed {
		t.Errorf("rescaledGraph(same) = %v, %v; want no change", changed, err)
	}
	for _, n := range []int32{0, -1, 129} {
		if _, _, err := rescaledGraph(g, n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("rescaledGraph(%d) = %v, want ErrInvalidArgument", n, err)
		}
	}
	if _, _, err := rescaledGraph(g, 129); err == nil || !strings.Contains(err.Error(), "max parallelism 128") {
		t.Errorf("rescaledGraph(129) = %v, want the max parallelism named", err)
	}
	fixed := &pb.JobGraph{Vertices: []*pb.JobVertex{{Name: "a", Parallelism: 1, MaxParallelism: 128, FixedParallelism: true}}}
	if _, _, err := rescaledGraph(fixed, 3); err == nil {
		t.Errorf("rescaling a job whose every parallelism is fixed = nil error")
	}
}

func TestFSMSavepointsAndRescale(t *testing.T) {
	h := &fsmHost{f: newFSM(discardLog)}
	graph := &pb.JobGraph{Vertices: []*pb.JobVertex{{Parallelism: 2}}}
	restore := &pb.CompletedCheckpoint{Id: 41, Path: ".", BaseDir: "/sp/savepoint-a", Savepoint: true, NotOwned: true}
	h.apply(&pb.RaftCommand{Op: &pb.RaftCommand_SubmitJob{SubmitJob: &pb.SubmitJobCommand{JobId: "j", Graph: graph, Restore: restore}}})
	rec, _ := h.f.job("j")
	if rec.GetLastCheckpointId() != 41 || len(rec.GetCheckpoints()) != 1 || rec.GetCheckpoints()[0].GetId() != 41 {
		t.Fatalf("job started from a snapshot: last id %d, checkpoints %v", rec.GetLastCheckpointId(), rec.GetCheckpoints())
	}
	first, err := h.allocateCheckpointIDs("j", 4)
	if err != nil || first != 42 {
		t.Fatalf("first checkpoint ID after the restore = %d, %v; want 42", first, err)
	}
	// An intermediate savepoint: recorded, not retained.
	if _, err := h.completeCheckpoint("j", &pb.CompletedCheckpoint{Id: 42, Savepoint: true, Path: ".", BaseDir: "/sp/b"}, 1, true); err != nil {
		t.Fatal(err)
	}
	// A checkpoint subsumes the restored snapshot, which the job does not own.
	subsumed, err := h.completeCheckpoint("j", &pb.CompletedCheckpoint{Id: 43, Path: "chk-43", BaseDir: "/cp/j"}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(subsumed) != 1 || subsumed[0].GetId() != 41 || !subsumed[0].GetNotOwned() {
		t.Errorf("subsumed %v, want the not-owned snapshot 41", subsumed)
	}
	rec, _ = h.f.job("j")
	if len(rec.GetSavepoints()) != 1 || rec.GetSavepoints()[0].GetId() != 42 {
		t.Errorf("savepoints %v, want 42", rec.GetSavepoints())
	}
	if len(rec.GetCheckpoints()) != 1 || rec.GetCheckpoints()[0].GetId() != 43 {
		t.Errorf("checkpoints %v, want 43 only", rec.GetCheckpoints())
	}
	// Applying a savepoint twice records it once.
	if _, err := h.completeCheckpoint("j", &pb.CompletedCheckpoint{Id: 42, Savepoint: true}, 1, true); err != nil {
		t.Fatal(err)
	}
	if rec, _ = h.f.job("j"); len(rec.GetSavepoints()) != 1 {
		t.Errorf("a savepoint applied twice is recorded %d times", len(rec.GetSavepoints()))
	}
	// Rescale replaces the graph; a graph of another shape is refused.
	if err := h.rescaleJob("j", &pb.JobGraph{Vertices: []*pb.JobVertex{{Parallelism: 4}}}); err != nil {
		t.Fatal(err)
	}
	if rec, _ = h.f.job("j"); rec.GetGraph().GetVertices()[0].GetParallelism() != 4 {
		t.Errorf("graph after rescale has parallelism %d", rec.GetGraph().GetVertices()[0].GetParallelism())
	}
	if err := h.rescaleJob("j", &pb.JobGraph{}); err == nil {
		t.Errorf("rescale to a graph without vertices = nil error")
	}
}
