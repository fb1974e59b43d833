// Package client is a Go client for a goflink cluster: it talks to the JobManagers' public
// gRPC services, trying every given address and retrying while no leader answers.
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Client talks to a cluster through any of its JobManagers. Safe for concurrent use.
type Client struct {
	addrs []string
	conns []*grpc.ClientConn
	// Wait is how long a call keeps retrying while no JobManager can serve it.
	Wait time.Duration
}

// New connects lazily to the given JobManager addresses ("host:port", comma lists allowed).
func New(addrs ...string) (*Client, error) {
	c := &Client{Wait: 15 * time.Second}
	for _, a := range addrs {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.addrs = append(c.addrs, p)
			}
		}
	}
	if len(c.addrs) == 0 {
		return nil, errors.New("no jobmanager address given")
	}
	for _, a := range c.addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("jobmanager address %q: %w", a, err)
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() error {
	for _, conn := range c.conns {
		conn.Close()
	}
	return nil
}

// reasonNotLeader is the ErrorInfo reason a JobManager that does not lead puts on its
// FAILED_PRECONDITION answers.
const reasonNotLeader = "NOT_LEADER"

// retryable says whether another JobManager (or a later try) may serve the call: none is
// reachable or leading yet (UNAVAILABLE), or this one is not the leader.
func retryable(err error) bool {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		return true
	case codes.FailedPrecondition:
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == reasonNotLeader {
				return true
			}
		}
	}
	return false
}

// call runs fn against each JobManager in turn until one serves it, backing off while none can,
// for up to c.Wait.
func call[T any](ctx context.Context, c *Client, fn func(conn *grpc.ClientConn) (T, error)) (T, error) {
	deadline := time.Now().Add(c.Wait)
	backoff := 50 * time.Millisecond
	for {
		var last error
		for _, conn := range c.conns {
			res, err := fn(conn)
			if err == nil || !retryable(err) {
				return res, err
			}
			last = err
		}
		var zero T
		if time.Now().After(deadline) {
			return zero, fmt.Errorf("no jobmanager could serve the request within %v (tried %s): %w", c.Wait, strings.Join(c.addrs, ", "), last)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return zero, ctx.Err()
		}
		backoff = min(backoff*2, time.Second)
	}
}

// Submit submits a YAML job spec and returns the job ID.
func (c *Client) Submit(ctx context.Context, req *pb.SubmitJobRequest) (string, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.SubmitJobResponse, error) {
		return pb.NewJobServiceClient(conn).SubmitJob(ctx, req)
	})
	return resp.GetJobId(), err
}

// List lists the cluster's jobs, newest first.
func (c *Client) List(ctx context.Context) ([]*pb.JobSummary, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.ListJobsResponse, error) {
		return pb.NewJobServiceClient(conn).ListJobs(ctx, &pb.ListJobsRequest{})
	})
	return resp.GetJobs(), err
}

// Job returns one job's details.
func (c *Client) Job(ctx context.Context, id string) (*pb.JobDetails, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.GetJobResponse, error) {
		return pb.NewJobServiceClient(conn).GetJob(ctx, &pb.GetJobRequest{JobId: id})
	})
	return resp.GetJob(), err
}

// Cancel cancels a job.
func (c *Client) Cancel(ctx context.Context, id string) error {
	_, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.CancelJobResponse, error) {
		return pb.NewJobServiceClient(conn).CancelJob(ctx, &pb.CancelJobRequest{JobId: id})
	})
	return err
}

// Cluster describes the cluster.
func (c *Client) Cluster(ctx context.Context) (*pb.GetClusterResponse, error) {
	return call(ctx, c, func(conn *grpc.ClientConn) (*pb.GetClusterResponse, error) {
		return pb.NewClusterServiceClient(conn).GetCluster(ctx, &pb.GetClusterRequest{})
	})
}

// Checkpoints returns a job's checkpoint history, newest first: checkpoints in progress,
// completed and failed ones, and the retained completed checkpoints. Entries with ID 0 are
// triggers that could not start a checkpoint.
func (c *Client) Checkpoints(ctx context.Context, id string) ([]*pb.CheckpointInfo, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.ListCheckpointsResponse, error) {
		return pb.NewJobServiceClient(conn).ListCheckpoints(ctx, &pb.ListCheckpointsRequest{JobId: id})
	})
	return resp.GetCheckpoints(), err
}

// TriggerCheckpoint triggers a checkpoint of a running job and waits until it completed or
// failed. A checkpoint that failed is an outcome, not an error: it comes back with status FAILED
// (and ID 0 when it could not even start). The JobManager answers FAILED_PRECONDITION when the
// job does not take checkpoints or is not running. A checkpoint can take minutes
// (execution.checkpointing.timeout, 10 min by default): give ctx a deadline to match.
func (c *Client) TriggerCheckpoint(ctx context.Context, id string) (*pb.CheckpointInfo, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.TriggerCheckpointResponse, error) {
		return pb.NewJobServiceClient(conn).TriggerCheckpoint(ctx, &pb.TriggerCheckpointRequest{JobId: id})
	})
	if err != nil {
		return nil, err
	}
	if resp.GetCheckpoint() == nil {
		return nil, fmt.Errorf("checkpoint job %s: the jobmanager answered without a checkpoint", id)
	}
	return resp.GetCheckpoint(), nil
}

// Watch calls fn with the job's details on every change until the job ends (returning its last
// details), fn returns an error, or ctx is done. A broken stream is resumed.
func (c *Client) Watch(ctx context.Context, id string, fn func(*pb.JobDetails) error) (*pb.JobDetails, error) {
	var last *pb.JobDetails
	for {
		stream, err := call(ctx, c, func(conn *grpc.ClientConn) (pb.JobService_WatchJobClient, error) {
			s, err := pb.NewJobServiceClient(conn).WatchJob(ctx, &pb.WatchJobRequest{JobId: id})
			if err != nil {
				return nil, err
			}
			first, err := s.Recv()
			if err != nil {
				return nil, err
			}
			last = first.GetJob()
			return s, fn(last)
		})
		if err != nil {
			return last, err
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				switch {
				case isEnded(last):
					return last, nil
				case ctx.Err() != nil:
					return last, ctx.Err()
				case !retryable(err):
					return last, err
				}
				break // resume with a new stream
			}
			last = m.GetJob()
			if err := fn(last); err != nil {
				return last, err
			}
		}
	}
}

func isEnded(d *pb.JobDetails) bool {
	switch d.GetStatus() {
	case pb.JobStatus_JOB_STATUS_FINISHED, pb.JobStatus_JOB_STATUS_FAILED, pb.JobStatus_JOB_STATUS_CANCELED:
		return true
	}
	return false
}

// IsTerminal reports whether a job status is terminal.
func IsTerminal(s pb.JobStatus) bool { return isEnded(&pb.JobDetails{Status: s}) }
