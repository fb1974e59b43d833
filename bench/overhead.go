package main

import (
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// overheadVariant is one checkpoint setting of the overhead comparison.
type overheadVariant struct {
	name      string
	interval  string  // execution.checkpointing.interval; "" = checkpointing off
	unaligned bool    // execution.checkpointing.unaligned (aligned-checkpoint-timeout 0)
	target    float64 // least throughput ratio to "off"; 0 = none (the reference, or shown only)

	rates     []float64
	cpus      []float64 // the TaskManagers' CPU seconds per record
	cores     []float64 // the TaskManagers' CPU seconds per second of the run
	jmCPU     []float64 // the JobManager's CPU seconds per second of the run
	completed []int
	alignMs   []float64 // alignment of each completed checkpoint, over all runs
	failed    int       // counted failures (ID > 0), over all runs
	skipped   int       // triggers that could not start a checkpoint (ID 0), over all runs
	reasons   map[string]int
}

// overhead runs the throughput job with checkpointing off, every 1 s and every 100 ms, the
// variants interleaved round by round (rotating which goes first), and compares the medians.
func overhead(c *cluster, o options, v *verdicts) error {
	cpDir := filepath.Join(c.dir, "checkpoints")
	variants := []*overheadVariant{
		{name: "off"},
		{name: "1 s", interval: "1s", target: 0.99, reasons: map[string]int{}},
		{name: "100 ms", interval: "100ms", target: 0.95, reasons: map[string]int{}},
		// Shown, not judged: at full speed nothing waits long for alignment, and an unaligned
		// checkpoint persists the buffers in flight (what it is for is backpressure).
		{name: "100 ms UC", interval: "100ms", unaligned: true, reasons: map[string]int{}},
	}
	fmt.Printf("\n== checkpoint overhead ==\n")
	n, err := overheadRecords(c, o)
	if err != nil {
		return err
	}
	fmt.Printf("the throughput job (sequence 1..%d -> key-by value %% %d -> sum -> discard, parallelism 2, 2 TaskManagers)\n", n, o.keys)
	fmt.Printf("checkpoints: execution.checkpointing.mode EXACTLY_ONCE, state.backend.type hashmap, dir %s (local disk)\n", cpDir)
	fmt.Printf("variants interval off / 1 s / 100 ms aligned / 100 ms unaligned (UC: execution.checkpointing.unaligned, aligned-checkpoint-timeout 0), %d runs each, interleaved round by round with rotating order; medians compared\n\n", o.ovhRuns)
	specs := make([]string, len(variants))
	for i, vr := range variants {
		cfg := jobConfig("state.backend.type", "hashmap")
		if vr.interval != "" {
			extra := []string{"state.backend.type", "hashmap"}
			if vr.unaligned {
				extra = append(extra, "execution.checkpointing.unaligned", "true")
			}
			cfg = checkpointConfig(vr.interval, cpDir, extra...)
		}
		p, err := c.writeSpec(fmt.Sprintf("overhead-%d", i), keyedSumSpec("bench-keyed-sum-cp-"+strings.ReplaceAll(vr.name, " ", ""), n, o.keys, cfg))
		if err != nil {
			return err
		}
		specs[i] = p
	}
	var jmProf []byte // the JobManager's CPU profile during the last 100 ms run (-profile)
	for r := range o.ovhRuns {
		var parts []string
		for j := range variants {
			i := (r + j) % len(variants)
			vr := variants[i]
			jm0, err := cpuSeconds(c.JMs[0])
			if err != nil {
				return err
			}
			var prof []byte
			var profErr error
			var fetched sync.WaitGroup
			profiled := o.profile && r == o.ovhRuns-1 && vr.name == "100 ms"
			if profiled {
				// As long as the earlier runs of this variant took, less the warm-up.
				d := time.Second
				if len(vr.rates) > 0 {
					d = max(d, time.Duration(float64(n)/median(vr.rates)*float64(time.Second))-time.Second)
				}
				fetched.Go(func() { prof, profErr = fetchProfile(c.JMs[0].DebugAddr, d) })
			}
			st, secs, cpu, err := c.runMeasured(specs[i], n)
			if err != nil {
				return fmt.Errorf("overhead, interval %s: %w", vr.name, err)
			}
			fetched.Wait()
			if profiled {
				if profErr != nil {
					return profErr
				}
				jmProf = prof
			}
			jm1, err := cpuSeconds(c.JMs[0])
			if err != nil {
				return err
			}
			rate := float64(n) / secs
			vr.rates = append(vr.rates, rate)
			vr.cpus = append(vr.cpus, cpu)
			vr.cores = append(vr.cores, cpu*float64(n)/secs)
			vr.jmCPU = append(vr.jmCPU, (jm1-jm0)/secs)
			part := fmt.Sprintf("%s %.2f M/s", vr.name, rate/1e6)
			if vr.interval != "" {
				cps, err := c.checkpoints(st.ID)
				if err != nil {
					return err
				}
				var done, failed, skipped int
				for _, cp := range cps {
					switch {
					case cp.Status == "COMPLETED":
						done++
						vr.alignMs = append(vr.alignMs, float64(cp.AlignmentMs))
					case cp.Status == "FAILED" && cp.ID == 0:
						skipped++
					case cp.Status == "FAILED":
						failed++
						vr.reasons[strings.TrimSpace(cp.FailureReason+" "+cp.Failure)]++
					}
				}
				vr.completed = append(vr.completed, done)
				vr.failed += failed
				vr.skipped += skipped
				part += fmt.Sprintf(" (%d cp", done)
				if failed > 0 {
					part += fmt.Sprintf(", %d failed", failed)
				}
				part += ")"
			}
			parts = append(parts, part)
		}
		fmt.Printf("  round %d: %s\n", r+1, strings.Join(parts, " | "))
	}
	off := median(variants[0].rates)
	fmt.Printf("\n  %-9s %12s %9s %10s %8s %8s %-28s %13s %-10s %s\n", "interval", "median M/s", "ratio", "CPU ns/rec", "TM cores", "JM cores", "checkpoints completed/run", "align p50/max", "target", "verdict")
	for _, vr := range variants {
		rate := median(vr.rates)
		ratio := rate / off
		cps, align, target, verdict := "–", "–", "–", "(reference)"
		if vr.interval != "" {
			cps = joinInts(vr.completed)
			if vr.failed > 0 {
				cps += fmt.Sprintf(" (%d failed)", vr.failed)
			}
			if vr.skipped > 0 {
				cps += fmt.Sprintf(" (%d not started)", vr.skipped)
			}
			if len(vr.alignMs) > 0 {
				align = fmt.Sprintf("%.0f/%.0f ms", median(vr.alignMs), slices.Max(vr.alignMs))
			}
			verdict = "(shown)"
			if vr.target > 0 {
				target = fmt.Sprintf(">= %.2f", vr.target)
				verdict = v.check(fmt.Sprintf("checkpoints every %s: throughput ratio %.3f >= %.2f", vr.name, ratio, vr.target), ratio >= vr.target)
			}
		}
		fmt.Printf("  %-9s %12.2f %9.3f %10.0f %8.2f %8.3f %-28s %13s %-10s %s\n", vr.name, rate/1e6, ratio, median(vr.cpus)*1e9, median(vr.cores), median(vr.jmCPU), cps, align, target, verdict)
	}
	fmt.Printf("  (TM cores: the TaskManagers' CPU seconds per second of the run, of %d; JM cores: the JobManager's, which shares the machine:\n  its share grows with the checkpoints it completes, each a Raft entry and a metadata file, both synced)\n", runtime.NumCPU())
	// Paired view of the same runs: each round's ratio to that round's "off" run, which
	// cancels drift in the machine's speed between rounds (the verdict uses the medians).
	for _, vr := range variants[1:] {
		var ratios []float64
		var each []string
		for r := range vr.rates {
			ratios = append(ratios, vr.rates[r]/variants[0].rates[r])
			each = append(each, fmt.Sprintf("%.3f", ratios[r]))
		}
		fmt.Printf("  %s: ratio to the same round's off run: median %.3f (each: %s)\n", vr.name, median(ratios), strings.Join(each, ", "))
	}
	for _, vr := range variants {
		for _, reason := range slices.Sorted(maps.Keys(vr.reasons)) {
			fmt.Printf("  failed checkpoints at %s: %d× %s\n", vr.name, vr.reasons[reason], reason)
		}
	}
	if jmProf != nil {
		return printTop(c.dir, "jm-0", "jm-0, checkpoints every 100 ms", jmProf)
	}
	return nil
}

// overheadRecords makes an uncounted warm-up run of the job without checkpoints (the first run
// of a fresh cluster is slower) and returns how many records each run takes: -overhead-n, or
// as many as last -overhead-run-time at the warm-up's rate (in whole millions). A run's fixed
// costs (deploying the job; for a bounded job with checkpoints, its final checkpoint, which
// the tasks wait for before they finish) then weigh a few milliseconds in seconds, not in the
// 1.5 s that 40 M records take on a fast machine.
func overheadRecords(c *cluster, o options) (int64, error) {
	p, err := c.writeSpec("overhead-warm-up", keyedSumSpec("bench-keyed-sum-warm-up", o.ovhN, o.keys, jobConfig("state.backend.type", "hashmap")))
	if err != nil {
		return 0, err
	}
	_, secs, err := c.runToEnd(p)
	if err != nil {
		return 0, fmt.Errorf("overhead, warm-up run: %w", err)
	}
	rate := float64(o.ovhN) / secs
	n := max(o.ovhN, int64(rate*o.ovhRunTime.Seconds()/1e6)*1e6)
	fmt.Printf("warm-up run without checkpoints: %.2f M records/s (not counted); %d records per run (-overhead-n %d, -overhead-run-time %v)\n", rate/1e6, n, o.ovhN, o.ovhRunTime)
	return n, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
