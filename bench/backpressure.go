package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// bpVariant is one checkpoint setting of the backpressure comparison.
type bpVariant struct {
	name      string
	unaligned bool

	durations []time.Duration // duration_ms of the completed checkpoints
	inFlight  []int64         // in_flight_bytes of the same
	taken     int             // of them taken unaligned (by some task)
	failed    int             // counted failures (ID > 0)
	pending   int             // still in progress when the run ended
}

// backpressure runs a keyed count behind a sink throttled to a tenth of its source's rate,
// once with aligned and once with unaligned checkpoints, and compares the checkpoint
// durations: aligned barriers queue behind the in-flight buffers the throttle drains slowly,
// unaligned ones overtake them and persist them instead.
func backpressure(c *cluster, o options) error {
	cpDir := filepath.Join(c.dir, "checkpoints")
	throttle := max(o.bpRate/10, 1)
	fmt.Printf("\n== checkpoints under backpressure ==\n")
	fmt.Printf("job: sequence from 0, unbounded, %d records/s -> key-by value %% 1024 -> count -> throttle %d records/s -> discard, parallelism 2, 2 TaskManagers\n", o.bpRate, throttle)
	fmt.Printf("EXACTLY_ONCE, hashmap, a checkpoint every %s (timeout 2 min), dir %s; each variant runs %s, then its checkpoints in progress get up to %s to end\n",
		durText(o.bpInterval), cpDir, durText(o.bpDuration), durText(o.bpGrace))
	fmt.Printf("variants: execution.checkpointing.unaligned false, and true with aligned-checkpoint-timeout 0 (every checkpoint unaligned)\n")
	fmt.Printf("duration = duration_ms of flinkctl checkpoints -o json; p50/p99 by nearest rank; in flight = in_flight_bytes (channel state persisted)\n\n")
	variants := []*bpVariant{{name: "aligned"}, {name: "unaligned", unaligned: true}}
	for _, vr := range variants {
		if err := runBackpressure(c, o, vr, throttle, cpDir); err != nil {
			return fmt.Errorf("backpressure, %s: %w", vr.name, err)
		}
		var sum int64
		for _, b := range vr.inFlight {
			sum += b
		}
		mean := int64(0)
		if n := len(vr.inFlight); n > 0 {
			mean = sum / int64(n)
		}
		fmt.Printf("  %-9s  p50 %6d ms  p99 %6d ms  over %d completed (%d taken unaligned), %d failed, %d in progress at the end; in flight %s on average\n",
			vr.name, percentile(vr.durations, 0.5).Milliseconds(), percentile(vr.durations, 0.99).Milliseconds(),
			len(vr.durations), vr.taken, vr.failed, vr.pending, bytesText(mean))
		if n := len(vr.durations); n > 0 && n <= 10 {
			// Few checkpoints: a percentile says little, the durations themselves more.
			all := make([]string, n)
			for i, d := range vr.durations {
				all[n-1-i] = fmt.Sprint(d.Milliseconds()) // oldest first (the history is newest first)
			}
			fmt.Printf("             durations, oldest first: %s ms\n", strings.Join(all, ", "))
		}
	}
	al, un := variants[0], variants[1]
	if len(al.durations) > 0 && len(un.durations) > 0 && percentile(un.durations, 0.5) > 0 {
		fmt.Printf("  aligned / unaligned: p50 %.1f×, p99 %.1f×\n",
			float64(percentile(al.durations, 0.5))/float64(percentile(un.durations, 0.5)),
			float64(percentile(al.durations, 0.99))/float64(max(percentile(un.durations, 0.99), time.Millisecond)))
	} else {
		fmt.Printf("  aligned / unaligned: not comparable (a variant completed no checkpoint)\n")
	}
	if un.taken == 0 {
		fmt.Printf("  note: no checkpoint of the unaligned variant was taken unaligned (the TaskManagers take them aligned)\n")
	}
	verdict := "not met"
	if len(un.durations) > 0 && percentile(un.durations, 0.99) < 200*time.Millisecond {
		verdict = "met"
	}
	fmt.Printf("  target: unaligned p99 under 200 ms while aligned takes seconds: %s\n", verdict)
	return nil
}

// runBackpressure runs one variant for o.bpDuration, waits up to o.bpGrace for the checkpoints
// then in progress, and collects the history.
func runBackpressure(c *cluster, o options, vr *bpVariant, throttle int, cpDir string) (err error) {
	cfg := checkpointConfig(fmt.Sprintf("%dms", o.bpInterval.Milliseconds()), cpDir, "state.backend.type", "hashmap",
		"execution.checkpointing.timeout", "2min",
		"execution.checkpointing.unaligned", fmt.Sprint(vr.unaligned), "execution.checkpointing.aligned-checkpoint-timeout", "0ms")
	spec := fmt.Sprintf(`name: bench-backpressure-%s
parallelism: 2
%soperators:
  - {name: numbers, type: sequence, from: 0, rate: %d}
  - {name: by-key, type: key-by, key: "value %% 1024"}
  - {name: counts, type: count}
  - {name: slow, type: throttle, rate: %d}
  - {name: sink, type: discard}
`, vr.name, cfg, o.bpRate, throttle)
	id, err := c.startJob("backpressure-"+vr.name, spec, 100*time.Millisecond)
	defer c.cancelAtReturn(id, &err)
	if err != nil {
		return err
	}
	time.Sleep(o.bpDuration) // the run itself: the job under backpressure for this long
	cps, err := c.checkpoints(id)
	if err != nil {
		return err
	}
	var last int64 // the newest checkpoint triggered within the run
	for _, cp := range cps {
		last = max(last, cp.ID)
	}
	deadline := time.Now().Add(o.bpGrace)
	for {
		pending := 0
		for _, cp := range cps {
			if cp.ID > 0 && cp.ID <= last && cp.Status == "IN_PROGRESS" {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
		if cps, err = c.checkpoints(id); err != nil {
			return err
		}
	}
	for _, cp := range cps {
		if cp.ID == 0 || cp.ID > last {
			continue // a trigger that could not start, or one after the run
		}
		switch cp.Status {
		case "COMPLETED":
			vr.durations = append(vr.durations, time.Duration(cp.DurationMs)*time.Millisecond)
			vr.inFlight = append(vr.inFlight, cp.InFlightBytes)
			if cp.Unaligned {
				vr.taken++
			}
		case "FAILED":
			vr.failed++
		default:
			vr.pending++
		}
	}
	return nil
}
