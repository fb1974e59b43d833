package job_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/failover"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
)

// TestExamples builds every examples/**/*.yaml as a submit would: the spec with job.Build, and
// its restart and failover strategy settings as the JobManager checks them. A directory with Go
// code builds its own goflink with custom operators (examples/custom-operator), so its specs
// are skipped.
func TestExamples(t *testing.T) {
	root := filepath.Join("..", "examples")
	var specs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if goFiles, _ := filepath.Glob(filepath.Join(path, "*.go")); len(goFiles) > 0 {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml") {
			specs = append(specs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) < 10 {
		t.Fatalf("found %d example specs under %s, want at least 10: %v", len(specs), root, specs)
	}
	// The restart strategy each example in restart-strategies/ is about.
	restartExamples := map[string]string{
		"none.yaml":              "NoRestartBackoffTimeStrategy",
		"fixed-delay.yaml":       "FixedDelayRestartBackoffTimeStrategy(",
		"failure-rate.yaml":      "FailureRateRestartBackoffTimeStrategy(",
		"exponential-delay.yaml": "ExponentialDelayRestartBackoffTimeStrategy(",
	}
	for _, path := range specs {
		rel, _ := filepath.Rel(root, path)
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			spec, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			g, err := job.Build(job.Request{Spec: spec, SpecName: rel}, job.Env{Operators: operator.MustRegistry(coordinator.ConnectorTypes...)})
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			cfg, jobLayer := config.New(), config.New()
			if err := cfg.SetAll(g.GetConfig()); err != nil {
				t.Fatal(err)
			}
			if err := jobLayer.SetAll(g.GetJobConfig()); err != nil {
				t.Fatal(err)
			}
			rs, err := failover.NewRestartStrategy(jobLayer, nil, cfg.Duration(config.CheckpointInterval) > 0, nil)
			if err != nil {
				t.Fatalf("restart strategy: %v", err)
			}
			if want, ok := restartExamples[filepath.Base(path)]; ok && filepath.Base(filepath.Dir(path)) == "restart-strategies" &&
				!strings.HasPrefix(rs.Name(), want) {
				t.Errorf("restart strategy = %s, want %s…", rs.Name(), want)
			}
			if _, err := failover.NewFailoverStrategy(cfg.String(config.FailoverStrategy), g); err != nil {
				t.Fatalf("failover strategy: %v", err)
			}
			if filepath.Base(filepath.Dir(path)) == "region-failover" {
				// The example's point: every subtask is a pipelined region of its own.
				if n, p := failover.ComputeRegions(g).Count(), int(g.GetVertices()[0].GetParallelism()); p < 2 || n != p {
					t.Errorf("%d pipelined regions at parallelism %d, want one region per subtask", n, p)
				}
			}
		})
	}
}
