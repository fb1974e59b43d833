//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// singleAddr is jm1's published RPC port: the one address every flinkctl command needs, whether
// jm1 leads or not. A follower forwards to the leader, whose own address (jm2:6123, a container
// name) the host cannot resolve.
const singleAddr = "localhost:6123"

// singleAddress runs every flinkctl command with -m localhost:6123 alone, each exiting 0 with
// the right answer: cluster (the whole view), list, status, checkpoints, checkpoint on the
// exactly-once job; run -d and cancel of a second job; run of a third that it follows to
// FINISHED. It returns whether jm1 was a follower.
func (e *e2e) singleAddress(when string) bool {
	leader, _, _ := e.leaderView().leader()
	role := "the leader"
	if leader != "jm1" {
		role = "a follower of " + leader
	}
	e.logf("SINGLE ADDRESS %s: every flinkctl command with -m %s only, jm1 being %s", when, singleAddr, role)
	var took []string
	flinkctl := func(v any, args ...string) {
		e.t.Helper()
		at := time.Now()
		out, err := e.run(time.Minute, e.flinkctl, append([]string{"-m", singleAddr, "-o", "json"}, args...)...)
		if err != nil {
			e.t.Fatalf("flinkctl -m %s (jm1 being %s): %v", singleAddr, role, err)
		}
		if err := json.Unmarshal([]byte(out), v); err != nil {
			e.t.Fatalf("flinkctl -m %s %s: %q: %v", singleAddr, strings.Join(args, " "), out, err)
		}
		name := args[0]
		if len(args) > 1 && args[1] == "-d" {
			name += " -d"
		}
		took = append(took, fmt.Sprintf("%s %v", name, time.Since(at).Round(time.Millisecond)))
	}

	var v clusterView
	flinkctl(&v, "cluster")
	if err := v.complete(nil); err != nil {
		e.t.Errorf("cluster -m %s exited 0 with an incomplete view: %v", singleAddr, err)
	}
	var jobs []struct{ ID, Status string }
	flinkctl(&jobs, "list")
	listed := false
	for _, j := range jobs {
		listed = listed || j.ID == e.jobID
	}
	if !listed {
		e.t.Errorf("list -m %s: %+v lacks job %s", singleAddr, jobs, e.jobID)
	}
	var st jobStatus
	flinkctl(&st, "status", e.jobID)
	if st.Status != "RUNNING" {
		e.t.Errorf("status -m %s: job %s is %s, want RUNNING", singleAddr, e.jobID, st.Status)
	}
	var cps []checkpoint
	flinkctl(&cps, "checkpoints", e.jobID)
	if maxCompleted(cps) == 0 {
		e.t.Errorf("checkpoints -m %s: no completed checkpoint in %d entries", singleAddr, len(cps))
	}
	var cp checkpoint
	flinkctl(&cp, "checkpoint", e.jobID)
	if cp.Status != "COMPLETED" {
		e.t.Errorf("checkpoint -m %s: %+v, want COMPLETED", singleAddr, cp)
	}

	dir := e.t.TempDir()
	endless, short := filepath.Join(dir, "endless.yaml"), filepath.Join(dir, "short.yaml")
	for path, spec := range map[string]string{
		endless: "name: e2e-single-address-endless\noperators:\n  - {name: n, type: sequence, from: 0, rate: 10}\n  - {name: o, type: discard}\n",
		short:   "name: e2e-single-address-short\noperators:\n  - {name: n, type: sequence, from: 1, to: 50}\n  - {name: o, type: discard}\n",
	} {
		if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	flinkctl(&sub, "run", "-d", endless)
	var cancelled struct{ Status string }
	flinkctl(&cancelled, "cancel", sub.JobID)
	e.waitFor("the second job cancelled", recoverTimeout, func() error {
		var st jobStatus
		if err := e.flinkctlJSON(&st, "status", sub.JobID, "-o", "json"); err != nil {
			return err
		}
		if st.Status != "CANCELED" {
			return fmt.Errorf("job %s is %s", sub.JobID, st.Status)
		}
		return nil
	})
	var ran jobStatus
	flinkctl(&ran, "run", short)
	if ran.Status != "FINISHED" {
		e.t.Errorf("run -m %s followed the short job to %s, want FINISHED", singleAddr, ran.Status)
	}
	e.logf("  every command exited 0 through jm1 (%s): %s", role, strings.Join(took, ", "))
	return leader != "jm1"
}
