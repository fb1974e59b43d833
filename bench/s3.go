package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/s3test"
)

// s3Section compares object storage with local disk on one cluster (a JobManager and 2
// TaskManager processes, 1 slot each) that has both: checkpoint duration of the keyed count
// job for each -s3-keys count, and the throughput of a bounded job into the exactly-once file
// sink. The S3 server is versitygw on loopback over a directory of this machine's disk, so the
// ratios are the cost of the S3 protocol and of goflink's object-store paths (multipart
// uploads, no rename), not of a network.
func s3Section(o options) (err error) {
	var keyCounts []int
	for _, f := range strings.Split(o.s3Keys, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return fmt.Errorf("-s3-keys: bad key count %q", f)
		}
		keyCounts = append(keyCounts, k)
	}
	srvDir, err := os.MkdirTemp("", "goflink-bench-s3-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(srvDir)
	srv, err := s3test.Run(srvDir)
	if srv != nil {
		defer srv.Stop()
	}
	if err != nil {
		return fmt.Errorf("s3: %w (install it: %s)", err, s3test.InstallCommand)
	}
	const bucket = "bench"
	if err := srv.MakeBucket(context.Background(), bucket); err != nil {
		return err
	}
	var args []string
	for _, kv := range [][2]string{{config.S3Endpoint, srv.Endpoint}, {config.S3AccessKey, s3test.AccessKey},
		{config.S3SecretKey, s3test.SecretKey}, {config.S3PathStyleAccess, "true"}, {config.S3Region, "us-east-1"}} {
		args = append(args, "-D", kv[0]+"="+kv[1])
	}
	c, err := startClusterWith(o.bin, 1, 2, 1, false, args)
	if err != nil {
		return fmt.Errorf("s3: start the cluster: %w", err)
	}
	defer c.finish(&err)

	fmt.Printf("\n== S3 against local disk ==\n")
	fmt.Printf("one cluster, a JobManager and 2 TaskManager processes (1 slot each); S3: versitygw %s on loopback over a directory of this disk\n", s3test.Version)
	fmt.Printf("(the ratios are the S3 protocol's and the object-store paths' cost, not a network's); local: a directory of the same disk\n")
	fmt.Printf("\ncheckpoint duration: the duration section's keyed count job (hashmap), its checkpoints in %s vs s3://%s/checkpoints\n", filepath.Join(c.dir, "checkpoints"), bucket)
	dirs := map[string]string{"local": filepath.Join(c.dir, "checkpoints"), "S3": "s3://" + bucket + "/checkpoints"}
	for _, k := range keyCounts {
		interval, count := o.cpdSmallInterval, o.cpdSmallCount
		if k >= o.cpdLargeFrom {
			interval, count = o.cpdLargeInterval, o.cpdLargeCount
		}
		p50 := map[string]float64{}
		for _, where := range []string{"local", "S3"} {
			r, err := measureCheckpoints(c, o, k, "hashmap", interval, count, dirs[where])
			if err != nil {
				return fmt.Errorf("s3: checkpoint duration, %s keys, %s: %w", keysText(k), where, err)
			}
			note := ""
			if r.failed > 0 {
				note = fmt.Sprintf(" (%d failed)", r.failed)
			}
			d := percentile(r.durations, 0.5)
			p50[where] = float64(d.Milliseconds())
			fmt.Printf("  K=%-9s %-5s p50 %5d ms  p99 %5d ms  over %d checkpoints every %s%s; state %s\n", keysText(k), where,
				d.Milliseconds(), percentile(r.durations, 0.99).Milliseconds(), len(r.durations), durText(interval), note, bytesText(median(r.sizes)))
		}
		fmt.Printf("  K=%-9s ratio S3/local p50: %.2f\n", keysText(k), p50["S3"]/max(p50["local"], 1))
	}

	fmt.Printf("\nfile sink: sequence 1..%d -> map -> file sink (exactly-once, checkpoints every %s in the same place), parallelism 2;\n", o.s3SinkN, durText(o.s3SinkInterval))
	fmt.Printf("local directory vs s3://%s/sink-<n> (a multipart upload per part file), %d runs each interleaved; medians compared\n", bucket, o.s3SinkRuns)
	rates := map[string][]float64{}
	run := 0
	err = interleaved(o.s3SinkRuns, 2, func(i int) (string, error) {
		where := []string{"local", "S3"}[i]
		run++
		out := filepath.Join(c.dir, fmt.Sprintf("sink-%d", run))
		if where == "S3" {
			out = fmt.Sprintf("s3://%s/sink-%d", bucket, run)
		}
		spec, err := c.writeSpec(fmt.Sprintf("s3-sink-%d", run), fmt.Sprintf(`name: bench-file-sink-%s
parallelism: 2
%soperators:
  - {name: numbers, type: sequence, from: 1, to: %d}
  - {name: row, type: map, fields: {value: value, key: "value %% 1024", label: "'record-' + string(value)"}}
  - {name: out, type: file, path: %q}
`, strings.ToLower(where), checkpointConfig(fmt.Sprintf("%dms", o.s3SinkInterval.Milliseconds()), dirs[where]), o.s3SinkN, out))
		if err != nil {
			return "", err
		}
		_, secs, err := c.runToEnd(spec)
		if err != nil {
			return "", fmt.Errorf("s3: file sink to %s: %w", where, err)
		}
		rate := float64(o.s3SinkN) / secs
		rates[where] = append(rates[where], rate)
		if where == "local" {
			os.RemoveAll(out)
		}
		return fmt.Sprintf("%s %.2f M/s", where, rate/1e6), nil
	})
	if err != nil {
		return err
	}
	local, s3 := median(rates["local"]), median(rates["S3"])
	fmt.Printf("\n  %-30s %8.2f M records/s (median of %d)\n", "file sink, local:", local/1e6, len(rates["local"]))
	fmt.Printf("  %-30s %8.2f M records/s (median of %d)\n", "file sink, S3:", s3/1e6, len(rates["S3"]))
	fmt.Printf("  %-30s %8.3f (informational: the issue sets no target)\n", "ratio S3/local:", s3/local)
	return nil
}
