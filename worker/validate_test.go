package worker_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// twoVertexJob is a source of parallelism 2 rebalanced into a sink of parallelism 1: two
// vertices and one edge, for forging.
func twoVertexJob(t *testing.T) *pb.JobGraph {
	t.Helper()
	g, err := job.Build(job.Request{SpecName: "two", Spec: []byte(`name: two
operators:
  - {name: numbers, type: sequence, from: 0, rate: 100, parallelism: 2}
  - {name: out, type: discard}
`)}, job.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.GetVertices()) != 2 || len(g.GetEdges()) != 1 {
		t.Fatalf("two-vertex job: %d vertices, %d edges", len(g.GetVertices()), len(g.GetEdges()))
	}
	return g
}

// A SubmitTask whose graph or inputs hold an index out of range, or a parallelism out of
// bounds, is refused with INVALID_ARGUMENT naming what is wrong, and the TaskManager goes on
// serving (security review F12: a negative edge target panicked the TaskManager in SubmitTask,
// which no one recovers).
func TestSubmitTask_RefusesForgedGraphs(t *testing.T) {
	leader := startFakeJM(t, "leader")
	leader.lead(1)
	tm := startTM(t, leader.addr)
	reg := waitRegistered(t, leader)
	ex := executor(t, tm)
	ctx := rpcCtx(t)
	producer := func(sub int32) *pb.ExecutionAttemptID {
		return &pb.ExecutionAttemptID{JobId: "j", VertexId: 0, Subtask: sub}
	}
	sink := &pb.ExecutionAttemptID{JobId: "j", VertexId: 1, Subtask: 0}
	inputs := func(edge int32, producers ...*pb.ExecutionAttemptID) []*pb.InputGateDeployment {
		in := &pb.InputGateDeployment{Edge: edge}
		for _, p := range producers {
			in.Producers = append(in.Producers, &pb.ProducerLocation{Execution: p, TaskmanagerAddress: "127.0.0.1:1"})
		}
		return []*pb.InputGateDeployment{in}
	}
	for _, tc := range []struct {
		name   string
		forge  func(g *pb.JobGraph, req *pb.SubmitTaskRequest)
		reason string
	}{
		{"negative edge target", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Edges[0].Target = -1 },
			"edge 0: target vertex -1 out of range (2 vertices)"},
		{"edge target past the vertices", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Edges[0].Target = 2 },
			"edge 0: target vertex 2 out of range"},
		{"negative edge source", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Edges[0].Source = -7 },
			"edge 0: source vertex -7 out of range"},
		{"edge to itself", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Edges[0].Target = 0 },
			"edge 0 connects vertex 0 to itself"},
		{"negative edge input", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Edges[0].Input = -1 },
			"edge 0: input -1 out of range (vertex 1 reads 1 edges)"},
		{"unknown partitioner", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Edges[0].Partitioner = 42 },
			"edge 0: unknown partitioner 42"},
		{"forward across parallelisms", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) {
			g.Edges[0].Partitioner = pb.Partitioner_PARTITIONER_FORWARD
		}, "edge 0: forward from parallelism 2 to 1"},
		{"vertex id not its index", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Vertices[1].Id = 5 },
			"vertex 1 has id 5, want its index"},
		{"negative parallelism", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Vertices[1].Parallelism = -3 },
			"vertex 1: parallelism -3 out of range"},
		{"a parallelism of two billion", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Vertices[1].Parallelism = 2_000_000_000 },
			"vertex 1: parallelism 2000000000 exceeds max parallelism"},
		{"max parallelism zero", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Vertices[1].MaxParallelism = 0 },
			"vertex 1: max parallelism 0 out of range (1..32768)"},
		{"vertex without operators", func(g *pb.JobGraph, _ *pb.SubmitTaskRequest) { g.Vertices[1].Operators = nil },
			"vertex 1 has no operators"},
		{"execution's vertex negative", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) { req.Execution.VertexId = -1 },
			"execution's vertex -1 out of range"},
		{"execution's subtask past the parallelism", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) { req.Execution.Subtask = 2 },
			"execution's subtask 2 out of range for parallelism 2"},
		{"input of a negative edge", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) {
			req.Execution, req.Inputs = sink, inputs(-1, producer(0))
		}, "input 0: edge -1 out of range (1 edges)"},
		{"input of an edge into another vertex", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) {
			req.Inputs = inputs(0, producer(0))
		}, "input 0: edge 0 targets vertex 1, not this task's 0"},
		{"more producers than subtasks", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) {
			req.Execution, req.Inputs = sink, inputs(0, producer(0), producer(1), producer(1))
		}, "input 0: 3 producers for the 2 subtasks of vertex 0"},
		{"a producer of another vertex", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) {
			req.Execution, req.Inputs = sink, inputs(0, sink)
		}, "input 0: producer 0 is not a subtask of vertex 0"},
		{"a producer subtask out of range", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) {
			req.Execution, req.Inputs = sink, inputs(0, producer(-2))
		}, "input 0: producer 0 is not a subtask of vertex 0"},
		{"no graph", func(_ *pb.JobGraph, req *pb.SubmitTaskRequest) { req.JobGraph = nil }, "missing execution or job graph"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := twoVertexJob(t)
			req := &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 1, Execution: proto.CloneOf(producer(0)), JobGraph: g}
			tc.forge(g, req)
			_, err := ex.SubmitTask(ctx, req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.reason) {
				t.Fatalf("SubmitTask = %v, want INVALID_ARGUMENT with %q", err, tc.reason)
			}
			if got := tm.RunningTasks(); len(got) != 0 {
				t.Fatalf("a refused SubmitTask started tasks %v", got)
			}
		})
	}
	// The TaskManager still serves: the unforged graph deploys.
	id := attempt(1)
	if _, err := ex.SubmitTask(ctx, &pb.SubmitTaskRequest{RegistrationId: reg, LeaderTerm: 1, Execution: id, JobGraph: endlessJob(t)}); err != nil {
		t.Fatalf("SubmitTask of a valid graph after the forged ones: %v", err)
	}
	waitFor(t, "the valid task to run", func() bool { return running(tm, id) })
}
