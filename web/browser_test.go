package web_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// chromium finds the headless browser: $CHROMIUM, else chromium or chromium-browser on PATH
// (Debian package chromium; .ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH (Debian package chromium; .ci/run installs it), and $CHROMIUM is not set")
	return ""
}

// TestDashboardInChromium drives the dashboard in a real headless Chromium: the overview shows
// the job, its page draws every operator chain of the graph, a completed checkpoint and, after
// an injected failure, the job's exception; the TaskManager page lists both TaskManagers. It
// saves a screenshot of each page in $GOFLINK_SCREENSHOTS (docs/ holds the latest), else in a
// temporary directory.
func TestDashboardInChromium(t *testing.T) {
	browser := chromium(t)
	shots := os.Getenv("GOFLINK_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	c, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2, REST: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(`name: dashboard-demo
parallelism: 2
config:
  execution.checkpointing.interval: 200ms
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 3
  restart-strategy.fixed-delay.delay: 100ms
operators:
  - {name: numbers, type: sequence, from: 1, rate: 400, parallelism: 1}
  - {name: parity, type: map, fields: {odd: "value % 2", value: "value"}}
  - {name: boom, type: fail, when: "value == 600", attempt: 0}
  - {name: by-odd, type: key-by, key: "odd"}
  - {name: counts, type: count}
  - {name: out, type: discard}
`)})
	if err != nil {
		t.Fatal(err)
	}
	alloc, stopAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1360, 900),
		chromedp.UserDataDir(t.TempDir()))...)
	defer stopAlloc()
	tab, closeTab := chromedp.NewContext(alloc)
	defer closeTab()
	base := "http://" + c.JM.RESTAddr() + "/"

	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name), png, 0o644)
		}
	}
	// poll waits until the JavaScript expression is true.
	poll := func(what, expr string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			if _, err := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(time.Minute))(ctx, tg); err != nil {
				return chromedp.Void{}, fmt.Errorf("%s (%s): %w", what, expr, err)
			}
			return chromedp.Void{}, nil
		}
	}
	err = chromedp.Do(tab,
		chromedp.Navigate(base),
		poll("the overview lists the job", fmt.Sprintf(`!!document.querySelector('a.job-link[data-id=%q]')`, id)),
		poll("the overview shows the JobManager", `document.querySelectorAll('#jobmanagers tr').length === 2`),
		shot("dashboard-overview.png"),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a.job-link[data-id=%q]`, id))),
		poll("the job page draws the graph", `document.querySelectorAll('svg.graph g.vertex').length === 3`),
		poll("a completed checkpoint", `!!document.querySelector('tr.checkpoint[data-status="COMPLETED"]')`),
		poll("the injected failure in the exceptions", `[...document.querySelectorAll('li.exception')].some(e => e.textContent.includes('boom'))`),
		poll("the job running again", `!!document.querySelector('h1 .status.RUNNING')`),
	)
	if err != nil {
		t.Fatal(err)
	}
	vertices, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('svg.graph g.vertex')].map(g => g.dataset.name)`))
	if err != nil {
		t.Fatal(err)
	}
	exception, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`li.exception`)))
	if err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(tab,
		shot("dashboard-job.png"),
		chromedp.Navigate(base+"#/taskmanagers"),
		poll("the TaskManager page lists both", `document.querySelectorAll('tr.taskmanager').length === 2`),
		poll("and the job's five tasks on them", `document.querySelectorAll('tr.tm-task').length === 5`),
		shot("dashboard-taskmanagers.png"),
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"numbers", "parity -> boom", "counts -> out"}
	if strings.Join(vertices, "|") != strings.Join(want, "|") {
		t.Errorf("graph vertices %q, want %q", vertices, want)
	}
	if !strings.Contains(exception, "boom") {
		t.Errorf("exception %q does not name the failing operator", exception)
	}
	t.Logf("screenshots in %s", shots)
}
