package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/state"
)

// durationTargets are the p50 targets for 10 thousand keys.
var durationTargets = map[string]time.Duration{"hashmap": 10 * time.Millisecond, "bbolt": 20 * time.Millisecond}

const durationTargetKeys = 10_000

// cpDurations is what one checkpoint-duration job measured.
type cpDurations struct {
	durations []time.Duration // duration_ms of the completed checkpoints counted
	alignment []time.Duration
	sizes     []int64
	failed    int           // counted checkpoint failures after the state was full
	fill      time.Duration // job RUNNING until the state held every key
	timedOut  bool
}

// durations measures checkpoint durations end to end in a real job for each key count and
// backend, next to the in-process snapshot cost of the same state (state.MeasureSnapshot).
func durations(c *cluster, o options, v *verdicts) error {
	var keyCounts []int
	for _, s := range strings.Split(o.cpdKeys, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 1 {
			return fmt.Errorf("-duration-keys: bad key count %q", s)
		}
		keyCounts = append(keyCounts, k)
	}
	cpDir := filepath.Join(c.dir, "checkpoints")
	snapDir, err := os.MkdirTemp(c.dir, "snapshots-")
	if err != nil {
		return err
	}
	fmt.Printf("\n== checkpoint duration ==\n")
	fmt.Printf("job: sequence from 0, unbounded, %d records/s -> key-by value %% K -> count -> discard, parallelism 2, 2 TaskManagers;\n", o.cpdRate)
	fmt.Printf("EXACTLY_ONCE, checkpoint dir %s (local disk); counted: the checkpoints triggered after the state held all K keys\n", cpDir)
	fmt.Printf("duration = duration_ms of flinkctl checkpoints (trigger -> completion on the JobManager, 1 ms resolution); p99 by nearest rank\n")
	fmt.Printf("component: state.MeasureSnapshot(backend, K, dir) in this process, one backend with all K keys (the job splits them over 2 subtasks),\n")
	fmt.Printf("median of %d runs (%d from %s keys on); K=1 shows the fixed cost of a checkpoint (barriers, acknowledgements, fsyncs, metadata)\n", o.snapRuns, o.snapLargeRuns, keysText(o.cpdLargeFrom))
	for _, k := range keyCounts {
		interval, count, snapRuns := o.cpdSmallInterval, o.cpdSmallCount, o.snapRuns
		if k >= o.cpdLargeFrom {
			interval, count, snapRuns = o.cpdLargeInterval, o.cpdLargeCount, o.snapLargeRuns
		}
		for _, backend := range []string{"hashmap", "bbolt"} {
			fmt.Printf("\n  K=%s %s, %s, checkpoint every %s, %d checkpoints:\n", keysText(k), plural(k, "key"), backend, durText(interval), count)
			r, err := measureCheckpoints(c, o, k, backend, interval, count, cpDir)
			if err != nil {
				return fmt.Errorf("checkpoint duration, %s keys, %s: %w", keysText(k), backend, err)
			}
			note := ""
			if r.timedOut {
				note = fmt.Sprintf(" (only %d within -duration-timeout %v)", len(r.durations), o.cpdTimeout)
			}
			if r.failed > 0 {
				note += fmt.Sprintf(" (%d failed)", r.failed)
			}
			p50, p99 := percentile(r.durations, 0.50), percentile(r.durations, 0.99)
			fmt.Printf("    end to end:  p50 %4d ms  p99 %4d ms  max %4d ms  over %d checkpoints%s; alignment p50 %d ms; state size %s (median); state filled %.1f s after start\n",
				p50.Milliseconds(), p99.Milliseconds(), percentile(r.durations, 1).Milliseconds(), len(r.durations), note,
				percentile(r.alignment, 0.5).Milliseconds(), bytesText(median(r.sizes)), r.fill.Seconds())
			syncD, total, size, err := snapshotCost(backend, k, snapDir, snapRuns)
			if err != nil {
				return fmt.Errorf("state.MeasureSnapshot(%s, %d): %w", backend, k, err)
			}
			fmt.Printf("    in-process:  sync %s, total %s (sync + write + fsync), %s\n", ms(syncD), ms(total), bytesText(size))
			if target, ok := durationTargets[backend]; ok && k == durationTargetKeys {
				fig := fmt.Sprintf("checkpoint p50 %s keys %s: %d ms < %d ms", keysText(k), backend, p50.Milliseconds(), target.Milliseconds())
				fmt.Printf("    target p50 < %s: %s\n", durText(target), v.check(fig, len(r.durations) > 0 && p50 < target))
			} else {
				fmt.Printf("    target: none in the issue (reported)\n")
			}
		}
	}
	return nil
}

// measureCheckpoints runs the keyed count job until count checkpoints completed after the
// state held every key, then cancels it.
func measureCheckpoints(c *cluster, o options, keys int, backend string, interval time.Duration, count int, cpDir string) (r cpDurations, err error) {
	const parallelism = 2
	cfg := checkpointConfig(fmt.Sprintf("%dms", interval.Milliseconds()), cpDir, "state.backend.type", backend)
	spec := fmt.Sprintf(`name: bench-checkpoint-%s-%s
parallelism: %d
%soperators:
  - {name: numbers, type: sequence, from: 0, rate: %d}
  - {name: by-key, type: key-by, key: "value %% %d"}
  - {name: counts, type: count}
  - {name: sink, type: discard}
`, keysText(keys), backend, parallelism, cfg, o.cpdRate, keys)
	id, err := c.startJob(fmt.Sprintf("duration-%d-%s", keys, backend), spec, 100*time.Millisecond)
	defer c.cancelAtReturn(id, &err)
	if err != nil {
		return r, err
	}
	start := time.Now()
	deadline := start.Add(o.cpdTimeout)

	// Subtask i of p emits i, i+p, i+2p, …: once every subtask emitted K/gcd(p,K) values, every
	// residue mod K was emitted; the state holds all keys once the keyed tasks received as many
	// records as the sources had emitted then.
	perSubtask := int64(keys / gcd(parallelism, keys))
	var emitted int64 = -1
	for {
		st, err := c.Status(context.Background(), id)
		if err != nil {
			return r, err
		}
		if ended(st.Status) {
			return r, fmt.Errorf("job %s ended %s", id, st.Status)
		}
		var srcMin, srcSum, keyedIn int64 = math.MaxInt64, 0, 0
		for _, t := range st.Tasks {
			switch {
			case strings.HasPrefix(t.Operator, "numbers"):
				srcMin = min(srcMin, t.RecordsOut)
				srcSum += t.RecordsOut
			case strings.Contains(t.Operator, "counts"):
				keyedIn += t.RecordsIn
			}
		}
		if emitted < 0 && srcMin != math.MaxInt64 && srcMin >= perSubtask {
			emitted = srcSum
		}
		if emitted >= 0 && keyedIn >= emitted {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("the state did not fill within %v (sources emitted %d, keyed tasks received %d)", o.cpdTimeout, srcSum, keyedIn)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.fill = time.Since(start)
	cps, err := c.checkpoints(id)
	if err != nil {
		return r, err
	}
	var base int64 // checkpoints up to base may have been triggered before the state was full
	for _, cp := range cps {
		base = max(base, cp.ID)
	}
	poll := max(interval, 500*time.Millisecond)
	for {
		time.Sleep(poll)
		cps, err := c.checkpoints(id)
		if err != nil {
			return r, err
		}
		r.durations, r.alignment, r.sizes, r.failed = nil, nil, nil, 0
		for _, cp := range cps { // newest first
			if cp.ID <= base {
				continue
			}
			switch cp.Status {
			case "COMPLETED":
				r.durations = append(r.durations, time.Duration(cp.DurationMs)*time.Millisecond)
				r.alignment = append(r.alignment, time.Duration(cp.AlignmentMs)*time.Millisecond)
				r.sizes = append(r.sizes, cp.StateSizeBytes)
			case "FAILED":
				r.failed++
			}
		}
		if len(r.durations) >= count {
			// keep the oldest count ones (the list is newest first)
			n := len(r.durations)
			r.durations, r.alignment, r.sizes = r.durations[n-count:], r.alignment[n-count:], r.sizes[n-count:]
			return r, nil
		}
		if time.Now().After(deadline) {
			r.timedOut = true
			return r, nil
		}
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// snapshotCost is the median of runs in-process snapshots (state.MeasureSnapshot).
func snapshotCost(backend string, keys int, dir string, runs int) (syncD, total time.Duration, size int64, err error) {
	var syncs, totals []time.Duration
	for range max(runs, 1) {
		s, t, sz, err := state.MeasureSnapshot(backend, keys, dir)
		if err != nil {
			return 0, 0, 0, err
		}
		syncs, totals, size = append(syncs, s), append(totals, t), sz
		runtime.GC()
	}
	return median(syncs), median(totals), size, nil
}
