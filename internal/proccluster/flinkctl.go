package proccluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// The types below are the part of flinkctl's JSON output that the system tests and the bench
// read. They are declared apart from flinkctl's own, so that a field renamed there decodes as
// a zero value here, which the tests' checks fail on, instead of following the rename.

// JobStatus is `flinkctl status -o json` (and `run -o json`).
type JobStatus struct {
	ID           string      `json:"id"`
	Status       string      `json:"status"`
	StartTime    string      `json:"start_time"`
	EndTime      string      `json:"end_time"`
	Restarts     int         `json:"restarts"`
	FailureCause string      `json:"failure_cause"`
	Tasks        []Task      `json:"tasks"`
	Exceptions   []Exception `json:"exceptions"`
}

// Task is one task of a JobStatus.
type Task struct {
	Operator    string `json:"operator"`
	Subtask     int    `json:"subtask"`
	Attempt     int    `json:"attempt"`
	Status      string `json:"status"`
	TaskManager string `json:"taskmanager"`
	RecordsIn   int64  `json:"records_in"`
	RecordsOut  int64  `json:"records_out"`
}

// Exception is one entry of a JobStatus's exception history.
type Exception struct {
	Time           string   `json:"time"`
	Task           string   `json:"task"`
	TaskManager    string   `json:"taskmanager"`
	Cause          string   `json:"cause"`
	Handling       string   `json:"handling"`
	Failover       string   `json:"failover"`
	RestartedTasks []string `json:"restarted_tasks"`
	RestartAttempt int      `json:"restart_attempt"`
	RestartDelayMs int64    `json:"restart_delay_ms"`
}

// Checkpoint is one entry of `flinkctl checkpoints -o json`.
type Checkpoint struct {
	ID             int64  `json:"id"`
	Status         string `json:"status"`
	DurationMs     int64  `json:"duration_ms"`
	StateSizeBytes int64  `json:"state_size_bytes"`
	AlignmentMs    int64  `json:"alignment_ms"`
	Failure        string `json:"failure"`
	FailureReason  string `json:"failure_reason"`
	Unaligned      bool   `json:"unaligned"`
	InFlightBytes  int64  `json:"in_flight_bytes"`
}

// Flinkctl runs flinkctl -m Addr args and returns its output; err is an *exec.ExitError
// when it exited non-zero.
func (c *Cluster) Flinkctl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	pre := []string{"-m", c.Addr}
	if c.opts.Secure {
		pre = append(pre, "--ca", c.Certs.CA, "--token-file", c.Certs.Token)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.opts.Bin, "flinkctl"), append(pre, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// FlinkctlJSON runs flinkctl args -o json and decodes its output into v. A non-zero exit is
// an error with what flinkctl wrote to stderr.
func (c *Cluster) FlinkctlJSON(ctx context.Context, v any, args ...string) error {
	out, errOut, err := c.Flinkctl(ctx, append(args, "-o", "json")...)
	if err != nil {
		return fmt.Errorf("flinkctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut))
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("flinkctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Submit runs the spec detached (flinkctl run -d) and returns the job's ID.
func (c *Cluster) Submit(ctx context.Context, spec string) (string, error) {
	var sub struct {
		JobID string `json:"job_id"`
	}
	err := c.FlinkctlJSON(ctx, &sub, "run", "-d", spec)
	return sub.JobID, err
}

// Status returns the job's `flinkctl status`.
func (c *Cluster) Status(ctx context.Context, id string) (*JobStatus, error) {
	var st JobStatus
	return &st, c.FlinkctlJSON(ctx, &st, "status", id)
}
