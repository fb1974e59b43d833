// Package metrics serves a process's Prometheus metrics under Flink's names
// (flink_jobmanager_…, flink_taskmanager_job_task_…), on the port of
// metrics.reporter.prom.port, through the process's TLS and client authorization.
package metrics

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goflink/goflink/internal/netaddr"
	"github.com/goflink/goflink/internal/security"
)

// Server serves /metrics until Close.
type Server struct {
	srv  *http.Server
	addr string
	wg   sync.WaitGroup
}

// Serve serves the Go runtime's and process's collectors at /metrics on lis (which it owns:
// Close closes it).
func Serve(lis net.Listener, sec *security.Security, log *slog.Logger, cs ...prometheus.Collector) (*Server, error) {
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
	s := &Server{srv: sec.HTTPServer(mux, log), addr: lis.Addr().String()}
	s.wg.Go(func() {
		if err := security.ServeHTTP(s.srv, lis); err != nil {
			log.Error("metrics server stopped", "err", err)
		}
	})
	log.Info("serving Prometheus metrics", "url", sec.HTTPScheme()+"://"+s.addr+"/metrics")
	if !sec.ClientAuthConfigured() && !netaddr.IsLoopback(s.addr) {
		log.Warn("serving metrics on a network address without client authentication: anyone who reaches it can read job names and figures", "addr", s.addr)
	}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// Close stops serving and waits for the server's goroutine. A nil Server is a no-op.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	err := s.srv.Close()
	s.wg.Wait()
	return err
}

// Gauge is one gauge sample of desc (Flink's Prometheus reporter exports counters as gauges
// too); it skips a sample whose labels do not fit desc rather than failing a scrape.
func Gauge(ch chan<- prometheus.Metric, desc *prometheus.Desc, v float64, labels ...string) {
	if m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, labels...); err == nil {
		ch <- m
	}
}
