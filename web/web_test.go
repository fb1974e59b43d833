package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/security"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// call sends a request to the dashboard at base and decodes its JSON answer into out (when
// set), returning the status.
func call(t *testing.T, method, url, token string, body io.Reader, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, data)
		}
	}
	return resp.StatusCode
}

const graphJob = `name: graphed
parallelism: 2
config: {execution.checkpointing.interval: 100ms}
operators:
  - {name: numbers, type: sequence, from: 1, rate: 500, parallelism: 1}
  - {name: parity, type: map, fields: {odd: "value % 2", value: "value"}}
  - {name: by-odd, type: key-by, key: "odd"}
  - {name: counts, type: count}
  - {name: out, type: discard}
`

// The JSON API's read paths and actions on a running cluster, and its errors.
func TestAPI(t *testing.T) {
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2, REST: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(graphJob)})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + c.JM.RESTAddr()

	var o struct {
		TaskManagers int `json:"taskmanagers"`
		SlotsTotal   int `json:"slots_total"`
		JobsRunning  int `json:"jobs_running"`
		JobManagers  []struct{ ID, Role string }
	}
	if code := call(t, "GET", base+"/overview", "", nil, &o); code != http.StatusOK || o.TaskManagers != 2 || o.SlotsTotal != 4 ||
		o.JobsRunning != 1 || len(o.JobManagers) != 1 || o.JobManagers[0].Role != "Leader" {
		t.Errorf("GET /overview = %d %+v", code, o)
	}

	var jobs struct {
		Jobs []struct{ ID, Name, Status string }
	}
	poll.Until(t, time.Minute, "the job to run", func() error {
		if code := call(t, "GET", base+"/jobs/overview", "", nil, &jobs); code != http.StatusOK || len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != id || jobs.Jobs[0].Status != "RUNNING" {
			return fmt.Errorf("GET /jobs/overview = %d %+v", code, jobs)
		}
		return nil
	})

	// The job's graph: its vertices with their tasks and load, and the edges between them.
	var job struct {
		Status   string
		Vertices []struct {
			ID          int32
			Name        string
			Parallelism int32
			Operators   []struct{ Name, Type string }
			Tasks       []struct {
				Status             string
				RecordsInPerSecond float64 `json:"records_in_per_second"`
			}
			RecordsOutPerSecond float64 `json:"records_out_per_second"`
		}
		Edges []struct {
			Source, Target int32
			Partitioner    string
		}
	}
	poll.Until(t, time.Minute, "the job's graph with its load", func() error {
		if code := call(t, "GET", base+"/jobs/"+id, "", nil, &job); code != http.StatusOK {
			return fmt.Errorf("GET /jobs/%s: %d", id, code)
		}
		if len(job.Vertices) != 3 || len(job.Edges) != 2 || job.Edges[0].Partitioner != "REBALANCE" || job.Edges[1].Partitioner != "HASH" ||
			job.Edges[1].Source != 1 || job.Edges[1].Target != 2 {
			return fmt.Errorf("graph %+v, want 3 vertices, a REBALANCE and a HASH edge", job)
		}
		if job.Vertices[0].RecordsOutPerSecond <= 0 {
			return fmt.Errorf("source vertex without records/s: %+v", job.Vertices[0])
		}
		return nil
	})
	if v := job.Vertices[0]; len(v.Operators) != 1 || v.Operators[0].Type != "sequence" || v.Parallelism != 1 || len(v.Tasks) != 1 {
		t.Errorf("first vertex %+v, want the sequence with one task", v)
	}
	if v := job.Vertices[2]; v.Name != "counts -> out" || v.Parallelism != 2 || len(v.Tasks) != 2 || len(v.Operators) != 2 {
		t.Errorf("last vertex %+v, want the chain counts -> out with two tasks", v)
	}

	var cps struct {
		Counts  map[string]int
		History []struct {
			ID     int64
			Status string
		}
	}
	poll.Until(t, time.Minute, "a completed checkpoint", func() error {
		if code := call(t, "GET", base+"/jobs/"+id+"/checkpoints", "", nil, &cps); code != http.StatusOK || cps.Counts["completed"] < 1 {
			return fmt.Errorf("GET checkpoints: %d %+v", code, cps)
		}
		return nil
	})

	// Actions: a checkpoint, a savepoint into a directory of the request, then cancel.
	var cp struct {
		ID     int64
		Status string
	}
	if code := call(t, "POST", base+"/jobs/"+id+"/checkpoints", "", nil, &cp); code != http.StatusOK || cp.Status != "COMPLETED" || cp.ID < 1 {
		t.Errorf("POST checkpoints = %d %+v", code, cp)
	}
	spDir := filepath.Join(t.TempDir(), "savepoints")
	var sp struct {
		SavepointPath string `json:"savepoint_path"`
	}
	body := strings.NewReader(fmt.Sprintf(`{"target_directory": %q}`, spDir))
	if code := call(t, "POST", base+"/jobs/"+id+"/savepoints", "", body, &sp); code != http.StatusOK || !strings.HasPrefix(sp.SavepointPath, spDir) {
		t.Errorf("POST savepoints = %d %+v, want a savepoint under %s", code, sp, spDir)
	} else if _, err := os.Stat(filepath.Join(sp.SavepointPath, "_metadata")); err != nil {
		t.Errorf("savepoint %s: %v", sp.SavepointPath, err)
	}

	// Errors: Flink's {"errors": [...]} with the status that fits.
	var e struct{ Errors []string }
	for _, tc := range []struct {
		method, path string
		want         int
		says         string
	}{
		{"GET", "/jobs/0123456789abcdef0123456789abcdef", http.StatusNotFound, "not found"},
		{"GET", "/jobs/not-a-job!", http.StatusBadRequest, "not a job ID"},
		{"GET", "/jobs/" + id + "/cancel", http.StatusMethodNotAllowed, "method not allowed"},
		{"DELETE", "/jobs/" + id, http.StatusMethodNotAllowed, "method not allowed"},
		{"GET", "/no/such/path", http.StatusNotFound, "not found"},
		{"POST", "/jobs/" + id + "/savepoints", http.StatusBadRequest, "body"},
	} {
		e.Errors = nil
		var body io.Reader
		if tc.method == "POST" {
			body = strings.NewReader("{not json")
		}
		code := call(t, tc.method, base+tc.path, "", body, &e)
		if code != tc.want || tc.says != "" && (len(e.Errors) != 1 || !strings.Contains(e.Errors[0], tc.says)) {
			t.Errorf("%s %s = %d %v, want %d saying %q", tc.method, tc.path, code, e.Errors, tc.want, tc.says)
		}
	}
	// A body beyond the limit is refused, not read.
	big := strings.NewReader(`{"target_directory": "` + strings.Repeat("x", 8<<10) + `"}`)
	if code := call(t, "POST", base+"/jobs/"+id+"/savepoints", "", big, &e); code != http.StatusRequestEntityTooLarge {
		t.Errorf("POST savepoints with an 8 KiB body = %d, want 413", code)
	}

	if code := call(t, "POST", base+"/jobs/"+id+"/cancel", "", nil, nil); code != http.StatusOK {
		t.Errorf("POST cancel = %d", code)
	}
	poll.Until(t, time.Minute, "the job to be cancelled", func() error {
		if code := call(t, "GET", base+"/jobs/"+id, "", nil, &job); code != http.StatusOK || job.Status != "CANCELED" {
			return fmt.Errorf("status %d %s", code, job.Status)
		}
		return nil
	})
	// The page and its assets are served, with headers that keep it from being framed.
	for _, p := range []string{"/", "/app.js", "/style.css"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s = %s, X-Frame-Options %q", p, resp.Status, resp.Header.Get("X-Frame-Options"))
		}
	}
}

// A follower serves the API with the leader's data; a cluster with a token refuses the API
// without it (401), serves it with it, and still serves the page.
func TestAPIOnFollowerAndWithToken(t *testing.T) {
	certs, err := security.Generate(filepath.Join(t.TempDir(), "certs"), []string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	settings := config.New()
	if err := settings.Set(config.AuthTokenFile, certs.Token); err != nil {
		t.Fatal(err)
	}
	c, cl := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 1, Slots: 1, REST: true, Settings: settings})
	token, err := security.ReadToken(certs.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte("name: led\noperators:\n  - {name: n, type: sequence, from: 1, rate: 10}\n  - {name: out, type: discard}\n")})
	if err != nil {
		t.Fatal(err)
	}
	follower := -1
	for i := range c.JMs {
		if i != c.Leader() {
			follower = i
			break
		}
	}
	base := "http://" + c.JMs[follower].RESTAddr()
	var e struct{ Errors []string }
	if code := call(t, "GET", base+"/jobs/overview", "", nil, &e); code != http.StatusUnauthorized {
		t.Errorf("GET /jobs/overview without the token = %d %v, want 401", code, e.Errors)
	}
	if code := call(t, "POST", base+"/jobs/"+id+"/cancel", "wrong", nil, &e); code != http.StatusUnauthorized {
		t.Errorf("POST cancel with a wrong token = %d, want 401", code)
	}
	var job struct{ ID, Status string }
	poll.Until(t, time.Minute, "the follower to serve the leader's job", func() error {
		if code := call(t, "GET", base+"/jobs/"+id, token, nil, &job); code != http.StatusOK || job.ID != id {
			return fmt.Errorf("GET /jobs/%s through a follower = %d %+v", id, code, job)
		}
		return nil
	})
	if code := call(t, "GET", base+"/", "", nil, nil); code != http.StatusOK {
		t.Errorf("GET / without the token = %d, want the page (it asks for the token)", code)
	}
}
