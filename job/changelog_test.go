package job

import (
	"slices"
	"testing"

	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// cdcSource is a postgres-cdc source in a spec (the builder needs no server).
const cdcSource = `  - {name: src, type: postgres-cdc, dsn: "postgres://u@localhost/db", table: t, slot: s, schema: {id: int64, v: int64}}
`

// A changelog reaches an operator of another parallelism only through a key-by: a rebalance
// edge (round robin over the reader's subtasks) would reorder the changes of a row, found
// wherever it is downstream of the source as long as the records keep the op field.
func TestChangelogThroughRebalanceRefused(t *testing.T) {
	env := Env{Operators: operator.MustRegistry(pgspec.CDCType)}
	for _, tc := range []struct {
		name, ops string
		want      []string
	}{
		{"a filter at the job's parallelism", `  - {name: f, type: filter, condition: "v >= 0"}
  - {name: k, type: key-by, key: id}
  - {name: o, type: print}
`, []string{`line 5: operators[1] "f": reads the changelog of "src" (the kind of change in field "op") through a rebalance edge (parallelism 1 to 2), which would reorder the changes of a row: read it through a key-by on the row's key, or give it parallelism 1`}},
		{"a sink of its own parallelism, after a chained map", `  - {name: m, type: map, parallelism: 1, fields: {op: op, id: id, w: "v * 2"}}
  - {name: o, type: print, parallelism: 3}
`, []string{`line 6: operators[2] "o".parallelism: reads the changelog of "m" (the kind of change in field "op") through a rebalance edge (parallelism 1 to 3), which would reorder the changes of a row: read it through a key-by on the row's key, or give it parallelism 1`}},
		{"after a key-by, into another parallelism", `  - {name: k, type: key-by, key: id}
  - {name: f, type: filter, condition: "v >= 0"}
  - {name: o, type: print, parallelism: 3}
`, []string{`line 7: operators[3] "o".parallelism: reads the changelog of "f" (the kind of change in field "op") through a rebalance edge (parallelism 2 to 3), which would reorder the changes of a row: read it through a key-by on the row's key, or give it parallelism 2`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := specProblems(t, "name: x\nparallelism: 2\noperators:\n"+cdcSource+tc.ops, env)
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%q\nwant:\n%q", got, tc.want)
			}
		})
	}
}

// A changelog read through a key-by, at the source's parallelism, or by an operator that
// dropped the op field builds; its rebalance edges are then those of plain records.
func TestChangelogKeptInOrderBuilds(t *testing.T) {
	env := Env{Operators: operator.MustRegistry(pgspec.CDCType)}
	for _, tc := range []struct {
		name, ops  string
		rebalanced int
	}{
		{"key-by after the source", `  - {name: k, type: key-by, key: id}
  - {name: f, type: filter, condition: "v >= 0"}
  - {name: o, type: print}
`, 0},
		{"the reader at parallelism 1", `  - {name: f, type: filter, parallelism: 1, condition: "v >= 0"}
  - {name: k, type: key-by, key: id}
  - {name: o, type: print}
`, 0},
		{"a map without the op field", `  - {name: m, type: map, parallelism: 1, fields: {id: id, v: v}}
  - {name: o, type: print}
`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Build(Request{Spec: []byte("name: x\nparallelism: 2\noperators:\n" + cdcSource + tc.ops), SpecName: "ok.yaml"}, env)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range g.GetEdges() {
				if e.GetPartitioner() == pb.Partitioner_PARTITIONER_REBALANCE {
					n++
				}
			}
			if n != tc.rebalanced {
				t.Errorf("%d rebalance edges, want %d", n, tc.rebalanced)
			}
		})
	}
}
