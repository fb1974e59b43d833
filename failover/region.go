package failover

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// The failover strategy key and its values (Flink's jobmanager.execution.failover-strategy). Names are matched case-insensitively,
// as Flink does; an empty name selects the default.
const (
	FailoverStrategyKey     = "jobmanager.execution.failover-strategy"
	FailoverFull            = "full"
	FailoverRegion          = "region"
	DefaultFailoverStrategy = FailoverRegion
)

// Subtask names one parallel instance of a job vertex: Flink's execution vertex.
type Subtask struct {
	// Vertex is the JobVertex id.
	Vertex int32
	// Index is the subtask index, 0 <= Index < parallelism.
	Index int32
}

func (s Subtask) String() string { return fmt.Sprintf("%d[%d]", s.Vertex, s.Index) }

// CompareSubtasks orders subtasks by vertex id, then by index. Every slice this package returns
// is sorted in this order.
func CompareSubtasks(a, b Subtask) int {
	return cmp.Or(cmp.Compare(a.Vertex, b.Vertex), cmp.Compare(a.Index, b.Index))
}

// Regions are the pipelined regions of a job graph (Flink's PipelinedRegionComputeUtil): the connected components
// of its subtasks, where two subtasks are connected when one consumes a pipelined result of the
// other. Every goflink edge is pipelined (streaming, results are not re-consumable), so every
// edge joins its producers with its consumers: a FORWARD edge joins subtask i of the source
// with subtask i of the target, an all-to-all edge (REBALANCE, HASH) joins every subtask of
// both vertices. Hence only forward (point-wise) topologies have several regions.
//
// Regions are numbered 0..Count()-1 in the order of their smallest subtask (CompareSubtasks),
// so the numbering depends only on the graph, not on the order of its vertex or edge lists.
//
// Computing them costs about O(S + V log V + Σ_edges (p_src+p_tgt) log p) for S subtasks and V
// vertices: an all-to-all edge is joined as one chain of p_src+p_tgt unions, not pairwise. A Regions value is immutable and
// safe for concurrent use.
type Regions struct {
	vertices []vertexSpan // sorted by id
	subtasks []Subtask    // all subtasks, sorted; position = flat index
	region   []int        // flat index -> region
	members  [][]Subtask  // region -> its subtasks, sorted
	// producers[r] are the other regions that produce partitions r consumes; consumers[r] the
	// other regions that consume partitions r produces. Sorted, without duplicates. Since every
	// goflink edge is pipelined and thus inside one region, both are empty for graphs built by
	// ComputeRegions; they make the restart rule (regionsToRestart) complete rather than implied.
	producers [][]int
	consumers [][]int
}

type vertexSpan struct {
	id        int32
	base, par int
}

// ComputeRegions computes the pipelined regions of g, which is assumed valid (as built by the
// job builder). Where it is not, the result errs on the side of larger regions: a FORWARD edge
// between vertices of different parallelism, or an edge with an unspecified partitioner, is
// treated as all-to-all. Edges naming an unknown vertex are ignored, as is a repeated vertex id
// (the first wins); a vertex with parallelism <= 0 has no subtasks. A nil g has no regions.
func ComputeRegions(g *pb.JobGraph) *Regions {
	r := &Regions{}
	seen := map[int32]bool{}
	for _, v := range g.GetVertices() {
		if seen[v.GetId()] {
			continue
		}
		seen[v.GetId()] = true
		r.vertices = append(r.vertices, vertexSpan{id: v.GetId(), par: max(int(v.GetParallelism()), 0)})
	}
	slices.SortFunc(r.vertices, func(a, b vertexSpan) int { return cmp.Compare(a.id, b.id) })
	for i := range r.vertices {
		v := &r.vertices[i]
		v.base = len(r.subtasks)
		for j := range v.par {
			r.subtasks = append(r.subtasks, Subtask{Vertex: v.id, Index: int32(j)})
		}
	}

	uf := newUnionFind(len(r.subtasks))
	r.forEdges(g, uf.union, func(src, dst vertexSpan) {
		for i := 1; i < src.par; i++ {
			uf.union(src.base, src.base+i)
		}
		for i := range dst.par {
			uf.union(src.base, dst.base+i)
		}
	})

	// Subtasks are visited in sorted order, so regions are numbered by their smallest subtask
	// and every member list comes out sorted.
	r.region = make([]int, len(r.subtasks))
	regionOfRoot := slices.Repeat([]int{-1}, len(r.subtasks))
	for i, s := range r.subtasks {
		root := uf.find(i)
		if regionOfRoot[root] < 0 {
			regionOfRoot[root] = len(r.members)
			r.members = append(r.members, nil)
		}
		r.region[i] = regionOfRoot[root]
		r.members[r.region[i]] = append(r.members[r.region[i]], s)
	}

	r.producers = make([][]int, len(r.members))
	r.consumers = make([][]int, len(r.members))
	r.forEdges(g, func(a, b int) { r.link(r.region[a], r.region[b]) }, func(src, dst vertexSpan) {
		for _, from := range r.regionsOf(src) {
			for _, to := range r.regionsOf(dst) {
				r.link(from, to)
			}
		}
	})
	return r
}

// forEdges walks g's edges between known vertices with subtasks: pair gets the flat indexes of
// the subtasks a pointwise edge connects (subtask i of the source with subtask i of the target,
// a FORWARD edge between vertices of equal parallelism), allToAll the ends of any other edge.
func (r *Regions) forEdges(g *pb.JobGraph, pair func(a, b int), allToAll func(src, dst vertexSpan)) {
	for _, e := range g.GetEdges() {
		src, ok1 := r.vertex(e.GetSource())
		dst, ok2 := r.vertex(e.GetTarget())
		switch {
		case !ok1 || !ok2 || src.par == 0 || dst.par == 0: // an unknown vertex, or one without subtasks
		case e.GetPartitioner() == pb.Partitioner_PARTITIONER_FORWARD && src.par == dst.par:
			for i := range src.par {
				pair(src.base+i, dst.base+i)
			}
		default:
			allToAll(src, dst)
		}
	}
}

func (r *Regions) vertex(id int32) (vertexSpan, bool) {
	i, ok := slices.BinarySearchFunc(r.vertices, id, func(v vertexSpan, id int32) int { return cmp.Compare(v.id, id) })
	if !ok {
		return vertexSpan{}, false
	}
	return r.vertices[i], true
}

// regionsOf returns the distinct regions of v's subtasks, sorted.
func (r *Regions) regionsOf(v vertexSpan) []int {
	out := slices.Clone(r.region[v.base : v.base+v.par])
	slices.Sort(out)
	return slices.Compact(out)
}

// link records that region to consumes a partition produced by region from.
func (r *Regions) link(from, to int) {
	if from == to {
		return
	}
	if i, found := slices.BinarySearch(r.consumers[from], to); !found {
		r.consumers[from] = slices.Insert(r.consumers[from], i, to)
	}
	if i, found := slices.BinarySearch(r.producers[to], from); !found {
		r.producers[to] = slices.Insert(r.producers[to], i, from)
	}
}

// Count returns the number of regions.
func (r *Regions) Count() int { return len(r.members) }

// RegionOf returns the region of s, or -1 when s is not a subtask of the graph.
func (r *Regions) RegionOf(s Subtask) int {
	i, ok := r.index(s)
	if !ok {
		return -1
	}
	return r.region[i]
}

// Members returns the subtasks of a region, sorted (a fresh slice), or nil for an unknown region.
func (r *Regions) Members(region int) []Subtask {
	if region < 0 || region >= len(r.members) {
		return nil
	}
	return slices.Clone(r.members[region])
}

// All returns every subtask of the graph, sorted (a fresh slice).
func (r *Regions) All() []Subtask { return slices.Clone(r.subtasks) }

func (r *Regions) index(s Subtask) (int, bool) {
	v, ok := r.vertex(s.Vertex)
	if !ok || s.Index < 0 || int(s.Index) >= v.par {
		return 0, false
	}
	return v.base + int(s.Index), true
}

// regionsToRestart is the breadth-first walk of Flink's RestartPipelinedRegionFailoverStrategy from region start: every visited region
// restarts; the producer regions of its consumed partitions are added because goflink's
// partitions are pipelined and cannot be consumed again, and all consumer regions of its
// produced partitions are added because their input is recomputed. Returns sorted region ids.
func (r *Regions) regionsToRestart(start int) []int {
	visited := map[int]bool{start: true}
	queue := []int{start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range slices.Concat(r.producers[cur], r.consumers[cur]) {
			if !visited[next] {
				visited[next] = true
				queue = append(queue, next)
			}
		}
	}
	return slices.Sorted(maps.Keys(visited))
}

// FailoverStrategy decides which subtasks restart after a failure (Flink's FailoverStrategy).
// Implementations are immutable and safe for concurrent use; every call returns a fresh slice,
// sorted by CompareSubtasks. Flink additionally skips subtasks still in CREATED; that filter
// belongs to the caller, which knows the execution states.
type FailoverStrategy interface {
	// TasksToRestart returns the subtasks to restart after the local failure of failed.
	// The result always contains failed when it is a subtask of the graph.
	TasksToRestart(failed Subtask) []Subtask
	// GlobalFailure returns the subtasks to restart after a global failure (checkpoint failure
	// tolerance exceeded, a JobManager-side error): all of them, whatever the strategy.
	GlobalFailure() []Subtask
	// Name returns the strategy's value of jobmanager.execution.failover-strategy.
	Name() string
}

// NewFailoverStrategy returns the strategy named by jobmanager.execution.failover-strategy for
// g: "full" (RestartAll) or "region" (RestartPipelinedRegion, also for ""), case-insensitively.
func NewFailoverStrategy(name string, g *pb.JobGraph) (FailoverStrategy, error) {
	switch strings.ToLower(name) {
	case "", FailoverRegion:
		return NewRestartPipelinedRegion(g), nil
	case FailoverFull:
		return NewRestartAll(g), nil
	}
	return nil, fmt.Errorf("%s: unknown failover strategy %q (valid: %s, %s)", FailoverStrategyKey, name, FailoverFull, FailoverRegion)
}

// RestartAll restarts every subtask on any failure (Flink's RestartAllFailoverStrategy).
type RestartAll struct{ regions *Regions }

// NewRestartAll returns the full-restart strategy for g.
func NewRestartAll(g *pb.JobGraph) *RestartAll { return &RestartAll{regions: ComputeRegions(g)} }

// TasksToRestart returns every subtask.
func (s *RestartAll) TasksToRestart(Subtask) []Subtask { return s.regions.All() }

// GlobalFailure returns every subtask.
func (s *RestartAll) GlobalFailure() []Subtask { return s.regions.All() }

// Name returns "full".
func (s *RestartAll) Name() string { return FailoverFull }

// RestartPipelinedRegion restarts the failed subtask's pipelined region and the regions that
// must restart with it (Flink's RestartPipelinedRegionFailoverStrategy).
type RestartPipelinedRegion struct{ regions *Regions }

// NewRestartPipelinedRegion returns the region strategy for g.
func NewRestartPipelinedRegion(g *pb.JobGraph) *RestartPipelinedRegion {
	return &RestartPipelinedRegion{regions: ComputeRegions(g)}
}

// TasksToRestart returns the subtasks of failed's region and of every region reached from it
// through consumed or produced partitions, transitively. A subtask that is not part of the
// graph cannot be placed in a region, so it restarts everything.
func (s *RestartPipelinedRegion) TasksToRestart(failed Subtask) []Subtask {
	start := s.regions.RegionOf(failed)
	if start < 0 {
		return s.regions.All()
	}
	var out []Subtask
	for _, reg := range s.regions.regionsToRestart(start) {
		out = append(out, s.regions.members[reg]...)
	}
	slices.SortFunc(out, CompareSubtasks)
	return out
}

// GlobalFailure returns every subtask.
func (s *RestartPipelinedRegion) GlobalFailure() []Subtask { return s.regions.All() }

// Name returns "region".
func (s *RestartPipelinedRegion) Name() string { return FailoverRegion }

// unionFind is a disjoint-set forest with path halving and union by size.
type unionFind struct{ parent, size []int }

func newUnionFind(n int) *unionFind {
	u := &unionFind{parent: make([]int, n), size: make([]int, n)}
	for i := range n {
		u.parent[i], u.size[i] = i, 1
	}
	return u
}

func (u *unionFind) find(x int) int {
	for u.parent[x] != x {
		u.parent[x] = u.parent[u.parent[x]]
		x = u.parent[x]
	}
	return x
}

func (u *unionFind) union(a, b int) {
	a, b = u.find(a), u.find(b)
	if a == b {
		return
	}
	if u.size[a] < u.size[b] {
		a, b = b, a
	}
	u.parent[b] = a
	u.size[a] += u.size[b]
}
