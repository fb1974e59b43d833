package worker

import (
	"fmt"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/state"
)

// validateSubmit checks what a SubmitTask carries before any of it is used: every vertex,
// edge, input and producer index in range, every parallelism within state's bounds, so that a
// forged or damaged deployment is refused instead of panicking the TaskManager (or having it
// allocate per a parallelism of two billion). The JobManager's job builder produces graphs
// that pass; this is the TaskManager's own check, for what arrives over the network.
func validateSubmit(req *pb.SubmitTaskRequest) error {
	g, id := req.GetJobGraph(), req.GetExecution()
	if id == nil || g == nil {
		return fmt.Errorf("missing execution or job graph")
	}
	vertices, edges := g.GetVertices(), g.GetEdges()
	for i, v := range vertices {
		switch {
		case v == nil:
			return fmt.Errorf("vertex %d is missing", i)
		case int(v.GetId()) != i:
			return fmt.Errorf("vertex %d has id %d, want its index", i, v.GetId())
		case len(v.GetOperators()) == 0:
			return fmt.Errorf("vertex %d has no operators", i)
		}
		if err := state.ValidateMaxParallelism(int(v.GetMaxParallelism()), int(v.GetParallelism())); err != nil {
			return fmt.Errorf("vertex %d: %w", i, err)
		}
	}
	inbound := make([]int, len(vertices)) // edges into each vertex
	for i, e := range edges {
		if e == nil {
			return fmt.Errorf("edge %d is missing", i)
		}
		src, dst := e.GetSource(), e.GetTarget()
		switch {
		case src < 0 || int(src) >= len(vertices):
			return fmt.Errorf("edge %d: source vertex %d out of range (%d vertices)", i, src, len(vertices))
		case dst < 0 || int(dst) >= len(vertices):
			return fmt.Errorf("edge %d: target vertex %d out of range (%d vertices)", i, dst, len(vertices))
		case src == dst:
			return fmt.Errorf("edge %d connects vertex %d to itself", i, src)
		}
		switch e.GetPartitioner() {
		case pb.Partitioner_PARTITIONER_FORWARD:
			if p, q := vertices[src].GetParallelism(), vertices[dst].GetParallelism(); p != q {
				return fmt.Errorf("edge %d: forward from parallelism %d to %d", i, p, q)
			}
		case pb.Partitioner_PARTITIONER_REBALANCE, pb.Partitioner_PARTITIONER_HASH:
		default:
			return fmt.Errorf("edge %d: unknown partitioner %v", i, e.GetPartitioner())
		}
		inbound[dst]++
	}
	for i, e := range edges {
		if in := e.GetInput(); in < 0 || int(in) >= inbound[e.GetTarget()] {
			return fmt.Errorf("edge %d: input %d out of range (vertex %d reads %d edges)", i, in, e.GetTarget(), inbound[e.GetTarget()])
		}
	}
	if id.GetVertexId() < 0 || int(id.GetVertexId()) >= len(vertices) {
		return fmt.Errorf("execution's vertex %d out of range (%d vertices)", id.GetVertexId(), len(vertices))
	}
	if p := vertices[id.GetVertexId()].GetParallelism(); id.GetSubtask() < 0 || id.GetSubtask() >= p {
		return fmt.Errorf("execution's subtask %d out of range for parallelism %d", id.GetSubtask(), p)
	}
	for i, in := range req.GetInputs() {
		if in.GetEdge() < 0 || int(in.GetEdge()) >= len(edges) {
			return fmt.Errorf("input %d: edge %d out of range (%d edges)", i, in.GetEdge(), len(edges))
		}
		e := edges[in.GetEdge()]
		if e.GetTarget() != id.GetVertexId() {
			return fmt.Errorf("input %d: edge %d targets vertex %d, not this task's %d", i, in.GetEdge(), e.GetTarget(), id.GetVertexId())
		}
		producer := vertices[e.GetSource()]
		if n := len(in.GetProducers()); n > int(producer.GetParallelism()) {
			return fmt.Errorf("input %d: %d producers for the %d subtasks of vertex %d", i, n, producer.GetParallelism(), e.GetSource())
		}
		for j, p := range in.GetProducers() {
			pid := p.GetExecution()
			if pid == nil || pid.GetVertexId() != e.GetSource() || pid.GetSubtask() < 0 || pid.GetSubtask() >= producer.GetParallelism() {
				return fmt.Errorf("input %d: producer %d is not a subtask of vertex %d", i, j, e.GetSource())
			}
		}
	}
	return nil
}
