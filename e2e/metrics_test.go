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

// The metrics ports deploy/docker-compose.yml publishes on the host's loopback.
var (
	jmMetricsAddrs = []string{"127.0.0.1:9249", "127.0.0.1:9259", "127.0.0.1:9269"}
	tmMetricsAddrs = []string{"127.0.0.1:9250", "127.0.0.1:9260", "127.0.0.1:9270"}
)

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
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
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
