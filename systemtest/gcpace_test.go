package systemtest

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
)

// gogcPercent scrapes go_gc_gogc_percent (runtime/metrics /gc/gogc:percent) off a process's
// Prometheus endpoint.
func gogcPercent(p *proccluster.Proc) (float64, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s metrics: %s", p.Name, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_gc_gogc_percent "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s metrics: no go_gc_gogc_percent", p.Name)
}

// TestTaskManagerPacesItsCollector: a TaskManager process raises GOGC above Go's 100 (its
// live heap is a few MiB: the goal becomes the live heap plus 64 MiB), and one started with
// GOGC in its environment keeps that value.
func TestTaskManagerPacesItsCollector(t *testing.T) {
	skipShort(t)
	c := startClusterOf(t, proccluster.Options{TaskManagers: 0, Slots: 1})
	// The one with GOGC first: when the other has paced, this one had as long to do so.
	fixed, err := c.StartTaskManagerEnv("tm-gogc", "GOGC=100")
	if err != nil {
		t.Fatal(err)
	}
	paced := c.startTM("tm-paced")
	var got float64
	poll.Until(t, 30*time.Second, "tm-paced raises GOGC", func() error {
		if got, err = gogcPercent(paced); err != nil {
			return err
		}
		if got <= 100 {
			return fmt.Errorf("go_gc_gogc_percent %v", got)
		}
		return nil
	})
	t.Logf("tm-paced: go_gc_gogc_percent %v", got)
	var fixedGot float64
	poll.Until(t, 30*time.Second, "tm-gogc's metrics", func() error {
		fixedGot, err = gogcPercent(fixed)
		return err
	})
	if fixedGot != 100 {
		t.Fatalf("tm-gogc (GOGC=100 in its environment): go_gc_gogc_percent %v, want 100", fixedGot)
	}
}
