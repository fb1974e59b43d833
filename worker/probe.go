package worker

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// probeTimeout bounds the probe of one operator (operator.Probes): connecting to its system
// and the queries that check it.
const probeTimeout = 20 * time.Second

// ProbeOperators runs the probes of the operators of a job being submitted (operator.Probes)
// and answers what each found wrong. The local paths an operator names are confined first,
// as a task's are (checkPaths), so that a probe never reads a file this TaskManager's
// io.allowed-paths does not allow.
func (s *executorServer) ProbeOperators(ctx context.Context, req *pb.ProbeOperatorsRequest) (*pb.ProbeOperatorsResponse, error) {
	s.tm.mu.Lock()
	err := s.tm.checkCommandLocked(req.GetRegistrationId(), req.GetLeaderTerm())
	s.tm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ops := s.tm.env.operators
	resp := &pb.ProbeOperatorsResponse{}
	for _, op := range req.GetOperators() {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		if !ops.Probed(op) {
			continue
		}
		if msg := s.probeOne(ctx, op); msg != "" {
			resp.Problems = append(resp.Problems, &pb.OperatorProblem{Operator: op.GetName(), Line: op.GetLine(), Message: msg})
		}
	}
	return resp, nil
}

// probeOne confines op's paths and runs its probe; "" when both pass.
func (s *executorServer) probeOne(ctx context.Context, op *pb.Operator) string {
	env := s.tm.env
	paths, err := env.operators.LocalPaths(op)
	if err != nil {
		return err.Error()
	}
	for _, lp := range paths {
		if _, err := env.allowed.Check(lp.Path); err != nil {
			return fmt.Sprintf("%v: field %s: %v", errPathNotAllowed, lp.Field, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := env.operators.Probe(ctx, op); err != nil {
		if ctx.Err() != nil {
			return fmt.Sprintf("%v (no answer within %v)", err, probeTimeout)
		}
		return err.Error()
	}
	return ""
}
