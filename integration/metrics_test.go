package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// held emits the values 0..n-1 as fast as it may, then waits for ever without ending, so that
// its counters stay final while the job runs.
var held = operator.Define(operator.Type{Name: "held", Role: operator.RoleSource, Fields: []string{"n"}},
	func(p *operator.Planner) (gatedConfig, *operator.Shape) {
		var c gatedConfig
		if e, ok := p.Require("n"); ok {
			c.N, _ = e.Int()
		}
		return c, operator.KnownShape(operator.SequenceSchema)
	},
	func(c gatedConfig, _, _ *record.Schema) (any, error) { return &heldSource{n: c.N}, nil })

type heldSource struct {
	n, next int64
	out     operator.Output
}

func (h *heldSource) Open(_ *operator.Context, out operator.Output) error { h.out = out; return nil }
func (h *heldSource) Close() error                                        { return nil }
func (h *heldSource) Emit(limit int) (int, time.Duration, bool, error) {
	if h.next >= h.n {
		return 0, 20 * time.Millisecond, false, nil
	}
	k := 0
	for ; k < limit && h.next < h.n; k++ {
		if err := h.out.Emit(record.Row{record.IntValue(h.next)}); err != nil {
			return k, 0, false, err
		}
		h.next++
	}
	return k, 0, false, nil
}

// crawl is a sink that sleeps a millisecond every 100 records: slower than any source.
var crawl = operator.Define(operator.Type{Name: "crawl", Role: operator.RoleSink},
	func(*operator.Planner) (struct{}, *operator.Shape) { return struct{}{}, nil },
	func(struct{}, *record.Schema, *record.Schema) (any, error) { return &crawlSink{}, nil })

type crawlSink struct{ n int }

func (s *crawlSink) Open(*operator.Context, operator.Output) error { return nil }
func (s *crawlSink) Flush() error                                  { return nil }
func (s *crawlSink) EndInput() error                               { return nil }
func (s *crawlSink) Close() error                                  { return nil }
func (s *crawlSink) Process(record.Row) error {
	if s.n++; s.n%100 == 0 {
		time.Sleep(time.Millisecond)
	}
	return nil
}

// TestPrometheusMetrics scrapes a running cluster's JobManager and TaskManagers while a
// checkpointed job runs a fast source into a slow sink over local and remote channels: the
// series exist under Flink's names with Flink's labels, completed checkpoints grow, the
// source is backpressured, the sinks read exactly what the source emitted, promtool accepts
// the exposition, and a cancelled job's series disappear.
func TestPrometheusMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool (Debian package prometheus; .ci/run installs it): %v", err)
	}
	settings := config.New()
	if err := settings.SetAll(map[string]string{config.HeartbeatInterval: "100ms",
		config.BuffersPerChannel: "2", config.MaxBuffersPerChannel: "2"}); err != nil {
		t.Fatal(err)
	}
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2, Settings: settings, Metrics: true,
		Operators: []operator.Type{held, crawl}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 400_000 // several times what the buffers between source and sinks hold
	spec := fmt.Sprintf(`name: metered
config: {execution.checkpointing.interval: 100ms}
operators:
  - {name: numbers, type: held, n: %d, parallelism: 1}
  - {name: slow, type: crawl, parallelism: 2}
`, n)
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
	if err != nil {
		t.Fatal(err)
	}
	// A second job reports operator metrics: its watermark and the file sink's commits.
	stamped := fmt.Sprintf(`name: stamped
config: {execution.checkpointing.interval: 100ms}
operators:
  - {name: ticks, type: sequence, from: 1, rate: 2000, parallelism: 1}
  - {name: wm, type: watermark, timestamp: "value", max-out-of-orderness: 5ms}
  - {name: out, type: file, path: %q}
`, filepath.Join(t.TempDir(), "stamped"))
	id2, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(stamped)})
	if err != nil {
		t.Fatal(err)
	}
	jmURL := "http://" + c.JM.MetricsAddr() + "/metrics"
	var tmURLs []string
	for _, tm := range c.TMs {
		tmURLs = append(tmURLs, "http://"+tm.MetricsAddr()+"/metrics")
	}
	job := map[string]string{"job_id": id, "job_name": "metered"}

	// The source waits for room while the sinks crawl.
	poll.Until(t, time.Minute, "the source to be backpressured", func() error {
		fams := scrapeAll(t, tmURLs)
		s := find(fams, "flink_taskmanager_job_task_backPressuredTimeMsPerSecond", with(job, "task_name", "numbers", "subtask_index", "0"))
		if len(s) != 1 || s[0] < 200 {
			return fmt.Errorf("source backPressuredTimeMsPerSecond %v, want one above 200", s)
		}
		return nil
	})
	// Every record the source emitted reaches the sinks; the counters then agree exactly.
	poll.Until(t, time.Minute, "the sinks to read every record", func() error {
		fams := scrapeAll(t, tmURLs)
		out := find(fams, "flink_taskmanager_job_task_numRecordsOut", with(job, "task_name", "numbers"))
		in := find(fams, "flink_taskmanager_job_task_numRecordsIn", with(job, "task_name", "slow"))
		if len(out) != 1 || len(in) != 2 || out[0] != n || in[0]+in[1] != n {
			return fmt.Errorf("source numRecordsOut %v, sinks numRecordsIn %v; want %d and a sum of %d", out, in, n, n)
		}
		if b := find(fams, "flink_taskmanager_job_task_numBytesIn", with(job, "task_name", "slow")); len(b) != 2 || b[0]+b[1] < 8*n {
			return fmt.Errorf("sinks numBytesIn %v, want at least 8 bytes a record", b)
		}
		return nil
	})
	var first float64
	poll.Until(t, time.Minute, "checkpoints to complete", func() error {
		s := find(scrape(t, jmURL), "flink_jobmanager_job_numberOfCompletedCheckpoints", job)
		if len(s) != 1 || s[0] < 1 {
			return fmt.Errorf("numberOfCompletedCheckpoints %v", s)
		}
		first = s[0]
		return nil
	})
	poll.Until(t, time.Minute, "completed checkpoints to grow", func() error {
		fams := scrape(t, jmURL)
		if s := find(fams, "flink_jobmanager_job_numberOfCompletedCheckpoints", job); len(s) != 1 || s[0] <= first {
			return fmt.Errorf("numberOfCompletedCheckpoints %v, not above %v", s, first)
		}
		for _, name := range []string{"numRestarts", "uptime", "lastCheckpointDuration", "lastCheckpointSize"} {
			if s := find(fams, "flink_jobmanager_job_"+name, job); len(s) != 1 {
				return fmt.Errorf("flink_jobmanager_job_%s: %v", name, s)
			}
		}
		if s := find(fams, "flink_jobmanager_taskSlotsTotal", nil); len(s) != 1 || s[0] != 4 {
			return fmt.Errorf("taskSlotsTotal %v, want 4", s)
		}
		if s := find(fams, "flink_jobmanager_raft_isLeader", nil); len(s) != 1 || s[0] != 1 {
			return fmt.Errorf("raft_isLeader %v, want 1", s)
		}
		return nil
	})
	// Every task series carries Flink's labels.
	for _, f := range scrapeAll(t, tmURLs) {
		if !strings.HasPrefix(f.GetName(), "flink_taskmanager_job_task_") {
			continue
		}
		for _, m := range f.GetMetric() {
			got := labelMap(m)
			for _, l := range []string{"job_id", "job_name", "task_name", "subtask_index", "task_attempt_num", "tm_id"} {
				if got[l] == "" {
					t.Fatalf("%s %v lacks label %s", f.GetName(), got, l)
				}
			}
		}
	}
	out := map[string]string{"job_id": id2, "operator_name": "out"}
	poll.Until(t, time.Minute, "the file sink's commits and watermark", func() error {
		fams := scrapeAll(t, tmURLs)
		if s := find(fams, "flink_taskmanager_job_task_operator_numCommittablesSuccess", out); len(s) != 1 || s[0] < 1 {
			return fmt.Errorf("numCommittablesSuccess %v", s)
		}
		if s := find(fams, "flink_taskmanager_job_task_operator_currentInputWatermark", out); len(s) != 1 || s[0] < 1 {
			return fmt.Errorf("currentInputWatermark %v", s)
		}
		// The chain ticks -> wm -> out: each operator's records out are the next one's in.
		var ins, outs []float64
		for _, op := range []string{"ticks", "wm", "out"} {
			l := map[string]string{"job_id": id2, "operator_name": op}
			ins = append(ins, find(fams, "flink_taskmanager_job_task_operator_numRecordsIn", l)...)
			outs = append(outs, find(fams, "flink_taskmanager_job_task_operator_numRecordsOut", l)...)
		}
		if len(ins) != 3 || len(outs) != 3 || ins[0] < 1 || outs[0] != ins[1] || outs[1] != ins[2] {
			return fmt.Errorf("operators' numRecordsIn %v, numRecordsOut %v: want each out equal to the next in", ins, outs)
		}
		return nil
	})
	for _, u := range append([]string{jmURL}, tmURLs...) {
		checkWithPromtool(t, promtool, u)
	}
	if err := cl.Cancel(ctx, id2); err != nil {
		t.Fatal(err)
	}

	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the cancelled job's series to disappear", func() error {
		if s := find(scrapeAll(t, tmURLs), "flink_taskmanager_job_task_numRecordsIn", job); len(s) != 0 {
			return fmt.Errorf("task series remain: %v", s)
		}
		if s := find(scrape(t, jmURL), "flink_jobmanager_job_numRestarts", job); len(s) != 0 {
			return fmt.Errorf("job series remain: %v", s)
		}
		return nil
	})
}

// checkWithPromtool has promtool check the exposition at url. Flink's metric names are
// camelCase (the issue asks for them), which promtool's lint reports; any other finding fails.
func checkWithPromtool(t *testing.T, promtool, url string) {
	t.Helper()
	body := get(t, url)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("promtool check metrics on %s: %v\n%s", url, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(line, "flink_") || !strings.HasSuffix(line, "metric names should be written in 'snake_case' not 'camelCase'") {
			t.Fatalf("promtool check metrics on %s: %s", url, line)
		}
	}
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s %v", url, resp.Status, err)
	}
	return body
}

func scrape(t *testing.T, url string) []*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(get(t, url)))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out
}

func scrapeAll(t *testing.T, urls []string) []*dto.MetricFamily {
	var out []*dto.MetricFamily
	for _, u := range urls {
		out = append(out, scrape(t, u)...)
	}
	return out
}

// with returns labels plus the pairs kv.
func with(labels map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// find returns the values of the gauge samples called name whose labels include labels, in
// subtask order where there is one.
func find(fams []*dto.MetricFamily, name string, labels map[string]string) []float64 {
	var out []float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			got := labelMap(m)
			for k, v := range labels {
				if got[k] != v {
					continue metric
				}
			}
			out = append(out, m.GetGauge().GetValue())
		}
	}
	return out
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// Every JobManager exports its Raft state; only the leader exports the cluster and its jobs.
// After the leader is stopped, the new leader exports the job and counts the change.
func TestJobManagerMetricsFollowTheLeader(t *testing.T) {
	c, cl := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 1, Slots: 2, Metrics: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(`name: led
operators:
  - {name: ticks, type: sequence, from: 1, rate: 100}
  - {name: out, type: discard}
`)})
	if err != nil {
		t.Fatal(err)
	}
	urls := make([]string, len(c.JMs))
	for i, jm := range c.JMs {
		urls[i] = "http://" + jm.MetricsAddr() + "/metrics"
	}
	job := map[string]string{"job_id": id}
	check := func(alive []int) error {
		leaders := 0
		for _, i := range alive {
			fams := scrape(t, urls[i])
			lead := find(fams, "flink_jobmanager_raft_isLeader", nil)
			jobs := find(fams, "flink_jobmanager_job_numRestarts", job)
			if len(lead) != 1 {
				return fmt.Errorf("jm %d: raft_isLeader %v", i, lead)
			}
			switch {
			case lead[0] == 1 && len(jobs) != 1:
				return fmt.Errorf("leader jm %d exports the job %d times", i, len(jobs))
			case lead[0] == 0 && len(jobs) != 0:
				return fmt.Errorf("follower jm %d exports the job", i)
			case lead[0] == 0 && len(find(fams, "flink_jobmanager_numRegisteredTaskManagers", nil)) != 0:
				return fmt.Errorf("follower jm %d exports the cluster", i)
			}
			if lead[0] == 1 {
				leaders++
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d JobManagers say they lead", leaders)
		}
		return nil
	}
	poll.Until(t, time.Minute, "one leader exporting the job", func() error { return check([]int{0, 1, 2}) })
	old := c.Leader()
	if old < 0 {
		t.Fatal("no leader")
	}
	if err := c.StopJobManager(old); err != nil {
		t.Fatal(err)
	}
	var alive []int
	for i := range c.JMs {
		if i != old {
			alive = append(alive, i)
		}
	}
	poll.Until(t, time.Minute, "the new leader exporting the job", func() error {
		if err := check(alive); err != nil {
			return err
		}
		lead := c.Leader()
		if lead < 0 {
			return fmt.Errorf("no leader")
		}
		if changes := find(scrape(t, urls[lead]), "flink_jobmanager_raft_leaderChanges", nil); len(changes) != 1 || changes[0] < 1 {
			return fmt.Errorf("new leader's leaderChanges %v", changes)
		}
		return nil
	})
}
