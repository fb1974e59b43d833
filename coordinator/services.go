package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/internal/execid"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// watchRefresh bounds how stale the counters in a WatchJob stream get.
const watchRefresh = time.Second

// jobService serves JobService.
type jobService struct {
	pb.UnimplementedJobServiceServer
	jm *JobManager
}

// leaderCall serves a call only the leader serves: a JobManager that does not lead answers
// with the leader protocol's status, the leader with call's answer, its error as a gRPC status.
func leaderCall[T any](jm *JobManager, call func() (*T, error)) (*T, error) {
	if err := jm.checkLeader(); err != nil {
		return nil, toStatus(err)
	}
	resp, err := call()
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

func (s *jobService) SubmitJob(_ context.Context, req *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	return leaderCall(s.jm, func() (*pb.SubmitJobResponse, error) {
		if len(req.GetSpec()) == 0 {
			return nil, status.Error(codes.InvalidArgument, "spec is empty")
		}
		id, err := s.jm.disp.submit(req)
		return &pb.SubmitJobResponse{JobId: id}, err
	})
}

func (s *jobService) ListJobs(context.Context, *pb.ListJobsRequest) (*pb.ListJobsResponse, error) {
	return leaderCall(s.jm, func() (*pb.ListJobsResponse, error) { return &pb.ListJobsResponse{Jobs: s.jm.disp.list()}, nil })
}

func (s *jobService) GetJob(_ context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	return leaderCall(s.jm, func() (*pb.GetJobResponse, error) {
		d, err := s.jm.disp.details(req.GetJobId())
		return &pb.GetJobResponse{Job: d}, err
	})
}

func (s *jobService) CancelJob(ctx context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	return leaderCall(s.jm, func() (*pb.CancelJobResponse, error) {
		return &pb.CancelJobResponse{}, s.jm.disp.cancel(ctx, req.GetJobId())
	})
}

func (s *jobService) ListCheckpoints(_ context.Context, req *pb.ListCheckpointsRequest) (*pb.ListCheckpointsResponse, error) {
	return leaderCall(s.jm, func() (*pb.ListCheckpointsResponse, error) {
		cps, err := s.jm.disp.checkpoints(req.GetJobId())
		return &pb.ListCheckpointsResponse{Checkpoints: cps}, err
	})
}

func (s *jobService) TriggerCheckpoint(ctx context.Context, req *pb.TriggerCheckpointRequest) (*pb.TriggerCheckpointResponse, error) {
	return leaderCall(s.jm, func() (*pb.TriggerCheckpointResponse, error) {
		info, err := s.jm.disp.triggerCheckpoint(ctx, req.GetJobId())
		if info != nil { // triggered: a failed checkpoint is a normal outcome, not an error
			err = nil
		}
		return &pb.TriggerCheckpointResponse{Checkpoint: info}, err
	})
}

func (s *jobService) TriggerSavepoint(ctx context.Context, req *pb.TriggerSavepointRequest) (*pb.TriggerSavepointResponse, error) {
	return leaderCall(s.jm, func() (*pb.TriggerSavepointResponse, error) {
		if req.GetDrain() && !req.GetStop() {
			return nil, status.Error(codes.InvalidArgument, "drain needs stop: only a stop-with-savepoint drains")
		}
		return s.jm.disp.triggerSavepoint(ctx, req)
	})
}

func (s *jobService) DisposeSavepoint(ctx context.Context, req *pb.DisposeSavepointRequest) (*pb.DisposeSavepointResponse, error) {
	return leaderCall(s.jm, func() (*pb.DisposeSavepointResponse, error) {
		if err := s.jm.disp.paths.checkLocation("savepoint path", req.GetSavepointPath()); err != nil {
			return nil, fmt.Errorf("dispose savepoint: %w", err)
		}
		dir, err := disposeSavepoint(ctx, req.GetSavepointPath(), s.jm.disp.s3)
		if err == nil {
			s.jm.log.Info("savepoint disposed", "path", dir)
		}
		return &pb.DisposeSavepointResponse{}, err
	})
}

func (s *jobService) RescaleJob(ctx context.Context, req *pb.RescaleJobRequest) (*pb.RescaleJobResponse, error) {
	return leaderCall(s.jm, func() (*pb.RescaleJobResponse, error) {
		id, err := s.jm.disp.rescale(ctx, req.GetJobId(), req.GetParallelism())
		return &pb.RescaleJobResponse{CheckpointId: id}, err
	})
}

func (s *jobService) WatchJob(req *pb.WatchJobRequest, stream pb.JobService_WatchJobServer) error {
	ctx := stream.Context()
	var last *pb.JobDetails
	for {
		if err := s.jm.checkLeader(); err != nil {
			return toStatus(err)
		}
		d1, d2 := s.jm.disp.watch(), s.jm.fsm.watch()
		d, err := s.jm.disp.details(req.GetJobId())
		if err != nil {
			return toStatus(err)
		}
		if !proto.Equal(d, last) {
			if err := stream.Send(&pb.WatchJobResponse{Job: d}); err != nil {
				return err
			}
			last = d
		}
		if isTerminalJob(d.GetStatus()) {
			return nil
		}
		select {
		case <-d1:
		case <-d2:
		case <-time.After(watchRefresh):
		case <-ctx.Done():
			return ctx.Err()
		case <-s.jm.ctx.Done():
			return toStatus(ErrShuttingDown)
		}
	}
}

// clusterService serves ClusterService.
type clusterService struct {
	pb.UnimplementedClusterServiceServer
	jm *JobManager
}

func (s *clusterService) GetCluster(ctx context.Context, _ *pb.GetClusterRequest) (*pb.GetClusterResponse, error) {
	jms, err := s.jm.groupStatus(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.GetClusterResponse{Jobmanagers: jms, AnsweredBy: s.jm.cfg.NodeID}
	if s.jm.checkLeader() == nil {
		resp.Taskmanagers = s.jm.rm.infos()
	}
	return resp, nil
}

// GetJobManagerStatus returns this JobManager's own Raft status.
func (s *clusterService) GetJobManagerStatus(context.Context, *pb.GetJobManagerStatusRequest) (*pb.GetJobManagerStatusResponse, error) {
	return &pb.GetJobManagerStatusResponse{Jobmanager: s.jm.ownStatus()}, nil
}

// RegisterJobManager records a follower's RPC address through this leader, when the report is
// consistent with the Raft configuration (checkReportedAddress): it comes from the member's
// Raft host and names an address on it. The leader's own address is recorded by the leader
// alone.
func (s *clusterService) RegisterJobManager(ctx context.Context, req *pb.RegisterJobManagerRequest) (*pb.RegisterJobManagerResponse, error) {
	return leaderCall(s.jm, func() (*pb.RegisterJobManagerResponse, error) {
		if err := checkHostPort(req.GetRpcAddress()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "register jobmanager %q: rpc_address: %v", req.GetNodeId(), err)
		}
		if req.GetNodeId() == s.jm.cfg.NodeID {
			return nil, status.Errorf(codes.PermissionDenied, "register jobmanager %q: the leader records its own address", req.GetNodeId())
		}
		raftAddr, ok := s.jm.memberRaftAddr(req.GetNodeId())
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "register jobmanager: %q is not a member of the Raft group", req.GetNodeId())
		}
		var from net.Addr
		if p, ok := peer.FromContext(ctx); ok {
			from = p.Addr
		}
		if err := checkReportedAddress(ctx, req.GetNodeId(), raftAddr, req.GetRpcAddress(), from); err != nil {
			return nil, status.Error(codes.PermissionDenied, err.Error())
		}
		return &pb.RegisterJobManagerResponse{}, s.jm.registerAddress(req.GetNodeId(), req.GetRpcAddress())
	})
}

// taskManagerService serves TaskManagerService.
type taskManagerService struct {
	pb.UnimplementedTaskManagerServiceServer
	jm *JobManager
}

func (s *taskManagerService) RegisterTaskManager(_ context.Context, req *pb.RegisterTaskManagerRequest) (*pb.RegisterTaskManagerResponse, error) {
	return leaderCall(s.jm, func() (*pb.RegisterTaskManagerResponse, error) {
		tm, err := s.jm.rm.register(req, s.jm.term.Load())
		if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrTaskManagerIDInUse) {
			return nil, err
		}
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return &pb.RegisterTaskManagerResponse{
			RegistrationId: tm.regID, JobmanagerId: s.jm.cfg.NodeID, LeaderTerm: tm.term,
			HeartbeatIntervalMs: s.jm.rm.interval.Milliseconds(), HeartbeatTimeoutMs: s.jm.rm.timeout.Milliseconds(),
		}, nil
	})
}

// Heartbeat answers every heartbeat of a registration. The TaskManager is lost when the stream
// breaks; when the monitor declares it lost first, the stream ends with NOT_FOUND.
func (s *taskManagerService) Heartbeat(stream pb.TaskManagerService_HeartbeatServer) error {
	if err := s.jm.checkLeader(); err != nil {
		return toStatus(err)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	tm, ok := s.jm.rm.get(first.GetRegistrationId())
	if !ok {
		return toStatus(fmt.Errorf("heartbeat: %w", ErrUnknownTaskManager))
	}
	if err := s.jm.rm.heartbeat(tm.regID, first.GetTasks()); err != nil {
		return toStatus(err)
	}
	if err := stream.Send(&pb.HeartbeatResponse{}); err != nil {
		s.jm.rm.markLost(tm.regID, fmt.Sprintf("heartbeat stream broke: %v", err))
		return err
	}
	broken := make(chan error, 1)
	closing := make(chan struct{})
	go func() { // ends when the stream does: the handler returning cancels it
		for {
			m, err := stream.Recv()
			if err == nil && m.GetClosing() {
				close(closing)
				return
			}
			if err == nil {
				if err = s.jm.rm.heartbeat(tm.regID, m.GetTasks()); err == nil {
					err = stream.Send(&pb.HeartbeatResponse{})
					s.reconcile(stream.Context(), tm, m.GetTasks())
				}
			}
			if err != nil {
				broken <- err
				return
			}
		}
	}()
	select {
	case err := <-broken:
		s.jm.rm.markLost(tm.regID, fmt.Sprintf("connection lost (heartbeat stream: %v)", status.Convert(err).Message()))
		return nil
	case <-closing:
		s.jm.rm.markLost(tm.regID, reasonShutdown)
		return nil
	case <-tm.lost:
		return status.Errorf(codes.NotFound, "%s was declared lost", tm.describe())
	case <-s.jm.ctx.Done():
		return toStatus(ErrShuttingDown)
	}
}

// reconcile cancels the tasks a TaskManager runs that no job master expects to run.
func (s *taskManagerService) reconcile(ctx context.Context, tm *taskManager, reports []*pb.TaskReport) {
	for _, r := range reports {
		if !s.jm.disp.shouldCancel(tm.regID, r.GetExecution()) {
			continue
		}
		s.jm.log.Warn("cancelling a task no job expects", "tm_id", tm.id, "execution", execid.Key(r.GetExecution()))
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = tm.client.CancelTask(cctx, &pb.CancelTaskRequest{RegistrationId: tm.regID, LeaderTerm: tm.term, Execution: r.GetExecution()})
		cancel()
	}
}

func (s *taskManagerService) UpdateTaskExecutionState(_ context.Context, req *pb.UpdateTaskExecutionStateRequest) (*pb.UpdateTaskExecutionStateResponse, error) {
	return leaderCall(s.jm, func() (*pb.UpdateTaskExecutionStateResponse, error) {
		if _, ok := s.jm.rm.get(req.GetRegistrationId()); !ok {
			return nil, fmt.Errorf("task state from %s: %w", req.GetRegistrationId(), ErrUnknownTaskManager)
		}
		if req.GetExecution() == nil {
			return nil, status.Error(codes.InvalidArgument, "execution is required")
		}
		s.jm.disp.master(req.GetExecution().GetJobId()).send(evTaskState{req: req})
		return &pb.UpdateTaskExecutionStateResponse{}, nil
	})
}

func (s *taskManagerService) AcknowledgeCheckpoint(_ context.Context, req *pb.AcknowledgeCheckpointRequest) (*pb.AcknowledgeCheckpointResponse, error) {
	return leaderCall(s.jm, func() (*pb.AcknowledgeCheckpointResponse, error) {
		if req.GetExecution() == nil || req.GetCheckpointId() <= 0 {
			return nil, status.Error(codes.InvalidArgument, "execution and a positive checkpoint_id are required")
		}
		s.jm.disp.master(req.GetExecution().GetJobId()).send(evAck{req: req})
		return &pb.AcknowledgeCheckpointResponse{}, nil
	})
}

func (s *taskManagerService) DeclineCheckpoint(_ context.Context, req *pb.DeclineCheckpointRequest) (*pb.DeclineCheckpointResponse, error) {
	return leaderCall(s.jm, func() (*pb.DeclineCheckpointResponse, error) {
		if req.GetExecution() == nil || req.GetCheckpointId() <= 0 {
			return nil, status.Error(codes.InvalidArgument, "execution and a positive checkpoint_id are required")
		}
		s.jm.disp.master(req.GetExecution().GetJobId()).send(evDecline{req: req})
		return &pb.DeclineCheckpointResponse{}, nil
	})
}
