package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// nexmarkQuery is one query of the nexmark section and Flink 1.13's published throughput per
// core for it (nexmark/nexmark README: 8 TaskManagers × 1 slot, RocksDB, checkpoints every
// 3 min, 100 M events from its in-JVM generator at 10 M events/s).
type nexmarkQuery struct {
	name         string
	flinkPerCore float64
	target       float64 // times Flink's per-core figure; 0: none
}

var nexmarkQueries = []nexmarkQuery{
	{"q0", 155.02e3, 0}, {"q1", 157.94e3, 0}, {"q2", 175.21e3, 0},
	{"q5", 22.14e3, 10}, {"q7", 12.33e3, 10}, {"q8", 146.14e3, 0},
}

// nexmarkSpec reads the example spec of a query and adapts it to the bench: events events at
// the event-time rate eventRate, the source unthrottled, every sink a discard (Flink's
// benchmark writes to a blackhole sink), parallelism 2, exactly-once checkpoints every
// interval into cpDir (off when interval is 0).
func nexmarkSpec(path string, events, eventRate int64, interval time.Duration, cpDir string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("%s: not a job spec", path)
	}
	top := doc.Content[0]
	setKey(top, "parallelism", scalar("2"))
	cfg := &yaml.Node{Kind: yaml.MappingNode}
	if interval > 0 {
		setKey(cfg, "execution.checkpointing.interval", scalar(fmt.Sprintf("%dms", interval.Milliseconds())))
		setKey(cfg, "execution.checkpointing.mode", scalar("EXACTLY_ONCE"))
		setKey(cfg, "execution.checkpointing.dir", scalar(cpDir))
	}
	setKey(top, "config", cfg)
	ops := getKey(top, "operators")
	if ops == nil || ops.Kind != yaml.SequenceNode {
		return "", fmt.Errorf("%s: no operators list", path)
	}
	sources := 0
	for _, op := range ops.Content {
		switch t := getKey(op, "type"); {
		case t == nil:
			return "", fmt.Errorf("%s: an operator without a type", path)
		case t.Value == "nexmark":
			sources++
			setKey(op, "events", scalar(strconv.FormatInt(events, 10)))
			setKey(op, "first-event-rate", scalar(strconv.FormatInt(eventRate, 10)))
			deleteKey(op, "rate")
		case t.Value == "file" || t.Value == "print":
			kept := &yaml.Node{Kind: yaml.MappingNode, Style: op.Style}
			for _, k := range []string{"name", "inputs", "parallelism"} {
				if v := getKey(op, k); v != nil {
					setKey(kept, k, v)
				}
			}
			setKey(kept, "type", scalar("discard"))
			*op = *kept
		}
	}
	if sources == 0 {
		return "", fmt.Errorf("%s: no nexmark source", path)
	}
	out, err := yaml.Marshal(&doc)
	return string(out), err
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

func getKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// cpuSeconds is the CPU time (user and system) the cluster's processes used so far.
func (c *cluster) cpuSeconds() (float64, error) {
	var total float64
	for _, p := range c.Procs() {
		if p.Cmd.Process == nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
		if err != nil {
			return 0, err
		}
		// The fields after the command name, which is in parentheses and may hold spaces:
		// utime and stime are fields 14 and 15 of the line, in clock ticks (USER_HZ, 100).
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: %d fields", p.Cmd.Process.Pid, len(f))
		}
		u, err1 := strconv.ParseFloat(f[11], 64)
		st, err2 := strconv.ParseFloat(f[12], 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, err
		}
		total += (u + st) / 100
	}
	return total, nil
}

// nexmarkRun is one run of a query.
type nexmarkRun struct {
	secs, cpu   float64
	checkpoints int
}

func nexmark(c *cluster, o options, v *verdicts) error {
	fmt.Printf("\n== nexmark ==\n")
	fmt.Printf("the specs of %s with %d events at %d events/s of event time (Nexmark's rate), the source unthrottled, sinks replaced by discard,\n", o.nexmarkDir, o.nexmarkEvents, o.nexmarkEventRate)
	fmt.Printf("parallelism 2 over 2 TaskManager processes (1 slot each), EXACTLY_ONCE checkpoints (hashmap state); %d runs per query, medians.\n", o.nexmarkRuns)
	fmt.Printf("per core = events / CPU seconds of all cluster processes during the run, as Flink's figures are events/s per core used.\n")
	fmt.Printf("Flink 1.13's figures (nexmark/nexmark README): 8 TaskManagers, RocksDB, checkpoints every 3 min, 100 M events.\n")
	if err := nexmarkTable(c, o, v, o.nexmarkInterval, o.nexmarkRuns, o.nexmarkOnly, true); err != nil {
		return err
	}
	if o.nexmarkShort <= 0 {
		return nil
	}
	only := "q5,q7"
	if o.nexmarkOnly != "" {
		only = o.nexmarkOnly
	}
	fmt.Printf("\nfor information, the stateful queries with frequent checkpoints: each snapshots the whole state (hashmap, not incremental),\n")
	fmt.Printf("which in q7 holds every bid of the window (1 run each, no verdict):\n")
	return nexmarkTable(c, o, v, o.nexmarkShort, 1, only, false)
}

// nexmarkTable runs the queries named in only (all when empty) with checkpoints every
// interval, runs times each, prints a row per query and, when judged, checks the targets.
func nexmarkTable(c *cluster, o options, v *verdicts, interval time.Duration, runs int, only string, judged bool) error {
	cpDir := filepath.Join(c.dir, "checkpoints")
	fmt.Printf("\ncheckpoint interval %v:\n", interval)
	fmt.Printf("%-4s %11s %9s %11s %10s %12s %12s %7s  %s\n", "", "events/s", "time", "cores used", "checkpts", "per core", "Flink/core", "ratio", "verdict")
	for _, q := range nexmarkQueries {
		if only != "" && !strings.Contains(","+only+",", ","+q.name+",") {
			continue
		}
		spec, err := nexmarkSpec(filepath.Join(o.nexmarkDir, q.name+".yaml"), o.nexmarkEvents, o.nexmarkEventRate, interval, cpDir)
		if err != nil {
			return err
		}
		path, err := c.writeSpec("nexmark-"+q.name, spec)
		if err != nil {
			return err
		}
		var rs []nexmarkRun
		for range runs {
			r, err := c.nexmarkRun(path)
			if err != nil {
				return fmt.Errorf("nexmark %s: %w", q.name, err)
			}
			rs = append(rs, r)
		}
		secs, cpu := median(pick(rs, func(r nexmarkRun) float64 { return r.secs })), median(pick(rs, func(r nexmarkRun) float64 { return r.cpu }))
		rate, perCore := float64(o.nexmarkEvents)/secs, float64(o.nexmarkEvents)/cpu
		ratio := perCore / q.flinkPerCore
		word := ""
		switch {
		case judged && q.target > 0:
			word = v.check(fmt.Sprintf("nexmark %s %.0f K events/s per core >= %.0f× Flink's %.1f K", q.name, perCore/1e3, q.target, q.flinkPerCore/1e3), ratio >= q.target)
		case judged:
			word = "(no target)"
		}
		fmt.Printf("%-4s %9.0f K %8.2fs %11.2f %10d %10.0f K %10.1f K %6.1f×  %s\n", q.name, rate/1e3, secs, cpu/secs,
			median(pick(rs, func(r nexmarkRun) int { return r.checkpoints })), perCore/1e3, q.flinkPerCore/1e3, ratio, word)
		if judged && q.name == "q5" {
			goal := "goal (above 1 M events/s on the 2 cores) not met"
			if rate >= 1e6 {
				goal = "goal (above 1 M events/s on the 2 cores) met"
			}
			fmt.Printf("     %s\n", goal)
		}
	}
	return nil
}

// nexmarkRun runs a job to its end, with the CPU time the cluster used and the checkpoints it
// completed.
func (c *cluster) nexmarkRun(path string) (nexmarkRun, error) {
	before, err := c.cpuSeconds()
	if err != nil {
		return nexmarkRun{}, err
	}
	st, secs, err := c.runToEnd(path)
	if err != nil {
		return nexmarkRun{}, err
	}
	after, err := c.cpuSeconds()
	if err != nil {
		return nexmarkRun{}, err
	}
	cps, err := c.checkpoints(st.ID)
	if err != nil {
		return nexmarkRun{}, err
	}
	done := 0
	for _, cp := range cps {
		if cp.Status == "COMPLETED" {
			done++
		}
	}
	return nexmarkRun{secs: secs, cpu: after - before, checkpoints: done}, nil
}

func pick[T any, R any](xs []T, f func(T) R) []R {
	out := make([]R, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}
