package coordinator

import (
	"fmt"
	"slices"
	"strings"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Unaligned checkpoints (execution.checkpointing.unaligned) on the JobManager's side: the
// barrier says whether a checkpoint may be taken unaligned (checkpointCoordinator.triggerNow),
// the acknowledgements say whether it was and how much in-flight data it persisted (ack). A
// snapshot holding channel state restores only at the parallelism it was taken at: its
// buffers belong to channels between particular subtasks. A rescale therefore restores from an
// aligned checkpoint it takes itself, and every restore checks.

// hasChannelState reports whether a snapshot holds in-flight data of an unaligned checkpoint.
func hasChannelState(md *pb.CheckpointMetadata) bool {
	return slices.ContainsFunc(md.GetStates(), func(st *pb.OperatorSubtaskState) bool {
		cs := st.GetChannelState()
		return cs.GetFile() != nil || len(cs.GetInput()) > 0 || len(cs.GetOutput()) > 0
	})
}

// channelStateBytes is the in-flight data a snapshot holds: the records bytes of its channel
// state buffers.
func channelStateBytes(md *pb.CheckpointMetadata) int64 {
	var n int64
	for _, st := range md.GetStates() {
		for _, b := range slices.Concat(st.GetChannelState().GetInput(), st.GetChannelState().GetOutput()) {
			n += b.GetSize()
		}
	}
	return n
}

// checkUnalignedRestore refuses to restore snapshot md (checkpoint id) into graph g when md
// holds channel state and an operator of g runs at another parallelism than the snapshot's
// subtasks were taken at. Operators of the snapshot that g does not have, and operators of g
// the snapshot does not know, are left to the uid matching.
func checkUnalignedRestore(g *pb.JobGraph, id int64, md *pb.CheckpointMetadata) error {
	if !hasChannelState(md) {
		return nil
	}
	vertexOf := vertexByUID(g)
	seen := map[string]bool{}
	var msgs []string
	for _, st := range md.GetStates() {
		v := vertexOf[st.GetOperator()]
		if v == nil || seen[st.GetOperator()] || st.GetParallelism() == v.GetParallelism() {
			continue
		}
		seen[st.GetOperator()] = true
		msgs = append(msgs, fmt.Sprintf("operator uid %q was checkpointed at parallelism %d, the job runs %q at %d",
			st.GetOperator(), st.GetParallelism(), v.GetName(), v.GetParallelism()))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: checkpoint %d is an unaligned checkpoint (it holds in-flight data), which restores only at the parallelism it was taken at: %s; "+
		"change the parallelism through a savepoint or an aligned checkpoint (savepoints are always aligned)", ErrInvalidRestore, id, strings.Join(msgs, "; "))
}
