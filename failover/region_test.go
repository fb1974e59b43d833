package failover

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// vtx is a job vertex of a test graph: id and parallelism.
type vtx struct{ id, par int32 }

func jobGraph(vs []vtx, es ...*pb.JobEdge) *pb.JobGraph {
	g := &pb.JobGraph{Name: "test", Edges: es}
	for _, v := range vs {
		g.Vertices = append(g.Vertices, &pb.JobVertex{Id: v.id, Name: fmt.Sprint("v", v.id), Parallelism: v.par})
	}
	return g
}

func edge(src, dst int32, p pb.Partitioner) *pb.JobEdge {
	return &pb.JobEdge{Source: src, Target: dst, Partitioner: p}
}

func fwd(src, dst int32) *pb.JobEdge { return edge(src, dst, pb.Partitioner_PARTITIONER_FORWARD) }
func reb(src, dst int32) *pb.JobEdge { return edge(src, dst, pb.Partitioner_PARTITIONER_REBALANCE) }
func hash(src, dst int32) *pb.JobEdge {
	e := edge(src, dst, pb.Partitioner_PARTITIONER_HASH)
	e.Key = "k"
	return e
}

func st(v, i int32) Subtask { return Subtask{Vertex: v, Index: i} }

// subtasksAt returns the subtasks i of each vertex in vs, sorted: the members of forward region i.
func subtasksAt(i int32, vs ...int32) []Subtask {
	var out []Subtask
	for _, v := range vs {
		out = append(out, st(v, i))
	}
	slices.SortFunc(out, CompareSubtasks)
	return out
}

// allOf returns every subtask of the vertices, sorted.
func allOf(vs ...vtx) []Subtask {
	var out []Subtask
	for _, v := range vs {
		for i := range v.par {
			out = append(out, st(v.id, i))
		}
	}
	slices.SortFunc(out, CompareSubtasks)
	return out
}

func fmtSubtasks(s []Subtask) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = x.String()
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func fmtRegions(rs [][]Subtask) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmtSubtasks(r)
	}
	return strings.Join(parts, " ")
}

// restartCase is one failure and the subtasks region failover must restart for it.
type restartCase struct {
	failed Subtask
	want   []Subtask
}

// Common vertices: ids in topological order as the job builder assigns them.
var (
	src4, map4, sink4 = vtx{0, 4}, vtx{1, 4}, vtx{2, 4}
)

var topologies = []struct {
	name string
	g    *pb.JobGraph
	// regions in numbering order (by smallest subtask).
	regions  [][]Subtask
	restarts []restartCase
}{
	{
		name: "forward-only p=4 source->map->sink",
		g:    jobGraph([]vtx{src4, map4, sink4}, fwd(0, 1), fwd(1, 2)),
		regions: [][]Subtask{
			subtasksAt(0, 0, 1, 2), subtasksAt(1, 0, 1, 2), subtasksAt(2, 0, 1, 2), subtasksAt(3, 0, 1, 2),
		},
		restarts: []restartCase{
			{st(0, 2), subtasksAt(2, 0, 1, 2)},
			{st(1, 2), subtasksAt(2, 0, 1, 2)},
			{st(2, 2), subtasksAt(2, 0, 1, 2)},
			{st(1, 0), subtasksAt(0, 0, 1, 2)},
			{st(2, 3), subtasksAt(3, 0, 1, 2)},
		},
	},
	{
		name:    "keyBy p=2 -> p=3, forward to sink p=3",
		g:       jobGraph([]vtx{{0, 2}, {1, 3}, {2, 3}}, hash(0, 1), fwd(1, 2)),
		regions: [][]Subtask{allOf(vtx{0, 2}, vtx{1, 3}, vtx{2, 3})},
		restarts: []restartCase{
			{st(0, 1), allOf(vtx{0, 2}, vtx{1, 3}, vtx{2, 3})},
			{st(2, 2), allOf(vtx{0, 2}, vtx{1, 3}, vtx{2, 3})},
		},
	},
	{
		name:    "keyBy same parallelism p=2 source->sum->sink",
		g:       jobGraph([]vtx{{0, 2}, {1, 2}, {2, 2}}, hash(0, 1), fwd(1, 2)),
		regions: [][]Subtask{allOf(vtx{0, 2}, vtx{1, 2}, vtx{2, 2})},
		restarts: []restartCase{
			{st(0, 0), allOf(vtx{0, 2}, vtx{1, 2}, vtx{2, 2})},
		},
	},
	{
		name: "two independent pipelines: forward p=2 and rebalance p=3->p=1",
		g:    jobGraph([]vtx{{0, 2}, {1, 2}, {2, 3}, {3, 1}}, fwd(0, 1), reb(2, 3)),
		regions: [][]Subtask{
			subtasksAt(0, 0, 1), subtasksAt(1, 0, 1), allOf(vtx{2, 3}, vtx{3, 1}),
		},
		restarts: []restartCase{
			{st(1, 1), subtasksAt(1, 0, 1)},
			{st(0, 0), subtasksAt(0, 0, 1)},
			{st(3, 0), allOf(vtx{2, 3}, vtx{3, 1})},
			{st(2, 1), allOf(vtx{2, 3}, vtx{3, 1})},
		},
	},
	{
		name:    "forward chain p=2 -> rebalance -> forward chain p=3",
		g:       jobGraph([]vtx{{0, 2}, {1, 2}, {2, 3}, {3, 3}}, fwd(0, 1), reb(1, 2), fwd(2, 3)),
		regions: [][]Subtask{allOf(vtx{0, 2}, vtx{1, 2}, vtx{2, 3}, vtx{3, 3})},
		restarts: []restartCase{
			{st(0, 0), allOf(vtx{0, 2}, vtx{1, 2}, vtx{2, 3}, vtx{3, 3})},
			{st(3, 2), allOf(vtx{0, 2}, vtx{1, 2}, vtx{2, 3}, vtx{3, 3})},
		},
	},
	{
		name:    "union of two sources into one sink via forward p=2",
		g:       jobGraph([]vtx{{0, 2}, {1, 2}, {2, 2}}, fwd(0, 2), fwd(1, 2)),
		regions: [][]Subtask{subtasksAt(0, 0, 1, 2), subtasksAt(1, 0, 1, 2)},
		restarts: []restartCase{
			{st(1, 0), subtasksAt(0, 0, 1, 2)},
			{st(0, 1), subtasksAt(1, 0, 1, 2)},
		},
	},
	{
		name: "forward diamond p=3: source -> a, b -> join",
		g:    jobGraph([]vtx{{0, 3}, {1, 3}, {2, 3}, {3, 3}}, fwd(0, 1), fwd(0, 2), fwd(1, 3), fwd(2, 3)),
		regions: [][]Subtask{
			subtasksAt(0, 0, 1, 2, 3), subtasksAt(1, 0, 1, 2, 3), subtasksAt(2, 0, 1, 2, 3),
		},
		restarts: []restartCase{{st(2, 1), subtasksAt(1, 0, 1, 2, 3)}},
	},
	{
		name:     "one rebalance side branch merges a forward pipeline",
		g:        jobGraph([]vtx{{0, 2}, {1, 2}, {2, 1}}, fwd(0, 1), reb(0, 2)),
		regions:  [][]Subtask{allOf(vtx{0, 2}, vtx{1, 2}, vtx{2, 1})},
		restarts: []restartCase{{st(1, 1), allOf(vtx{0, 2}, vtx{1, 2}, vtx{2, 1})}},
	},
	{
		name: "vertex without edges: one region per subtask",
		g:    jobGraph([]vtx{{0, 3}}),
		regions: [][]Subtask{
			{st(0, 0)}, {st(0, 1)}, {st(0, 2)},
		},
		restarts: []restartCase{{st(0, 1), []Subtask{st(0, 1)}}},
	},
	{
		// Numbering by smallest subtask in vertex-id order, whatever the list order.
		name: "sparse ids listed out of order",
		g:    jobGraph([]vtx{{9, 2}, {5, 2}, {2, 1}, {1, 1}}, fwd(5, 9)),
		regions: [][]Subtask{
			{st(1, 0)}, {st(2, 0)}, subtasksAt(0, 5, 9), subtasksAt(1, 5, 9),
		},
		restarts: []restartCase{
			{st(9, 1), subtasksAt(1, 5, 9)},
			{st(2, 0), []Subtask{st(2, 0)}},
		},
	},
	{
		// Not produced by the job builder (it uses REBALANCE then): treated as all-to-all.
		name:    "forward between different parallelisms is all-to-all",
		g:       jobGraph([]vtx{{0, 2}, {1, 3}}, fwd(0, 1)),
		regions: [][]Subtask{allOf(vtx{0, 2}, vtx{1, 3})},
		restarts: []restartCase{
			{st(1, 2), allOf(vtx{0, 2}, vtx{1, 3})},
		},
	},
	{
		name:     "unspecified partitioner is all-to-all",
		g:        jobGraph([]vtx{{0, 2}, {1, 2}}, edge(0, 1, pb.Partitioner_PARTITIONER_UNSPECIFIED)),
		regions:  [][]Subtask{allOf(vtx{0, 2}, vtx{1, 2})},
		restarts: []restartCase{{st(0, 0), allOf(vtx{0, 2}, vtx{1, 2})}},
	},
	{
		name:     "edges to unknown vertices and zero parallelism are ignored",
		g:        jobGraph([]vtx{{0, 2}, {1, 0}}, reb(0, 7), reb(7, 0), reb(0, 1)),
		regions:  [][]Subtask{{st(0, 0)}, {st(0, 1)}},
		restarts: []restartCase{{st(0, 1), []Subtask{st(0, 1)}}},
	},
	{
		name:    "empty graph",
		g:       jobGraph(nil),
		regions: [][]Subtask{},
	},
}

func TestComputeRegions(t *testing.T) {
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			r := ComputeRegions(tc.g)
			got := make([][]Subtask, r.Count())
			for i := range got {
				got[i] = r.Members(i)
			}
			if !slices.EqualFunc(got, tc.regions, slices.Equal) {
				t.Fatalf("regions:\n got %s\nwant %s", fmtRegions(got), fmtRegions(tc.regions))
			}
			// Members partition All() and RegionOf agrees with Members.
			var union []Subtask
			for i := range r.Count() {
				for _, s := range r.Members(i) {
					if got := r.RegionOf(s); got != i {
						t.Errorf("RegionOf(%v) = %d, want %d", s, got, i)
					}
					union = append(union, s)
				}
			}
			slices.SortFunc(union, CompareSubtasks)
			if all := r.All(); !slices.Equal(union, all) || len(slices.Compact(union)) != len(all) {
				t.Errorf("members %s do not partition all subtasks %s", fmtSubtasks(union), fmtSubtasks(all))
			}
		})
	}
}

func TestRegionOfUnknownSubtask(t *testing.T) {
	r := ComputeRegions(jobGraph([]vtx{src4, map4}, fwd(0, 1)))
	for _, s := range []Subtask{st(0, 4), st(0, -1), st(7, 0)} {
		if got := r.RegionOf(s); got != -1 {
			t.Errorf("RegionOf(%v) = %d, want -1", s, got)
		}
	}
	if r.Members(-1) != nil || r.Members(r.Count()) != nil {
		t.Error("Members of an unknown region is not nil")
	}
	if nr := ComputeRegions(nil); nr.Count() != 0 || nr.RegionOf(st(0, 0)) != -1 || len(nr.All()) != 0 {
		t.Errorf("nil graph: Count %d, All %v", nr.Count(), nr.All())
	}
}

func TestRegionFailover(t *testing.T) {
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewFailoverStrategy("region", tc.g)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.restarts {
				if got := s.TasksToRestart(c.failed); !slices.Equal(got, c.want) {
					t.Errorf("TasksToRestart(%v) = %s, want %s", c.failed, fmtSubtasks(got), fmtSubtasks(c.want))
				}
			}
			// Every goflink edge is pipelined, so no partition crosses a region boundary and a
			// failure restarts exactly its own region.
			r := ComputeRegions(tc.g)
			for _, f := range r.All() {
				if got, want := s.TasksToRestart(f), r.Members(r.RegionOf(f)); !slices.Equal(got, want) {
					t.Errorf("TasksToRestart(%v) = %s, want its region %s", f, fmtSubtasks(got), fmtSubtasks(want))
				}
			}
			if got, want := s.GlobalFailure(), r.All(); !slices.Equal(got, want) {
				t.Errorf("GlobalFailure() = %s, want %s", fmtSubtasks(got), fmtSubtasks(want))
			}
		})
	}
}

func TestFullFailoverRestartsEverything(t *testing.T) {
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewFailoverStrategy("full", tc.g)
			if err != nil {
				t.Fatal(err)
			}
			want := ComputeRegions(tc.g).All()
			var wantLen int
			for _, v := range tc.g.GetVertices() {
				wantLen += int(max(v.GetParallelism(), 0))
			}
			if len(want) != wantLen {
				t.Fatalf("All() has %d subtasks, want %d", len(want), wantLen)
			}
			for _, f := range append(want, st(99, 0)) {
				if got := s.TasksToRestart(f); !slices.Equal(got, want) {
					t.Errorf("TasksToRestart(%v) = %s, want %s", f, fmtSubtasks(got), fmtSubtasks(want))
				}
			}
			if got := s.GlobalFailure(); !slices.Equal(got, want) {
				t.Errorf("GlobalFailure() = %s, want %s", fmtSubtasks(got), fmtSubtasks(want))
			}
		})
	}
}

func TestRegionFailoverUnknownSubtaskRestartsEverything(t *testing.T) {
	g := jobGraph([]vtx{src4, map4, sink4}, fwd(0, 1), fwd(1, 2))
	s := NewRestartPipelinedRegion(g)
	want := allOf(src4, map4, sink4)
	for _, f := range []Subtask{st(0, 4), st(3, 0)} {
		if got := s.TasksToRestart(f); !slices.Equal(got, want) {
			t.Errorf("TasksToRestart(%v) = %s, want all", f, fmtSubtasks(got))
		}
	}
}

// TestRegionsToRestartFollowsPartitions checks the breadth-first walk of Flink's RestartPipelinedRegionFailoverStrategy on region links that goflink's
// all-pipelined graphs cannot produce (every edge lies inside one region), built by hand: the
// producer regions of consumed partitions and the consumer regions of produced partitions are
// added, transitively; unrelated regions are not.
func TestRegionsToRestartFollowsPartitions(t *testing.T) {
	// Six single-subtask regions 0..5 (vertices 0..5, no edges), then links
	// 0 -> 1 -> 2 <- 3, 2 -> 4; region 5 is unrelated.
	r := ComputeRegions(jobGraph([]vtx{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}}))
	for _, l := range [][2]int{{0, 1}, {1, 2}, {3, 2}, {2, 4}, {0, 1}} {
		r.link(l[0], l[1])
	}
	if !slices.Equal(r.producers[2], []int{1, 3}) || !slices.Equal(r.consumers[0], []int{1}) {
		t.Fatalf("links not deduplicated/sorted: producers[2]=%v consumers[0]=%v", r.producers[2], r.consumers[0])
	}
	s := &RestartPipelinedRegion{regions: r}
	connected := []Subtask{st(0, 0), st(1, 0), st(2, 0), st(3, 0), st(4, 0)}
	for _, c := range []restartCase{
		{st(0, 0), connected}, // consumers, transitively, then their other producer 3
		{st(4, 0), connected}, // producer 2, its producers 1 and 3, then 0
		{st(3, 0), connected},
		{st(5, 0), []Subtask{st(5, 0)}},
	} {
		if got := s.TasksToRestart(c.failed); !slices.Equal(got, c.want) {
			t.Errorf("TasksToRestart(%v) = %s, want %s", c.failed, fmtSubtasks(got), fmtSubtasks(c.want))
		}
	}
}

func TestPipelinedGraphsHaveNoCrossRegionLinks(t *testing.T) {
	for _, tc := range topologies {
		r := ComputeRegions(tc.g)
		for i := range r.Count() {
			if len(r.producers[i]) > 0 || len(r.consumers[i]) > 0 {
				t.Errorf("%s: region %d has producers %v consumers %v", tc.name, i, r.producers[i], r.consumers[i])
			}
		}
	}
}

func TestNewFailoverStrategy(t *testing.T) {
	g := jobGraph([]vtx{src4, map4}, fwd(0, 1))
	for _, c := range []struct{ name, want string }{
		{"", "region"}, {"region", "region"}, {"Region", "region"}, {"full", "full"}, {"FULL", "full"},
	} {
		s, err := NewFailoverStrategy(c.name, g)
		if err != nil {
			t.Errorf("NewFailoverStrategy(%q): %v", c.name, err)
			continue
		}
		if s.Name() != c.want {
			t.Errorf("NewFailoverStrategy(%q).Name() = %q, want %q", c.name, s.Name(), c.want)
		}
	}
	for _, name := range []string{"restart-all", "regions", " region", "individual"} {
		s, err := NewFailoverStrategy(name, g)
		if err == nil {
			t.Errorf("NewFailoverStrategy(%q) = %v, want an error", name, s.Name())
			continue
		}
		for _, want := range []string{FailoverStrategyKey, fmt.Sprintf("%q", name), "full", "region"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("NewFailoverStrategy(%q) error %q does not mention %s", name, err, want)
			}
		}
	}
}

func TestResultsAreFreshSlices(t *testing.T) {
	g := jobGraph([]vtx{src4, map4}, fwd(0, 1))
	r := ComputeRegions(g)
	m := r.Members(1)
	m[0] = st(42, 42)
	a := r.All()
	a[0] = st(42, 42)
	s := NewRestartPipelinedRegion(g)
	tr := s.TasksToRestart(st(0, 1))
	tr[0] = st(42, 42)
	full := NewRestartAll(g)
	fa := full.TasksToRestart(st(0, 1))
	fa[0] = st(42, 42)
	if got := r.Members(1); got[0] != st(0, 1) {
		t.Errorf("Members(1) changed to %v", got)
	}
	if got := r.All(); got[0] != st(0, 0) {
		t.Errorf("All() changed to %v", got)
	}
	if got := s.TasksToRestart(st(0, 1)); got[0] != st(0, 1) {
		t.Errorf("TasksToRestart changed to %v", got)
	}
	if got := full.TasksToRestart(st(0, 1)); got[0] != st(0, 0) {
		t.Errorf("full TasksToRestart changed to %v", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	g := jobGraph([]vtx{src4, map4, sink4}, fwd(0, 1), fwd(1, 2))
	s := NewRestartPipelinedRegion(g)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			f := st(int32(i%3), int32(i%4))
			if got := s.TasksToRestart(f); !slices.Equal(got, subtasksAt(int32(i%4), 0, 1, 2)) {
				t.Errorf("TasksToRestart(%v) = %s", f, fmtSubtasks(got))
			}
		})
	}
	wg.Wait()
}

func BenchmarkComputeRegions(b *testing.B) {
	for _, bc := range []struct {
		name string
		part func(int32, int32) *pb.JobEdge
	}{{"forward", fwd}, {"hash", hash}} {
		b.Run(fmt.Sprintf("%s/5x256", bc.name), func(b *testing.B) {
			var vs []vtx
			var es []*pb.JobEdge
			for i := range int32(5) {
				vs = append(vs, vtx{i, 256})
				if i > 0 {
					es = append(es, bc.part(i-1, i))
				}
			}
			g := jobGraph(vs, es...)
			for b.Loop() {
				ComputeRegions(g)
			}
		})
	}
}
