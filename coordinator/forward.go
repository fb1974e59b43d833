package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/goflink/goflink/internal/leaderrpc"
	"github.com/goflink/goflink/internal/security"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Leader forwarding (rqlite's proxy, Nomad's forward): a follower serves a client's call of
// JobService, or ClusterService's GetCluster, by forwarding it to the leader at the RPC address
// the leader recorded in the FSM, and relays the answer (a WatchJob stream message by message).
// So any one JobManager address serves every client call, behind a load balancer too. A
// forwarded call carries leaderrpc.ForwardedByHeader and is served where it arrives: one hop at
// most. The answer carries the leader's address in leaderrpc.LeaderHeader, which clients may
// call directly next time. TaskManagerService calls and a member's own status are not
// forwarded: TaskManagers follow the NOT_LEADER hints and register with the leader itself.

// forwardHold is how long a follower holds a call while no leader (with a recorded address) is
// known, before it answers itself (NO_LEADER, or GetCluster's view without TaskManagers), as
// Nomad's RPCHoldTimeout.
const forwardHold = 5 * time.Second

// forwardPoll bounds the random pause between looks for a leader during forwardHold.
const forwardPoll = 100 * time.Millisecond

// forwardable reports whether a follower forwards calls of this method to the leader.
func forwardable(method string) bool {
	return strings.HasPrefix(method, "/"+pb.JobService_ServiceDesc.ServiceName+"/") ||
		method == pb.ClusterService_GetCluster_FullMethodName
}

// forwardUnary is the server's unary interceptor: a follower forwards the call to the leader.
// When the leader cannot be reached, this JobManager answers itself (NOT_LEADER naming the
// leader, which a client may reach when this one cannot).
func (jm *JobManager) forwardUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	conn, leader := jm.leaderConn(ctx, info.FullMethod)
	if conn == nil {
		return handler(ctx, req)
	}
	_, out, err := messages(info.FullMethod)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "forward %s: %v", info.FullMethod, err)
	}
	err = conn.Invoke(jm.forwardContext(ctx), info.FullMethod, req, out)
	if leaderrpc.Unreached(err) {
		jm.log.Debug("leader not reached; answering here", "method", info.FullMethod, "leader", leader, "err", err)
		return handler(ctx, req)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(leaderrpc.LeaderHeader, leader))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// forwardStream is the server's stream interceptor: a follower relays a server stream (WatchJob)
// from the leader until it ends, either side breaks it, or this JobManager stops.
func (jm *JobManager) forwardStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.IsClientStream {
		return handler(srv, ss)
	}
	conn, leader := jm.leaderConn(ss.Context(), info.FullMethod)
	if conn == nil {
		return handler(srv, ss)
	}
	in, out, err := messages(info.FullMethod)
	if err != nil {
		return status.Errorf(codes.Internal, "forward %s: %v", info.FullMethod, err)
	}
	ctx, cancel := context.WithCancel(jm.forwardContext(ss.Context()))
	defer cancel()
	stop := context.AfterFunc(jm.ctx, cancel)
	defer stop()
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, info.FullMethod)
	if leaderrpc.Unreached(err) {
		jm.log.Debug("leader not reached; answering here", "method", info.FullMethod, "leader", leader, "err", err)
		return handler(srv, ss)
	}
	if err != nil {
		return err
	}
	if err := ss.SetHeader(metadata.Pairs(leaderrpc.LeaderHeader, leader)); err != nil {
		return err
	}
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	if err := cs.SendMsg(in); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		m := out.ProtoReflect().New().Interface()
		err := cs.RecvMsg(m)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil && jm.ctx.Err() != nil:
			return toStatus(ErrShuttingDown)
		case err != nil:
			return err
		}
		if err := ss.SendMsg(m); err != nil {
			return err
		}
	}
}

// leaderConn returns a connection to the leader and its RPC address for a client's call of
// method, or nil when this JobManager serves the call itself: the method is not forwardable, it
// leads, it stops, the call was forwarded to it already, or no leader with a recorded address
// became known within forwardHold. Until then it looks again after a random pause (Nomad's
// getLeaderForRPC).
func (jm *JobManager) leaderConn(ctx context.Context, method string) (*grpc.ClientConn, string) {
	if !forwardable(method) || len(metadata.ValueFromIncomingContext(ctx, leaderrpc.ForwardedByHeader)) > 0 {
		return nil, ""
	}
	hold := time.After(forwardHold)
	for {
		var nl *notLeaderError
		switch err := jm.checkLeader(); {
		case err == nil, errors.Is(err, ErrShuttingDown):
			return nil, ""
		case errors.As(err, &nl) && nl.leaderAddr != "":
			conn, err := jm.peerConn(nl.leaderAddr)
			if err != nil {
				return nil, ""
			}
			return conn, nl.leaderAddr
		}
		select {
		case <-time.After(rand.N(forwardPoll)):
			continue
		case <-hold:
		case <-ctx.Done():
		case <-jm.ctx.Done():
		}
		return nil, ""
	}
}

// forwardContext is the context of a forwarded call: the caller's deadline and cancellation,
// marked as forwarded by this JobManager.
func (jm *JobManager) forwardContext(ctx context.Context) context.Context {
	md := metadata.Pairs(leaderrpc.ForwardedByHeader, jm.cfg.NodeID)
	// The client's token goes on: without internal TLS the leader cannot tell this follower
	// from anyone, and checks the token itself.
	if tok := security.IncomingToken(ctx); len(tok) > 0 {
		md.Set(security.AuthorizationHeader, tok...)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// messages returns new request and response messages of a method ("/package.Service/Method").
func messages(method string) (in, out proto.Message, err error) {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(method, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return nil, nil, fmt.Errorf("method %s: %w", name, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil, nil, fmt.Errorf("%s is not a method", name)
	}
	inType, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		return nil, nil, err
	}
	outType, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, nil, err
	}
	return inType.New().Interface(), outType.New().Interface(), nil
}
