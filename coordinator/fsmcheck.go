package coordinator

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Bounds of the values in Raft commands. Apply rejects a command beyond them whatever its
// origin (a forged entry, a bug): these values become file names, map keys and slice sizes on
// every JobManager.
const (
	// maxJobIDLen bounds a job ID. The leader's are 32 hex digits; a job ID names the job's
	// checkpoint directory, so only letters, digits, '-' and '_' are accepted.
	maxJobIDLen = 64
	// maxNodeIDLen bounds a JobManager's Raft node ID (a host name fits).
	maxNodeIDLen = 255
	// maxAddrLen bounds a host:port address: a DNS name (253) with a port.
	maxAddrLen = 261
	// maxCheckpointID is the highest checkpoint ID a job may reach. It leaves room below
	// math.MaxInt64 for a full block of IDs (maxCheckpointIDBlock), so the counter never wraps.
	maxCheckpointID = 1 << 62
	// maxRemoveJobs bounds the jobs one RemoveJobsCommand removes; the leader splits a larger
	// sweep (after jobstore.max-capacity was lowered) into several commands.
	maxRemoveJobs = 1000
)

// validateCommand checks a command's values without the state: the checks every replica makes
// the same way (they depend only on the command), made by Apply and by the leader before it
// proposes. It names the first invalid field.
func validateCommand(cmd *pb.RaftCommand) error {
	err := validateOp(cmd)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCommand, err)
	}
	return nil
}

func validateOp(cmd *pb.RaftCommand) error {
	switch op := cmd.GetOp().(type) {
	case *pb.RaftCommand_SubmitJob:
		c := op.SubmitJob
		if err := checkJobID(c.GetJobId()); err != nil {
			return fmt.Errorf("submit job: %w", err)
		}
		if err := checkGraph(c.GetGraph()); err != nil {
			return fmt.Errorf("submit job %s: %w", c.GetJobId(), err)
		}
		if r := c.GetRestore(); r != nil {
			if err := checkCompleted(r); err != nil {
				return fmt.Errorf("submit job %s: restore: %w", c.GetJobId(), err)
			}
		}
	case *pb.RaftCommand_UpdateJobStatus:
		c := op.UpdateJobStatus
		if err := checkJobID(c.GetJobId()); err != nil {
			return fmt.Errorf("update job status: %w", err)
		}
		switch s := c.GetStatus(); {
		case s == pb.JobStatus_JOB_STATUS_UNSPECIFIED || s == pb.JobStatus_JOB_STATUS_CREATED:
			return fmt.Errorf("update job %s: status %v is not one a job moves to", c.GetJobId(), s)
		case pb.JobStatus_name[int32(s)] == "":
			return fmt.Errorf("update job %s: status %d is unknown", c.GetJobId(), s)
		}
	case *pb.RaftCommand_AllocateCheckpointId:
		if err := checkJobID(op.AllocateCheckpointId.GetJobId()); err != nil {
			return fmt.Errorf("allocate checkpoint ID: %w", err)
		}
	case *pb.RaftCommand_CompleteCheckpoint:
		c := op.CompleteCheckpoint
		if err := checkJobID(c.GetJobId()); err != nil {
			return fmt.Errorf("complete checkpoint: %w", err)
		}
		if c.GetCheckpoint() == nil {
			return fmt.Errorf("complete checkpoint of job %s: checkpoint is missing", c.GetJobId())
		}
		if err := checkCompleted(c.GetCheckpoint()); err != nil {
			return fmt.Errorf("complete checkpoint of job %s: %w", c.GetJobId(), err)
		}
	case *pb.RaftCommand_RescaleJob:
		c := op.RescaleJob
		if err := checkJobID(c.GetJobId()); err != nil {
			return fmt.Errorf("rescale job: %w", err)
		}
		if err := checkGraph(c.GetGraph()); err != nil {
			return fmt.Errorf("rescale job %s: %w", c.GetJobId(), err)
		}
	case *pb.RaftCommand_RegisterJobmanager:
		c := op.RegisterJobmanager
		if err := checkNodeID(c.GetNodeId()); err != nil {
			return fmt.Errorf("register jobmanager: %w", err)
		}
		if err := checkHostPort(c.GetRpcAddress()); err != nil {
			return fmt.Errorf("register jobmanager %s: rpc_address: %w", c.GetNodeId(), err)
		}
	case *pb.RaftCommand_RemoveJobs:
		ids := op.RemoveJobs.GetJobIds()
		if len(ids) > maxRemoveJobs {
			return fmt.Errorf("remove jobs: %d jobs in one command, the limit is %d", len(ids), maxRemoveJobs)
		}
		for _, id := range ids {
			if err := checkJobID(id); err != nil {
				return fmt.Errorf("remove jobs: %w", err)
			}
		}
	case nil:
		return errors.New("the entry holds no command (or one of a newer version)")
	default:
		return fmt.Errorf("unknown command %T", op)
	}
	return nil
}

// checkJobID checks a job ID: 1 to maxJobIDLen letters, digits, '-' or '_'.
func checkJobID(id string) error {
	if id == "" {
		return errors.New("job_id is empty")
	}
	if len(id) > maxJobIDLen {
		return fmt.Errorf("job_id is %d bytes long, the limit is %d", len(id), maxJobIDLen)
	}
	for _, r := range id {
		if !isIDChar(r) {
			return fmt.Errorf("job_id %q has a character other than letters, digits, '-' and '_'", id)
		}
	}
	return nil
}

func isIDChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// checkNodeID checks a JobManager's Raft node ID: not empty, at most maxNodeIDLen bytes, no
// control characters.
func checkNodeID(id string) error {
	if id == "" {
		return errors.New("node_id is empty")
	}
	if len(id) > maxNodeIDLen {
		return fmt.Errorf("node_id is %d bytes long, the limit is %d", len(id), maxNodeIDLen)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("node_id %q has a control character", id)
		}
	}
	return nil
}

// checkHostPort checks a dialable host:port address: a host and a port from 1 to 65535, at
// most maxAddrLen bytes.
func checkHostPort(addr string) error {
	if len(addr) > maxAddrLen {
		return fmt.Errorf("address is %d bytes long, the limit is %d", len(addr), maxAddrLen)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("%q: the host is missing", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: the port must be a number from 1 to 65535", addr)
	}
	return nil
}

// checkGraph checks what the JobManager indexes by in a job graph: vertex i has ID i and at
// least one subtask, and every edge connects two of the vertices.
func checkGraph(g *pb.JobGraph) error {
	if g == nil {
		return errors.New("graph is missing")
	}
	vs := g.GetVertices()
	for i, v := range vs {
		if v.GetId() != int32(i) {
			return fmt.Errorf("graph: vertex %d has ID %d", i, v.GetId())
		}
		if v.GetParallelism() < 1 {
			return fmt.Errorf("graph: vertex %d has parallelism %d, want at least 1", i, v.GetParallelism())
		}
	}
	for i, e := range g.GetEdges() {
		for _, end := range []int32{e.GetSource(), e.GetTarget()} {
			if end < 0 || int(end) >= len(vs) {
				return fmt.Errorf("graph: edge %d names vertex %d, which does not exist (%d vertices)", i, end, len(vs))
			}
		}
	}
	return nil
}

// checkCompleted checks a completed checkpoint's ID: from 1 to maxCheckpointID.
func checkCompleted(cp *pb.CompletedCheckpoint) error {
	if id := cp.GetId(); id < 1 || id > maxCheckpointID {
		return fmt.Errorf("checkpoint ID %d is out of range [1, %d]", id, int64(maxCheckpointID))
	}
	return nil
}

// checkJobRecord checks a job record of a snapshot as validateCommand checks commands: a valid
// job ID, a graph the JobManager can index, a known status.
func checkJobRecord(j *pb.JobRecord) error {
	if err := checkJobID(j.GetId()); err != nil {
		return err
	}
	if err := checkGraph(j.GetGraph()); err != nil {
		return fmt.Errorf("job %s: %w", j.GetId(), err)
	}
	if s := j.GetStatus(); s == pb.JobStatus_JOB_STATUS_UNSPECIFIED || pb.JobStatus_name[int32(s)] == "" {
		return fmt.Errorf("job %s: status %d is unknown", j.GetId(), s)
	}
	return nil
}
