package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/goflink/goflink/internal/proccluster"
)

// metricsThroughputTarget is the least throughput ratio of scraped to unscraped runs.
const metricsThroughputTarget = 0.98

// scrapeInterval is how often the scraper GETs every process's /metrics.
const scrapeInterval = time.Second

// The series a scrape must contain: one a TaskManager exports for each running task, one the
// leader JobManager always exports.
const (
	taskSeries = "flink_taskmanager_job_task_numRecordsIn"
	jmSeries   = "flink_jobmanager_numRegisteredTaskManagers"
)

// scrapeTarget is one process's metrics endpoint.
type scrapeTarget struct {
	name, url, series string // series: what its scrapes must contain
}

// scrapeTally counts the scrapes of one run of the scraper.
type scrapeTally struct {
	scrapes  int            // GETs sent
	failures []string       // errors and non-200 answers (the first few)
	failed   int            // all of them
	found    map[string]int // scrapes whose body contained the target's series, by target
}

// metricsSection runs the keyed-sum throughput job on one cluster (a JobManager and 2
// TaskManager processes, 1 slot each) with and without a scraper that GETs every process's
// /metrics once a second, alternating run by run with a rotating order. The binaries cannot
// run without their metrics endpoint (metrics.reporter.prom.port has no "off", and the tasks
// meter themselves whether or not anyone reads it), so the variant without scraping is
// "metrics served but never scraped": the difference measured is the cost of being scraped.
func metricsSection(o options, v *verdicts) (err error) {
	c, err := startCluster(o.bin, 1, 2, 1, false)
	if err != nil {
		return fmt.Errorf("metrics: start the cluster: %w", err)
	}
	defer c.finish(&err)
	targets, err := scrapeTargets(c.Cluster)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	fmt.Printf("\n== metrics ==\n")
	fmt.Printf("one cluster, a JobManager and 2 TaskManager processes (1 slot each), every process serving Prometheus metrics on its own socket\n")
	fmt.Printf("(proccluster: Proc.MetricsAddr). Variants: scraped (a goroutine GETs /metrics of the JobManager and both TaskManagers every\n")
	fmt.Printf("%s, reading the whole body) and not scraped. The processes cannot run without metrics (metrics.reporter.prom.port has no\n", durText(scrapeInterval))
	fmt.Printf("\"off\"; the tasks meter themselves either way), so \"not scraped\" is metrics served but never scraped: the ratio is the cost of\n")
	fmt.Printf("the scrapes. The variants alternate run by run with rotating order.\n")
	fmt.Printf("\nthroughput: sequence 1..%d -> key-by value %% %d -> sum -> discard, parallelism 2, checkpointing off, %d runs each; medians compared\n\n", o.metricsN, o.keys, o.metricsRuns)
	spec, err := c.writeSpec("metrics-throughput", keyedSumSpec("bench-keyed-sum", o.metricsN, o.keys, ""))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	names := []string{"not scraped", "scraped"}
	rates := make([][]float64, len(names))
	total := scrapeTally{found: map[string]int{}}
	err = interleaved(o.metricsRuns, len(names), func(i int) (string, error) {
		var stop func() scrapeTally
		if i == 1 {
			stop = startScraper(targets)
		}
		_, secs, err := c.runToEnd(spec)
		note := ""
		if stop != nil {
			t := stop()
			total.add(t)
			note = fmt.Sprintf(" (%d scrapes, %d failed)", t.scrapes, t.failed)
		}
		if err != nil {
			return "", fmt.Errorf("metrics, throughput %s: %w", names[i], err)
		}
		rate := float64(o.metricsN) / secs
		rates[i] = append(rates[i], rate)
		return fmt.Sprintf("%s %.2f M/s%s", names[i], rate/1e6, note), nil
	})
	if err != nil {
		return err
	}

	fmt.Printf("\n  scrapes: %d over all scraped runs, %d failed\n", total.scrapes, total.failed)
	for _, f := range total.failures {
		fmt.Printf("    %s\n", f)
	}
	var missing []string
	for _, t := range targets {
		fmt.Printf("    %-5s %-42s %s in %d scrapes\n", t.name, t.url, t.series, total.found[t.name])
		if total.found[t.name] == 0 {
			missing = append(missing, t.name)
		}
	}
	scrapesOK := total.scrapes > 0 && total.failed == 0 && len(missing) == 0
	v.check("metrics: every scrape 200, each process's held its series", scrapesOK)

	plain, scraped := median(rates[0]), median(rates[1])
	ratio := scraped / plain
	fmt.Printf("\n  %-46s %10.2f M records/s (median of %d)\n", "metrics served, not scraped:", plain/1e6, o.metricsRuns)
	fmt.Printf("  %-46s %10.2f M records/s (median of %d)\n", fmt.Sprintf("scraped every %s:", durText(scrapeInterval)), scraped/1e6, o.metricsRuns)
	fmt.Printf("  %-46s %10.3f\n", "ratio scraped/not scraped:", ratio)
	fmt.Printf("  %-46s %10s\n", fmt.Sprintf("target (issue): >= %.2f:", metricsThroughputTarget),
		v.check(fmt.Sprintf("metrics: throughput ratio scraped/not scraped %.3f >= %.2f", ratio, metricsThroughputTarget), ratio >= metricsThroughputTarget))
	var each []string
	var paired []float64
	for r := range rates[1] {
		paired = append(paired, rates[1][r]/rates[0][r])
		each = append(each, fmt.Sprintf("%.3f", paired[r]))
	}
	fmt.Printf("  scraped: ratio to the same round's unscraped run: median %.3f (each: %s)\n", median(paired), strings.Join(each, ", "))
	if !scrapesOK {
		return fmt.Errorf("metrics: of %d scrapes %d failed, and none of %v held its series", total.scrapes, total.failed, missing)
	}
	return nil
}

// scrapeTargets is the metrics endpoint of every JobManager and TaskManager of c.
func scrapeTargets(c *proccluster.Cluster) ([]scrapeTarget, error) {
	var ts []scrapeTarget
	for _, p := range c.JMs {
		ts = append(ts, scrapeTarget{name: p.Name, series: jmSeries})
	}
	for _, p := range c.TMs {
		ts = append(ts, scrapeTarget{name: p.Name, series: taskSeries})
	}
	for i, p := range append(append([]*proccluster.Proc{}, c.JMs...), c.TMs...) {
		if p.MetricsAddr == "" {
			return nil, fmt.Errorf("%s has no metrics address", p.Name)
		}
		ts[i].url = "http://" + p.MetricsAddr + "/metrics"
	}
	return ts, nil
}

// startScraper scrapes every target at once and then every scrapeInterval until the returned
// stop is called; stop waits for the scraper and returns its tally.
func startScraper(targets []scrapeTarget) (stop func() scrapeTally) {
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Timeout: scrapeInterval}
	tally := scrapeTally{found: map[string]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(scrapeInterval)
		defer tick.Stop()
		for {
			for _, t := range targets {
				tally.record(t, scrape(ctx, client, t))
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() scrapeTally {
		cancel()
		wg.Wait()
		return tally
	}
}

// scrapeResult is one GET of a target: whether its body contained the target's series, or
// why it failed; cut is a scrape cut short because the run ended, which counts as none.
type scrapeResult struct {
	found, cut bool
	err        error
}

// scrape GETs t's /metrics and reads the whole body.
func scrape(ctx context.Context, client *http.Client, t scrapeTarget) scrapeResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return scrapeResult{err: fmt.Errorf("scrape %s: %w", t.name, err)}
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return scrapeResult{cut: true}
		}
		return scrapeResult{err: fmt.Errorf("scrape %s: %w", t.name, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil && ctx.Err() != nil:
		return scrapeResult{cut: true}
	case err != nil:
		return scrapeResult{err: fmt.Errorf("scrape %s: read the body: %w", t.name, err)}
	case resp.StatusCode != http.StatusOK:
		return scrapeResult{err: fmt.Errorf("scrape %s: %s", t.name, resp.Status)}
	}
	return scrapeResult{found: hasSeries(string(body), t.series)}
}

// hasSeries reports whether a Prometheus text exposition holds a sample of the series name
// (with or without labels).
func hasSeries(body, name string) bool {
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			return true
		}
	}
	return false
}

// record counts one scrape of t.
func (s *scrapeTally) record(t scrapeTarget, r scrapeResult) {
	if r.cut {
		return
	}
	s.scrapes++
	if r.err != nil {
		s.failed++
		if len(s.failures) < 5 {
			s.failures = append(s.failures, r.err.Error())
		}
	}
	if r.found {
		s.found[t.name]++
	}
}

// add adds another tally's counts to s.
func (s *scrapeTally) add(o scrapeTally) {
	s.scrapes += o.scrapes
	s.failed += o.failed
	for _, f := range o.failures {
		if len(s.failures) < 5 {
			s.failures = append(s.failures, f)
		}
	}
	for name, n := range o.found {
		s.found[name] += n
	}
}
