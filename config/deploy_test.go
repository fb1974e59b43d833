package config

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeployConfigsLoad keeps the example cluster configs in deploy/conf valid.
func TestDeployConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("../deploy/conf/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no config files in deploy/conf: %v", err)
	}
	for _, f := range files {
		c, err := LoadFile(f)
		if err != nil {
			t.Errorf("LoadFile(%s): %v", f, err)
			continue
		}
		if c.Int(TaskSlots) != 2 || c.Duration(HeartbeatTimeout).Seconds() != 5 {
			t.Errorf("LoadFile(%s) = %v, want 2 slots and a 5 s heartbeat timeout", f, c.Map())
		}
	}
}

// exportedSeries are the series goflink exports (README.md, Metrics): the JobManager's
// (coordinator/metrics.go) and the TaskManager's (worker/metrics.go). go_* and process_*
// come from the Go client's collectors.
var exportedSeries = []string{
	"flink_jobmanager_job_numRestarts", "flink_jobmanager_job_uptime", "flink_jobmanager_job_downtime",
	"flink_jobmanager_job_restartingTime",
	"flink_jobmanager_job_numberOfCompletedCheckpoints", "flink_jobmanager_job_numberOfFailedCheckpoints",
	"flink_jobmanager_job_numberOfInProgressCheckpoints", "flink_jobmanager_job_totalNumberOfCheckpoints",
	"flink_jobmanager_job_lastCheckpointDuration", "flink_jobmanager_job_lastCheckpointSize",
	"flink_jobmanager_job_lastCheckpointPersistedData",
	"flink_jobmanager_job_lastCheckpointAlignmentTime", "flink_jobmanager_job_lastCheckpointRestoreTimestamp",
	"flink_jobmanager_numRegisteredTaskManagers", "flink_jobmanager_taskSlotsTotal",
	"flink_jobmanager_taskSlotsAvailable", "flink_jobmanager_numRunningJobs",
	"flink_jobmanager_raft_isLeader", "flink_jobmanager_raft_term", "flink_jobmanager_raft_lastIndex",
	"flink_jobmanager_raft_leaderChanges",
	"flink_taskmanager_Status_taskSlotsTotal", "flink_taskmanager_Status_numRunningTasks",
	"flink_taskmanager_job_task_numRecordsIn", "flink_taskmanager_job_task_numRecordsOut",
	"flink_taskmanager_job_task_numBytesIn", "flink_taskmanager_job_task_numBytesOut",
	"flink_taskmanager_job_task_numRecordsInPerSecond", "flink_taskmanager_job_task_numRecordsOutPerSecond",
	"flink_taskmanager_job_task_numBytesInPerSecond", "flink_taskmanager_job_task_numBytesOutPerSecond",
	"flink_taskmanager_job_task_busyTimeMsPerSecond", "flink_taskmanager_job_task_idleTimeMsPerSecond",
	"flink_taskmanager_job_task_backPressuredTimeMsPerSecond", "flink_taskmanager_job_task_isBackPressured",
	"flink_taskmanager_job_task_checkpointAlignmentTime", "flink_taskmanager_job_task_checkpointStartDelayNanos",
	"flink_taskmanager_job_task_currentInputWatermark", "flink_taskmanager_job_task_currentOutputWatermark",
	"flink_taskmanager_job_task_numLateRecordsDropped",
}

// dashboardSeries are the series the dashboard must chart (issue 17): records in and out,
// busy and backpressured time per task, checkpoints, restarts, uptime, TaskManagers and
// slots, the Raft leader and term.
var dashboardSeries = []string{
	"flink_taskmanager_job_task_numRecordsIn", "flink_taskmanager_job_task_numRecordsOut",
	"flink_taskmanager_job_task_busyTimeMsPerSecond", "flink_taskmanager_job_task_backPressuredTimeMsPerSecond",
	"flink_jobmanager_job_numberOfCompletedCheckpoints", "flink_jobmanager_job_numberOfFailedCheckpoints",
	"flink_jobmanager_job_lastCheckpointDuration", "flink_jobmanager_job_lastCheckpointSize",
	"flink_jobmanager_job_numRestarts", "flink_jobmanager_job_uptime",
	"flink_jobmanager_numRegisteredTaskManagers", "flink_jobmanager_taskSlotsAvailable",
	"flink_jobmanager_raft_isLeader", "flink_jobmanager_raft_term",
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []dashboardVariable `json:"list"`
	} `json:"templating"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboardVariable struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

type dashboardPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

// seriesName matches the metric names in a PromQL expression (and, harmlessly, label names
// and functions: only those with a series prefix are checked).
var seriesName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// TestGrafanaDashboard keeps deploy/grafana/goflink-dashboard.json true to what goflink
// exports: it parses, has the job_name variable, every expression names only exported series
// and filters job series by $job_name, the series the issue asks for are all charted, and
// promtool parses every expression (the Grafana variables replaced by values).
func TestGrafanaDashboard(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool (Debian package prometheus; .ci/run installs it): %v", err)
	}
	data, err := os.ReadFile("../deploy/grafana/goflink-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("parse the dashboard: %v", err)
	}
	if d.UID == "" {
		t.Errorf("the dashboard has no uid")
	}
	if !slices.Contains(d.Templating.List, dashboardVariable{Name: "job_name", Type: "query"}) {
		t.Errorf("the dashboard has no query variable job_name")
	}

	var panels []dashboardPanel
	for _, p := range d.Panels {
		panels = append(append(panels, p), p.Panels...)
	}
	ids := map[int]string{}
	charted := map[string]bool{}
	var exprs []string
	for _, p := range panels {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share the id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
			for _, name := range seriesName.FindAllString(target.Expr, -1) {
				if !strings.HasPrefix(name, "flink_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
					continue
				}
				if strings.HasPrefix(name, "flink_") && !slices.Contains(exportedSeries, name) {
					t.Errorf("panel %q: %s is not a series goflink exports", p.Title, name)
				}
				charted[name] = true
				jobSeries := strings.HasPrefix(name, "flink_jobmanager_job_") || strings.HasPrefix(name, "flink_taskmanager_job_")
				if jobSeries && !strings.Contains(target.Expr, name+`{job_name=~"$job_name"`) {
					t.Errorf("panel %q: %s is not filtered by the job_name variable: %s", p.Title, name, target.Expr)
				}
			}
		}
	}
	for _, name := range dashboardSeries {
		if !charted[name] {
			t.Errorf("no panel charts %s", name)
		}
	}
	checkPromQL(t, promtool, exprs)
}

// checkPromQL has promtool parse the dashboard's expressions, as the rules of one group,
// with the Grafana variables replaced by values.
func checkPromQL(t *testing.T, promtool string, exprs []string) {
	t.Helper()
	vars := strings.NewReplacer("$job_name", ".*", "$__rate_interval", "1m")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		quoted, err := json.Marshal(vars.Replace(e)) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rules, "      - record: dashboard_expr_%d\n        expr: %s\n", i, quoted)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's %d expressions: %v\n%s", len(exprs), err, out)
	}
}

// TestPrometheusConfig checks deploy/prometheus/prometheus.yml with promtool (syntax only:
// the CA and token it names exist once make up copied them to deploy/.certs/) and that it
// scrapes every JobManager and TaskManager of deploy/docker-compose.yml on its metrics port.
func TestPrometheusConfig(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool (Debian package prometheus; .ci/run installs it): %v", err)
	}
	const path = "../deploy/prometheus/prometheus.yml"
	if out, err := exec.Command(promtool, "check", "config", "--syntax-only", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config --syntax-only %s: %v\n%s", path, err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	want := []string{"jm1:9249", "jm2:9249", "jm3:9249", "tm1:9250", "tm2:9250", "tm3:9250"}
	if slices.Sort(targets); !slices.Equal(targets, want) {
		t.Errorf("%s scrapes %v, want %v", path, targets, want)
	}
}
