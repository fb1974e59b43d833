package main

import (
	"fmt"
	"strings"
	"time"
)

// slidingSpec is the sliding-window job: a sequence 1..n with event time value / perMs ms,
// keys value % keys, a watermark, and per key a window of size slide×ratio sliding by slide
// with a count and a max → discard.
func slidingSpec(name string, n int64, keys, perMs int, slide time.Duration, ratio int) string {
	return fmt.Sprintf(`name: %s
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 1, to: %d}
  - {name: stamped, type: map, fields: {k: "value %% %d", v: "value", ts: "int(value / %d)"}}
  - {name: wm, type: watermark, timestamp: "ts", max-out-of-orderness: 0ms}
  - {name: by-k, type: key-by, key: "k"}
  - {name: windows, type: window, size: %dms, slide: %dms, aggregates: {n: "count()", hi: "max(v)"}}
  - {name: sink, type: discard}
`, name, n, keys, perMs, slide.Milliseconds()*int64(ratio), slide.Milliseconds())
}

// sliding measures the throughput of sliding windows as size/slide grows: panes make a
// record's cost independent of it, where assigning each record to size/slide windows (Flink's
// DataStream windows) slows down in proportion.
func sliding(c *cluster, o options, v *verdicts) error {
	ratios := []int{1, 10, 100}
	slide := 100 * time.Millisecond
	perKeyPerSlide := float64(o.slidingPerMs) * float64(slide.Milliseconds()) / float64(o.slidingKeys)
	fmt.Printf("\n== sliding windows ==\n")
	fmt.Printf("sequence 1..%d, event time value/%d ms, key value %% %d -> window size slide×r, slide %v, count and max -> discard,\n", o.slidingN, o.slidingPerMs, o.slidingKeys, slide)
	fmt.Printf("parallelism 2, 2 TaskManagers, checkpointing off; %.0f records per key and slide; r = 1, 10, 100, %d runs each interleaved, medians\n\n", perKeyPerSlide, o.slidingRuns)
	specs := make([]string, len(ratios))
	for i, r := range ratios {
		p, err := c.writeSpec(fmt.Sprintf("sliding-%d", r), slidingSpec(fmt.Sprintf("bench-sliding-%d", r), o.slidingN, o.slidingKeys, o.slidingPerMs, slide, r))
		if err != nil {
			return err
		}
		specs[i] = p
	}
	rates := make([][]float64, len(ratios))
	for round := range o.slidingRuns {
		var parts []string
		for j := range ratios {
			i := (round + j) % len(ratios)
			_, secs, err := c.runToEnd(specs[i])
			if err != nil {
				return fmt.Errorf("sliding r=%d: %w", ratios[i], err)
			}
			rates[i] = append(rates[i], float64(o.slidingN)/secs)
			parts = append(parts, fmt.Sprintf("r=%d %.2f M/s", ratios[i], float64(o.slidingN)/secs/1e6))
		}
		fmt.Printf("  round %d: %s\n", round+1, strings.Join(parts, ", "))
	}
	fmt.Println()
	for i, r := range ratios {
		fmt.Printf("  size/slide %3d: %6.2f M records/s (ratio to size/slide 1: %.2f)\n", r, median(rates[i])/1e6, median(rates[i])/median(rates[0]))
	}
	ratio := median(rates[2]) / median(rates[0])
	v.check(fmt.Sprintf("sliding windows: throughput at size/slide 100 / at 1 = %.2f >= 0.8", ratio), ratio >= 0.8)
	return nil
}
