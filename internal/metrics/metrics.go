// Package metrics serves a process's Prometheus metrics under Flink's names
// (flink_jobmanager_…, flink_taskmanager_job_task_…), on the port of
// metrics.reporter.prom.port, through the process's TLS and client authorization.
package metrics

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goflink/goflink/internal/security"
)

// Serve serves the Go runtime's, the process's and the given collectors' series at /metrics
// on lis (which it owns: Close closes it).
func Serve(lis net.Listener, sec *security.Security, log *slog.Logger, cs ...prometheus.Collector) (*security.HTTPService, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			lis.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", sec.RequireClient(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})))
	return sec.StartHTTP(lis, mux, log, "Prometheus metrics", "anyone who reaches it can read job names and figures"), nil
}

// Gauge is one gauge sample of desc (Flink's Prometheus reporter exports counters as gauges
// too); it skips a sample whose labels do not fit desc rather than failing a scrape.
func Gauge(ch chan<- prometheus.Metric, desc *prometheus.Desc, v float64, labels ...string) {
	if m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, labels...); err == nil {
		ch <- m
	}
}
