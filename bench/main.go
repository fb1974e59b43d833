// Command bench measures goflink on this machine and prints the figures with their baseline:
// a keyed running sum over a sequence source across two TaskManager processes, against a
// plain single-goroutine Go loop doing the same sums (the COST baseline). Run it with
// `make bench`, which builds the binaries first.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "bin", "directory with jobmanager, taskmanager and flinkctl")
	n := flag.Int64("n", 50_000_000, "records per run")
	keys := flag.Int("keys", 1024, "distinct keys")
	runs := flag.Int("runs", 3, "engine runs (the median is reported)")
	profile := flag.Bool("profile", false, "CPU-profile a TaskManager during the last run and print the top entries")
	flag.Parse()
	if err := run(*bin, *n, *keys, *runs, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(bin string, n int64, keys, runs int, profile bool) error {
	fmt.Printf("goflink bench — %s, GOMAXPROCS=%d, %s\n", cpuModel(), runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Printf("keyed running sum: sequence 1..%d -> key-by value %% %d -> sum -> discard, parallelism 2 over 2 TaskManager processes (1 slot each)\n\n", n, keys)
	c, err := startCluster(bin)
	if err != nil {
		return err
	}
	defer c.stop()

	spec := fmt.Sprintf(`name: bench-keyed-sum
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 1, to: %d}
  - {name: by-key, type: key-by, key: "value %% %d"}
  - {name: total, type: sum, field: value}
  - {name: sink, type: discard}
`, n, keys)
	specPath := filepath.Join(c.dir, "bench.yaml")
	if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
		return err
	}
	var rates []float64
	for i := range runs {
		var prof []byte
		var profErr error
		done := make(chan struct{})
		if profile && i == runs-1 {
			go func() {
				defer close(done)
				prof, profErr = fetchProfile(c.debugAddr, 5*time.Second)
			}()
		} else {
			close(done)
		}
		secs, err := c.runJob(specPath)
		if err != nil {
			return err
		}
		<-done
		rate := float64(n) / secs
		rates = append(rates, rate)
		fmt.Printf("  run %d: %.2fs, %.2f M records/s\n", i+1, secs, rate/1e6)
		if profile && i == runs-1 {
			if profErr != nil {
				return profErr
			}
			if err := printTop(c.dir, prof); err != nil {
				return err
			}
		}
	}
	slices.Sort(rates)
	engine := rates[len(rates)/2]
	base := baseline(n, keys)
	fmt.Printf("\n%-46s %10.2f M records/s (median of %d)\n", "engine, 2 TaskManagers:", engine/1e6, runs)
	fmt.Printf("%-46s %10.2f M records/s\n", "baseline, 1 goroutine, map[int64]int64 sums:", base/1e6)
	fmt.Printf("%-46s %10.3f (COST: the engine uses 2 processes on 2 cores)\n", "ratio engine/baseline:", engine/base)
	fmt.Printf("%-46s %10s\n", "target (issue): >= 3 M/s, goal 10 M/s:", verdict(engine))
	return nil
}

func verdict(rate float64) string {
	switch {
	case rate >= 10e6:
		return "goal met"
	case rate >= 3e6:
		return "target met"
	}
	return "BELOW TARGET"
}

// baseline is the COST comparison: one goroutine, the same keyed running sums.
func baseline(n int64, keys int) float64 {
	best := 0.0
	for range 3 {
		sums := map[int64]int64{}
		k := int64(keys)
		start := time.Now()
		var sink int64
		for v := int64(1); v <= n; v++ {
			key := v % k
			sums[key] += v
			sink ^= sums[key]
		}
		el := time.Since(start).Seconds()
		if sink == 42 {
			fmt.Print("")
		}
		best = max(best, float64(n)/el)
	}
	return best
}

type cluster struct {
	dir       string
	bin       string
	jm        string
	debugAddr string
	procs     []*exec.Cmd
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startCluster(bin string) (*cluster, error) {
	dir, err := os.MkdirTemp("", "goflink-bench-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, bin: bin}
	jm, err1 := freeAddr()
	raft, err2 := freeAddr()
	dbg, err3 := freeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	c.jm, c.debugAddr = jm, dbg
	logf, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		return nil, err
	}
	start := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return err
		}
		c.procs = append(c.procs, cmd)
		return nil
	}
	if err := start("jobmanager", "--node-id", "jm1", "--rpc-addr", jm, "--raft-addr", raft, "--data-dir", filepath.Join(dir, "jm"), "--log-level", "warn"); err != nil {
		return nil, err
	}
	for i := range 2 {
		args := []string{"--jobmanager", jm, "--addr", "127.0.0.1:0", "--slots", "1", "--id", fmt.Sprintf("tm-%d", i), "--log-level", "warn"}
		if i == 0 {
			args = append(args, "--debug-addr", dbg)
		}
		if err := start("taskmanager", args...); err != nil {
			c.stop()
			return nil, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.flinkctl("cluster", "-o", "json")
		var info struct{ TaskManagers []any }
		if err == nil && json.Unmarshal(out, &info) == nil && len(info.TaskManagers) == 2 {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("cluster not ready: %v %s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) flinkctl(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, "flinkctl"), append([]string{"-m", c.jm}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("flinkctl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), nil
}

// runJob runs the job to completion and returns its duration (JobManager start to end time).
func (c *cluster) runJob(spec string) (float64, error) {
	out, err := c.flinkctl("run", spec, "-o", "json")
	if err != nil {
		return 0, err
	}
	var st struct {
		Status    string `json:"status"`
		StartTime string `json:"start_time"`
		EndTime   string `json:"end_time"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, err
	}
	if st.Status != "FINISHED" {
		return 0, fmt.Errorf("bench job ended %s", st.Status)
	}
	s, err1 := time.Parse(time.RFC3339Nano, st.StartTime)
	e, err2 := time.Parse(time.RFC3339Nano, st.EndTime)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return e.Sub(s).Seconds(), nil
}

func (c *cluster) stop() {
	for _, p := range c.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range c.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	os.RemoveAll(c.dir)
}

func fetchProfile(addr string, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	time.Sleep(500 * time.Millisecond) // let the job reach its steady state
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func printTop(dir string, prof []byte) error {
	p := filepath.Join(dir, "tm0.pprof")
	if err := os.WriteFile(p, prof, 0o644); err != nil {
		return err
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", p).CombinedOutput()
	fmt.Printf("\nCPU profile of tm-0 (top 25):\n%s\n", out)
	return err
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			if _, v, ok := strings.Cut(line, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
