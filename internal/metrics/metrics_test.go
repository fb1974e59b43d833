package metrics

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// gaugeCollector exports one gauge, and one sample whose labels do not fit its description.
type gaugeCollector struct{ desc *prometheus.Desc }

func (c gaugeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	Gauge(ch, c.desc, 42, "a")
	Gauge(ch, c.desc, 7, "a", "surplus") // skipped, not a failed scrape
}

// Serve exports the Go runtime's and the given collectors' series at /metrics only, and Close
// stops it and its goroutine.
func TestServe(t *testing.T) {
	defer goleak.VerifyNone(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	desc := prometheus.NewDesc("flink_test_value", "A test value.", []string{"l"}, nil)
	s, err := Serve(lis, nil, slog.New(slog.DiscardHandler), gaugeCollector{desc})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `flink_test_value{l="a"} 42`) || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	other, err := client.Get("http://" + s.Addr() + "/other")
	if err != nil {
		t.Fatal(err)
	}
	other.Body.Close()
	if other.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %s, want 404", other.Status)
	}
	// A second collector with the same series is a registration error, and the listener is closed.
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Serve(lis2, nil, slog.New(slog.DiscardHandler), gaugeCollector{desc}, gaugeCollector{desc}); err == nil {
		t.Error("Serve with a duplicate collector succeeded")
	}
	if _, err := lis2.Accept(); err == nil {
		t.Error("the refused server's listener is still open")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := client.Get("http://" + s.Addr() + "/metrics"); err == nil {
		t.Error("served after Close")
	}
}
