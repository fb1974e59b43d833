package job_test

import (
	"strings"
	"testing"

	"github.com/goflink/goflink/job"
)

func TestUIDsAndFixedParallelism(t *testing.T) {
	spec := `name: u
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 1, to: 10}
  - {name: m, uid: renamed-map, type: map, fields: {v: "value"}}
  - {name: out, type: print, parallelism: 1}
`
	g, err := job.Build(job.Request{Spec: []byte(spec)}, job.Env{})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	fixed := map[string]bool{}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			uids[op.GetName()] = op.GetUid()
			fixed[op.GetName()] = v.GetFixedParallelism()
		}
	}
	if uids["numbers"] != "numbers" || uids["m"] != "renamed-map" || uids["out"] != "out" {
		t.Errorf("uids %v, want the name by default and the spec's uid", uids)
	}
	if fixed["numbers"] || !fixed["out"] {
		t.Errorf("fixed parallelism %v, want only the sink whose parallelism the spec sets", fixed)
	}
	dup := strings.Replace(spec, "uid: renamed-map", "uid: numbers", 1)
	if _, err := job.Build(job.Request{Spec: []byte(dup)}, job.Env{}); err == nil || !strings.Contains(err.Error(), `uid "numbers" is also the uid of operator "numbers"`) {
		t.Errorf("duplicate uid: %v", err)
	}
	bad := strings.Replace(spec, "uid: renamed-map", `uid: ""`, 1)
	if _, err := job.Build(job.Request{Spec: []byte(bad)}, job.Env{}); err == nil || !strings.Contains(err.Error(), "uid") {
		t.Errorf("empty uid: %v", err)
	}
}
