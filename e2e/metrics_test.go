//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The metrics and dashboard ports deploy/docker-compose.yml publishes on the host's loopback.
var (
	jmMetricsAddrs = []string{"127.0.0.1:9249", "127.0.0.1:9259", "127.0.0.1:9269"}
	tmMetricsAddrs = []string{"127.0.0.1:9250", "127.0.0.1:9260", "127.0.0.1:9270"}
	jmRESTAddrs    = []string{"127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"}
)

// checkDashboard reads every JobManager's dashboard API from the host over HTTPS: without the
// token it is refused, with it each JobManager (followers ask the leader) lists the same jobs,
// and the page is served.
func (e *e2e) checkDashboard(jobID string) {
	e.t.Helper()
	pem, err := os.ReadFile(e.caFile)
	if err != nil {
		e.t.Fatalf("dashboard: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	if status, _, err := fetch(client, "https://"+jmRESTAddrs[0]+"/jobs/overview", ""); err != nil || status != http.StatusUnauthorized {
		e.t.Errorf("dashboard API without the token: status %d, %v; want %d", status, err, http.StatusUnauthorized)
	}
	for _, addr := range jmRESTAddrs {
		status, body, err := fetch(client, "https://"+addr+"/jobs/overview", e.token)
		if err != nil || status != http.StatusOK || !strings.Contains(body, jobID) {
			e.t.Errorf("dashboard API of %s: status %d, %v, want the job %s in %s", addr, status, err, jobID, body)
		}
		if status, body, err := fetch(client, "https://"+addr+"/", ""); err != nil || status != http.StatusOK || !strings.Contains(body, "app.js") {
			e.t.Errorf("dashboard page of %s: status %d, %v", addr, status, err)
		}
	}
	e.logf("dashboard: every JobManager's API lists the job over HTTPS with the token, none without; the page is served")
}

// checkMetrics scrapes the published metrics ports from the host the way
// deploy/prometheus/prometheus.yml has Prometheus do it (HTTPS with the cluster's CA, the
// token as a bearer token): a scrape without the token is refused, the leader JobManager's
// metrics count the three TaskManagers, and every TaskManager's answer with its slots.
func (e *e2e) checkMetrics() {
	e.t.Helper()
	pem, err := os.ReadFile(e.caFile)
	if err != nil {
		e.t.Fatalf("metrics: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		e.t.Fatalf("metrics: no certificate in %s", e.caFile)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()

	if status, _, err := scrape(client, jmMetricsAddrs[0], ""); err != nil || status != http.StatusUnauthorized {
		e.t.Errorf("metrics of %s without the token: status %d, %v; want %d", jmMetricsAddrs[0], status, err, http.StatusUnauthorized)
	}
	const tms = "flink_jobmanager_numRegisteredTaskManagers"
	took := e.waitFor("the leader's metrics to count 3 TaskManagers", time.Minute, func() error {
		var seen []string
		for _, addr := range jmMetricsAddrs {
			status, body, err := scrape(client, addr, e.token)
			if err != nil {
				return err
			}
			if status != http.StatusOK {
				return fmt.Errorf("metrics of %s: status %d", addr, status)
			}
			if v, ok := gauge(body, tms); ok {
				if v == 3 {
					return nil
				}
				seen = append(seen, fmt.Sprintf("%s: %v", addr, v))
			}
		}
		return fmt.Errorf("%s 3 at none of %v (found %v)", tms, jmMetricsAddrs, seen)
	})
	for _, addr := range tmMetricsAddrs {
		status, body, err := scrape(client, addr, e.token)
		if err != nil || status != http.StatusOK || !strings.Contains(body, "flink_taskmanager_Status_taskSlotsTotal{") {
			e.t.Errorf("metrics of %s: status %d, %v; want 200 with flink_taskmanager_Status_taskSlotsTotal:\n%.500s", addr, status, err, body)
		}
	}
	e.logf("metrics: the leader counts 3 TaskManagers (%.1fs), every published metrics port answers over HTTPS with the token, none without", took.Seconds())
}

// scrape GETs https://addr/metrics, with token as a bearer token unless it is empty, and
// returns the status and body.
func scrape(client *http.Client, addr, token string) (int, string, error) {
	return fetch(client, "https://"+addr+"/metrics", token)
}

// fetch GETs url with the token (when set) and returns the status and body.
func fetch(client *http.Client, url, token string) (int, string, error) {
	addr := url
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("scrape %s: read the body: %w", addr, err)
	}
	return resp.StatusCode, string(body), nil
}

// gauge is the value of the label-less series name in a Prometheus text exposition.
func gauge(body, name string) (float64, bool) {
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
