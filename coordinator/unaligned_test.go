package coordinator

import (
	"errors"
	"strings"
	"testing"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/job"
)

// TestSubmitValidatesUnaligned checks the keys unaligned checkpoints cannot be combined with,
// from the spec, -D and the cluster's defaults: more than one concurrent checkpoint and
// at-least-once are refused, naming the keys; without unaligned they are fine.
func TestSubmitValidatesUnaligned(t *testing.T) {
	spec := "name: u\noperators:\n  - {name: n, type: sequence, from: 1, to: 3}\n  - {name: out, type: discard}\n"
	clusterUnaligned := config.New()
	if err := clusterUnaligned.Set(config.CheckpointUnaligned, "true"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cluster   *config.Config
		overrides map[string]string
		want      []string // "" for accepted
	}{
		{"unaligned alone", nil, map[string]string{config.CheckpointUnaligned: "true", config.CheckpointAlignedTimeout: "5 s"}, nil},
		{"aligned with concurrent at-least-once", nil, map[string]string{config.CheckpointMaxConcurrent: "3", config.CheckpointMode: "AT_LEAST_ONCE"}, nil},
		{"concurrent", nil, map[string]string{config.CheckpointUnaligned: "true", config.CheckpointMaxConcurrent: "2"},
			[]string{"execution.checkpointing.unaligned = true needs execution.checkpointing.max-concurrent-checkpoints = 1, got 2"}},
		{"at-least-once by the alias", nil, map[string]string{config.CheckpointUnalignedAlias: "true", config.CheckpointMode: "AT_LEAST_ONCE"},
			[]string{"execution.checkpointing.unaligned = true needs execution.checkpointing.mode = EXACTLY_ONCE, got AT_LEAST_ONCE"}},
		{"both, unaligned from the cluster", clusterUnaligned, map[string]string{config.CheckpointMaxConcurrent: "4", config.CheckpointMode: "AT_LEAST_ONCE"},
			[]string{"max-concurrent-checkpoints = 1, got 4", "mode = EXACTLY_ONCE, got AT_LEAST_ONCE"}},
		{"the job turns the cluster's off", clusterUnaligned, map[string]string{config.CheckpointUnaligned: "false", config.CheckpointMaxConcurrent: "4"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := job.Build(job.Request{Spec: []byte(spec), Overrides: tc.overrides}, job.Env{Defaults: tc.cluster})
			if err != nil {
				t.Fatal(err)
			}
			err = validateUnaligned(g)
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("validateUnaligned() = %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, job.ErrInvalidSpec) {
				t.Fatalf("validateUnaligned() = %v, want an invalid-spec error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("validateUnaligned() = %v, want it to say %q", err, w)
				}
			}
		})
	}
	// A negative timeout never gets that far: the key refuses it.
	if _, err := job.Build(job.Request{Spec: []byte(spec), Overrides: map[string]string{config.CheckpointAlignedTimeout: "-1 s"}}, job.Env{}); err == nil ||
		!strings.Contains(err.Error(), config.CheckpointAlignedTimeout) || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("Build(timeout -1 s) = %v, want an error naming %s", err, config.CheckpointAlignedTimeout)
	}
}
