package operator

import (
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/state"
)

// The checkpoint hooks below are optional interfaces of operators and sources; a task calls
// them from its event loop, never concurrently with Process or Emit. Their order per
// checkpoint N follows Flink's SubtaskCheckpointCoordinatorImpl:
//
//	PrepareSnapshotPreBarrier(N)  sinks flush and pre-commit
//	barrier N is broadcast downstream
//	SnapshotState(N)              operators write their operator list state; the keyed state
//	                              backend snapshots itself (synchronous part)
//	upload, then acknowledge      (asynchronous, off the event loop)
//	NotifyCheckpointComplete(M)   M ≥ N once the checkpoint is committed (monotonic, may skip)
//
// An error from PrepareSnapshotPreBarrier or SnapshotState fails the task (a synchronous-phase
// failure); an error from a notification fails the task too, and the restore re-commits.

// ListState is an operator (non-keyed) list state of opaque elements. Get returns the
// elements restored (or last updated); Update replaces them.
type ListState interface {
	Get() [][]byte
	Update(elements [][]byte)
}

// StateContext gives an operator its state before Open.
type StateContext interface {
	// ListState returns the operator list state of this name, registering it on first use. On
	// restore it holds this subtask's share of the checkpointed elements: a contiguous chunk of
	// all subtasks' elements for LIST_DISTRIBUTION_SPLIT, all of them for
	// LIST_DISTRIBUTION_UNION.
	ListState(name string, d pb.ListDistribution) (ListState, error)
	// KeyedBackend returns the task's keyed state backend, or nil when the operator does not
	// run on a keyed stream. State names must be unique per operator; prefix them with the
	// operator's name.
	KeyedBackend() state.KeyedBackend
	// RestoredCheckpointID is the checkpoint the state was restored from (0: a fresh start).
	RestoredCheckpointID() int64
}

// Stateful operators and sources get their state before Open.
type Stateful interface {
	InitializeState(sc StateContext) error
}

// PreBarrier operators do work before the barrier of a checkpoint is sent downstream: a
// two-phase-commit sink flushes and pre-commits its transaction there.
type PreBarrier interface {
	PrepareSnapshotPreBarrier(checkpointID int64) error
}

// Snapshotter operators write their operator list state for a checkpoint.
type Snapshotter interface {
	SnapshotState(checkpointID int64) error
}

// JobEnder operators act when the job ends for good while their task runs: it is cancelled,
// or failed with no restart to follow. Where a failover would leave work for the restore
// (pre-committed transactions, which the restored sink commits or aborts), nothing comes after
// this task: EndJob does that work instead. lastCompleted is the job's newest completed
// checkpoint (0: none); checkpointing has stopped, so no later one completes, and its
// notification may not have reached the task. The task calls EndJob after its loop stopped
// and before Close, in the task goroutine; an error is logged (the task is cancelled anyway).
type JobEnder interface {
	EndJob(lastCompleted int64) error
}

// CheckpointListener operators hear about completed and aborted checkpoints.
// NotifyCheckpointComplete(N) means every checkpoint ≤ N is committed.
type CheckpointListener interface {
	NotifyCheckpointComplete(checkpointID int64) error
	NotifyCheckpointAborted(checkpointID int64) error
}

// CheckpointDecliner operators and sources cannot take some checkpoints: a change-data-capture
// source reading a table's initial snapshot has no position a restore could resume from. The
// task asks every member of its chain before a checkpoint's pre-barrier work; a non-empty
// reason declines the checkpoint (CHECKPOINT_DECLINED_TASK_NOT_READY, which does not count
// toward execution.checkpointing.tolerable-failed-checkpoints, as in Flink) and sends a
// cancellation marker downstream instead of the barrier. The operator's state is not touched
// and the task goes on. It is called from the task's goroutine, like the other hooks.
type CheckpointDecliner interface {
	DeclineCheckpoint(checkpointID int64) (reason string)
}
