package coordinator

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/leaderrpc"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/storage"
)

var (
	// ErrNotLeader is returned by a JobManager that is not the Raft leader.
	ErrNotLeader = errors.New("this jobmanager is not the leader")
	// ErrNoLeader is returned while no leader is known (an election is under way).
	ErrNoLeader = errors.New("no jobmanager leader is known")
	// ErrJobNotFound is returned for an unknown job ID.
	ErrJobNotFound = errors.New("job not found")
	// ErrJobTerminal is returned when an operation needs a job that has not ended yet.
	ErrJobTerminal = errors.New("job has already ended")
	// ErrUnknownTaskManager is returned for a registration the JobManager does not know (it
	// was declared lost, or belongs to an earlier leader); the TaskManager registers again.
	ErrUnknownTaskManager = errors.New("unknown taskmanager registration")
	// ErrTaskManagerIDInUse refuses a registration under the ID of a live TaskManager of
	// another process: two TaskManagers cannot share an ID.
	ErrTaskManagerIDInUse = errors.New("taskmanager ID in use")
	// ErrShuttingDown is returned while the JobManager stops.
	ErrShuttingDown = errors.New("jobmanager is shutting down")
	// ErrCheckpointingDisabled is returned when a checkpoint is requested for a job that does
	// not take checkpoints.
	ErrCheckpointingDisabled = errors.New("checkpointing is not enabled for this job (set execution.checkpointing.interval)")
	// ErrJobNotRunning is returned when an operation needs a running job.
	ErrJobNotRunning = errors.New("job is not running")
	// ErrStopInProgress refuses a savepoint or rescale while a stop-with-savepoint runs.
	ErrStopInProgress = errors.New("a stop-with-savepoint is in progress")
	// ErrNoSavepointDir is returned for a savepoint without a directory and without
	// execution.checkpointing.savepoint-dir.
	ErrNoSavepointDir = errors.New("no savepoint directory: give one or set execution.checkpointing.savepoint-dir")
	// ErrInvalidRestore is wrapped by every refusal of a snapshot to start a job from (flinkctl
	// run -s): not a snapshot, corrupt, state the job cannot take.
	ErrInvalidRestore = errors.New("cannot start the job from this snapshot")
	// ErrInvalidArgument is wrapped by other refusals of a request's values (a parallelism
	// out of range).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotEnoughSlots refuses a rescale the cluster has no slots for.
	ErrNotEnoughSlots = errors.New("not enough free slots")
	// ErrSavepointFailed is returned when a triggered savepoint did not complete.
	ErrSavepointFailed = errors.New("savepoint failed")
	// ErrInvalidCommand is wrapped by the FSM's rejection of a Raft entry that does not decode
	// or whose values are invalid whatever the state (validateCommand); the leader refuses to
	// propose such a command with the same error.
	ErrInvalidCommand = errors.New("invalid raft command")
	// ErrPathNotAllowed refuses a local path that a job or a request names outside the
	// JobManager's io.allowed-paths.
	ErrPathNotAllowed = errors.New("path not allowed")
	// ErrOutputInUse refuses a sink directory that another sink of the job, or of a job that
	// has not ended, writes into.
	ErrOutputInUse = errors.New("sink directory in use")
)

// grpcCodes maps domain errors to gRPC status codes at the service boundary (etcd's
// toGRPCErrorMap). The leader protocol's errors (ErrNotLeader, ErrNoLeader, ErrShuttingDown)
// become leaderrpc's statuses, which clients and TaskManagers read.
var grpcCodes = []struct {
	err  error
	code codes.Code
}{
	{ErrJobNotFound, codes.NotFound},
	{ErrJobTerminal, codes.FailedPrecondition},
	{ErrUnknownTaskManager, codes.NotFound},
	{ErrTaskManagerIDInUse, codes.AlreadyExists},
	{ErrCheckpointingDisabled, codes.FailedPrecondition},
	{ErrJobNotRunning, codes.FailedPrecondition},
	{ErrStopInProgress, codes.FailedPrecondition},
	{ErrNoSavepointDir, codes.FailedPrecondition},
	{ErrInvalidRestore, codes.InvalidArgument},
	{ErrInvalidArgument, codes.InvalidArgument},
	{ErrSavepointFailed, codes.Aborted},
	{ErrNotEnoughSlots, codes.FailedPrecondition},
	{ErrPathNotAllowed, codes.PermissionDenied},
	{ErrOutputInUse, codes.FailedPrecondition},
	{job.ErrInvalidSpec, codes.InvalidArgument},
	{storage.ErrAccessDenied, codes.PermissionDenied},
	{storage.ErrNoSuchBucket, codes.FailedPrecondition},
	// Not Unavailable: that is the leader protocol's "try another JobManager".
	{storage.ErrUnreachable, codes.FailedPrecondition},
}

// notLeaderError is ErrNotLeader with the leader that followers know of: its node ID and,
// once it recorded it, its RPC address. Clients and TaskManagers follow the hint.
type notLeaderError struct {
	leaderID, leaderAddr string
}

func (e *notLeaderError) Error() string {
	if e.leaderAddr == "" {
		return fmt.Sprintf("%v (the leader is %s; its address is not known yet)", ErrNotLeader, e.leaderID)
	}
	return fmt.Sprintf("%v (the leader is %s at %s)", ErrNotLeader, e.leaderID, e.leaderAddr)
}

func (e *notLeaderError) Is(target error) bool { return target == ErrNotLeader }

// toStatus converts an error for a gRPC response. Context errors pass through unchanged.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var nl *notLeaderError
	switch {
	case errors.As(err, &nl):
		return leaderrpc.NotLeader(err.Error(), nl.leaderID, nl.leaderAddr)
	case errors.Is(err, ErrNotLeader):
		return leaderrpc.NotLeader(err.Error(), "", "")
	case errors.Is(err, ErrNoLeader):
		return leaderrpc.NoLeader(err.Error())
	case errors.Is(err, ErrShuttingDown):
		return leaderrpc.ShuttingDown(err.Error())
	}
	for _, m := range grpcCodes {
		if errors.Is(err, m.err) {
			return status.Error(m.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
