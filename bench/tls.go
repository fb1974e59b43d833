package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// tlsThroughputTarget is the least throughput ratio of TLS to plaintext.
const tlsThroughputTarget = 0.85

// tlsVariant is one cluster of the TLS comparison and what was measured on it.
type tlsVariant struct {
	name string
	c    *cluster
	spec string // the throughput job's spec on c

	rates     []float64       // records/s of each throughput run
	durations []time.Duration // duration_ms of the counted checkpoints of every job
	failed    int             // counted checkpoint failures, over all jobs
	short     int             // jobs that timed out before count checkpoints completed
}

// tlsSection runs the same jobs on two clusters side by side, one plaintext and one with
// mutual TLS on every connection between its processes (security.ssl.internal.*: RPCs, the
// data exchange) and the token for flinkctl: the keyed-sum throughput job, and the keyed count
// job of the duration section for checkpoint durations. The variants alternate run by run
// (rotating which goes first), so both see the same machine load.
func tlsSection(o options, v *verdicts) (err error) {
	plain, err := startCluster(o.bin, 1, 2, 1, false)
	if err != nil {
		return fmt.Errorf("tls: start the plaintext cluster: %w", err)
	}
	defer plain.finish(&err)
	secure, err := startCluster(o.bin, 1, 2, 1, true)
	if err != nil {
		return fmt.Errorf("tls: start the TLS cluster: %w", err)
	}
	defer secure.finish(&err)
	variants := []*tlsVariant{{name: "plaintext", c: plain}, {name: "TLS", c: secure}}

	fmt.Printf("\n== TLS ==\n")
	fmt.Printf("two clusters side by side, each a JobManager and 2 TaskManager processes (1 slot each): plaintext, and mutual TLS on every\n")
	fmt.Printf("connection between the processes (security.ssl.internal.*: RPCs and data exchange; certificates from security.Generate)\n")
	fmt.Printf("with the token for flinkctl (security.auth.token-file); the variants alternate run by run with rotating order\n")
	fmt.Printf("\nthroughput: sequence 1..%d -> key-by value %% %d -> sum -> discard, parallelism 2, checkpointing off, %d runs each; medians compared\n\n", o.tlsN, o.keys, o.tlsRuns)
	for _, vr := range variants {
		if vr.spec, err = vr.c.writeSpec("tls-throughput", keyedSumSpec("bench-keyed-sum", o.tlsN, o.keys, "")); err != nil {
			return fmt.Errorf("tls: %s: %w", vr.name, err)
		}
	}
	err = interleaved(o.tlsRuns, len(variants), func(i int) (string, error) {
		vr := variants[i]
		_, secs, err := vr.c.runToEnd(vr.spec)
		if err != nil {
			return "", fmt.Errorf("tls, throughput on the %s cluster: %w", vr.name, err)
		}
		rate := float64(o.tlsN) / secs
		vr.rates = append(vr.rates, rate)
		return fmt.Sprintf("%s %.2f M/s", vr.name, rate/1e6), nil
	})
	if err != nil {
		return err
	}
	plainRate, tlsRate := median(variants[0].rates), median(variants[1].rates)
	ratio := tlsRate / plainRate
	fmt.Printf("\n  %-46s %10.2f M records/s (median of %d)\n", "plaintext:", plainRate/1e6, o.tlsRuns)
	fmt.Printf("  %-46s %10.2f M records/s (median of %d)\n", "TLS:", tlsRate/1e6, o.tlsRuns)
	fmt.Printf("  %-46s %10.3f\n", "ratio TLS/plaintext:", ratio)
	fmt.Printf("  %-46s %10s\n", fmt.Sprintf("target (issue): >= %.2f:", tlsThroughputTarget),
		v.check(fmt.Sprintf("TLS: throughput ratio TLS/plaintext %.3f >= %.2f", ratio, tlsThroughputTarget), ratio >= tlsThroughputTarget))
	var paired []float64
	var each []string
	for r := range variants[1].rates {
		paired = append(paired, variants[1].rates[r]/variants[0].rates[r])
		each = append(each, fmt.Sprintf("%.3f", paired[r]))
	}
	fmt.Printf("  TLS: ratio to the same round's plaintext run: median %.3f (each: %s)\n", median(paired), strings.Join(each, ", "))

	fmt.Printf("\ncheckpoint duration: the duration section's job (sequence from 0, unbounded, %d records/s -> key-by value %% %d -> count -> discard,\n", o.cpdRate, o.tlsCpKeys)
	fmt.Printf("parallelism 2), hashmap, EXACTLY_ONCE every %s, %d jobs per variant counting %d checkpoints each (those triggered after the\n", durText(o.tlsInterval), o.tlsCpJobs, o.tlsCheckpoints)
	fmt.Printf("state held all keys); duration_ms of flinkctl checkpoints, p50/p99 (nearest rank) over the checkpoints of all jobs\n\n")
	err = interleaved(o.tlsCpJobs, len(variants), func(i int) (string, error) {
		vr := variants[i]
		r, err := measureCheckpoints(vr.c, o, o.tlsCpKeys, "hashmap", o.tlsInterval, o.tlsCheckpoints, filepath.Join(vr.c.dir, "checkpoints"))
		if err != nil {
			return "", fmt.Errorf("tls, checkpoint duration on the %s cluster: %w", vr.name, err)
		}
		vr.durations = append(vr.durations, r.durations...)
		vr.failed += r.failed
		note := ""
		if r.timedOut {
			vr.short++
			note = fmt.Sprintf(", only %d within -duration-timeout", len(r.durations))
		}
		if r.failed > 0 {
			note += fmt.Sprintf(", %d failed", r.failed)
		}
		return fmt.Sprintf("%s p50 %d ms p99 %d ms (%d cp%s)", vr.name, percentile(r.durations, 0.5).Milliseconds(),
			percentile(r.durations, 0.99).Milliseconds(), len(r.durations), note), nil
	})
	if err != nil {
		return err
	}
	fmt.Println()
	for _, vr := range variants {
		note := ""
		if vr.failed > 0 {
			note += fmt.Sprintf(" (%d failed)", vr.failed)
		}
		if vr.short > 0 {
			note += fmt.Sprintf(" (%d jobs timed out short)", vr.short)
		}
		fmt.Printf("  %-10s p50 %4d ms  p99 %4d ms  max %4d ms  over %d checkpoints%s\n", vr.name+":",
			percentile(vr.durations, 0.5).Milliseconds(), percentile(vr.durations, 0.99).Milliseconds(),
			percentile(vr.durations, 1).Milliseconds(), len(vr.durations), note)
	}
	fmt.Printf("  target: none in the issue (reported)\n")
	return nil
}

// interleaved runs rounds rounds of the variants 0 … n-1, each round starting one variant
// later than the one before, and prints each round's results (what run returned) on a line.
func interleaved(rounds, n int, run func(i int) (string, error)) error {
	for r := range rounds {
		parts := make([]string, 0, n)
		for j := range n {
			part, err := run((r + j) % n)
			if err != nil {
				return err
			}
			parts = append(parts, part)
		}
		fmt.Printf("  round %d: %s\n", r+1, strings.Join(parts, " | "))
	}
	return nil
}
