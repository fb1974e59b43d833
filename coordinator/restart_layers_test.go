package coordinator

import (
	"errors"
	"strings"
	"testing"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestRestartStrategyLayers checks Flink's selection rule end to end from a spec: the job's own
// restart-strategy.type wins over the cluster's, and parameters come only from the layer that
// set the type (job.Build records the job's keys apart from the merged config).
func TestRestartStrategyLayers(t *testing.T) {
	cluster := config.New()
	for k, v := range map[string]string{
		config.RestartStrategy:    "fixed-delay",
		config.FixedDelayAttempts: "7",
		config.FixedDelayDelay:    "2s",
	} {
		if err := cluster.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, jobConfig string
		want            string
	}{
		{"cluster type and parameters", "", "maxNumberRestartAttempts=7, backoffTimeMS=2000"},
		{"job parameter without a type is ignored", "restart-strategy.fixed-delay.attempts: 2",
			"maxNumberRestartAttempts=7, backoffTimeMS=2000"},
		{"job type ignores the cluster's parameters", "restart-strategy.type: fixed-delay",
			"maxNumberRestartAttempts=1, backoffTimeMS=1000"},
		{"job type with job parameters", "restart-strategy.type: fixed-delay\n  restart-strategy.fixed-delay.attempts: 3",
			"maxNumberRestartAttempts=3, backoffTimeMS=1000"},
		{"job selects another type", "restart-strategy.type: none", "NoRestartBackoffTimeStrategy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := "name: layers\n"
			if tc.jobConfig != "" {
				spec += "config:\n  " + tc.jobConfig + "\n"
			}
			spec += "operators:\n  - {name: numbers, type: sequence, from: 1, to: 3}\n  - {name: out, type: discard}\n"
			g, err := job.Build(job.Request{Spec: []byte(spec)}, job.Env{Defaults: cluster})
			if err != nil {
				t.Fatalf("Build() = %v", err)
			}
			s, err := restartStrategy(g, cluster, false)
			if err != nil {
				t.Fatalf("restartStrategy() = %v", err)
			}
			if !strings.Contains(s.Name(), tc.want) {
				t.Errorf("strategy = %s, want %s", s.Name(), tc.want)
			}
		})
	}
}

func TestRestartStrategyRejectsBadJobLayerEvenWhenUnused(t *testing.T) {
	g := &pb.JobGraph{JobConfig: map[string]string{config.RestartStrategy: "sometimes"}}
	if _, err := restartStrategy(g, nil, true); err == nil || !strings.Contains(err.Error(), config.RestartStrategy) {
		t.Fatalf("restartStrategy() = %v, want an error naming %s", err, config.RestartStrategy)
	}
}

// A job that sets restart-strategy parameters without a restart-strategy.type is refused at
// submit: as in Flink they would be read from nowhere (the type's layer supplies them), and
// taking them silently was a trap (flinkctl run -D restart-strategy.fixed-delay.attempts=10
// against a cluster configuring fixed-delay).
func TestSubmitRejectsJobRestartParametersWithoutType(t *testing.T) {
	cluster := config.New()
	if err := cluster.Set(config.RestartStrategy, "fixed-delay"); err != nil {
		t.Fatal(err)
	}
	spec := "name: p\noperators:\n  - {name: n, type: sequence, from: 1, to: 3}\n  - {name: out, type: discard}\n"
	for _, tc := range []struct {
		name      string
		cluster   *config.Config
		overrides map[string]string
		want      string // "" for accepted
	}{
		{"cluster type, job attempts", cluster, map[string]string{config.FixedDelayAttempts: "10"},
			"restart-strategy.fixed-delay.attempts set for the job would be ignored: the job sets no restart-strategy.type, so the cluster's restart strategy (restart-strategy.type = fixed-delay)"},
		{"no type anywhere", nil, map[string]string{"restart-strategy.exponential-delay.max-backoff": "5s"},
			"restart-strategy.exponential-delay.max-backoff set for the job would be ignored: the job sets no restart-strategy.type, so the default restart strategy"},
		{"job type and attempts", cluster, map[string]string{config.RestartStrategy: "fixed-delay", config.FixedDelayAttempts: "10"}, ""},
		{"cluster type alone", cluster, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := job.Build(job.Request{Spec: []byte(spec), Overrides: tc.overrides}, job.Env{Defaults: tc.cluster})
			if err != nil {
				t.Fatal(err)
			}
			err = validateRestartStrategy(g, tc.cluster)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validate = %v, want accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, job.ErrInvalidSpec)):
				t.Errorf("validate = %v, want an invalid-spec error saying %q", err, tc.want)
			}
		})
	}
}
