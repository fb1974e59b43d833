package coordinator

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/job"
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
)

// grpcCodes maps domain errors to gRPC status codes at the service boundary.
var grpcCodes = []struct {
	err  error
	code codes.Code
}{
	{ErrNotLeader, codes.FailedPrecondition},
	{ErrNoLeader, codes.Unavailable},
	{ErrJobNotFound, codes.NotFound},
	{ErrJobTerminal, codes.FailedPrecondition},
	{ErrUnknownTaskManager, codes.NotFound},
	{ErrTaskManagerIDInUse, codes.AlreadyExists},
	{ErrShuttingDown, codes.Unavailable},
	{ErrCheckpointingDisabled, codes.FailedPrecondition},
	{ErrJobNotRunning, codes.FailedPrecondition},
	{job.ErrInvalidSpec, codes.InvalidArgument},
}

// ReasonNotLeader is the errdetails.ErrorInfo reason on the FAILED_PRECONDITION status of a
// JobManager that is not the leader; clients try another JobManager when they see it.
const ReasonNotLeader = "NOT_LEADER"

// ReasonNoLeader is the errdetails.ErrorInfo reason on the UNAVAILABLE status of a JobManager
// that knows no leader (an election is under way); clients retry.
const ReasonNoLeader = "NO_LEADER"

// ReasonShuttingDown is the errdetails.ErrorInfo reason on the UNAVAILABLE status of a
// JobManager that is stopping.
const ReasonShuttingDown = "SHUTTING_DOWN"

// errorDomain is the errdetails.ErrorInfo domain of goflink's errors.
const errorDomain = "goflink"

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
	for _, r := range []struct {
		err    error
		code   codes.Code
		reason string
	}{{ErrNotLeader, codes.FailedPrecondition, ReasonNotLeader}, {ErrShuttingDown, codes.Unavailable, ReasonShuttingDown},
		{ErrNoLeader, codes.Unavailable, ReasonNoLeader}} {
		if errors.Is(err, r.err) {
			info := &errdetails.ErrorInfo{Reason: r.reason, Domain: errorDomain}
			if nl := (*notLeaderError)(nil); errors.As(err, &nl) && nl.leaderAddr != "" {
				info.Metadata = map[string]string{"leader": nl.leaderAddr, "leader_id": nl.leaderID}
			}
			st, derr := status.New(r.code, err.Error()).WithDetails(info)
			if derr == nil {
				return st.Err()
			}
		}
	}
	for _, m := range grpcCodes {
		if errors.Is(err, m.err) {
			return status.Error(m.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
