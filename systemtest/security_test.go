package systemtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
)

// TestSecuredClusterProcesses: the real binaries with internal mutual TLS, the token and
// client certificates. flinkctl in plaintext, or without the token, is refused; with the CA
// and the token it runs a job to its end. grpcurl with the CA, the client certificate and the
// token lists the job; in plaintext it fails. A TaskManager without the internal certificate
// never registers.
func TestSecuredClusterProcesses(t *testing.T) {
	skipShort(t)
	c := startClusterOf(t, proccluster.Options{TaskManagers: 2, Slots: 2, Secure: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	flinkctl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "flinkctl"), append([]string{"-m", c.Addr}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := flinkctl("list"); err == nil {
		t.Errorf("flinkctl in plaintext succeeded: %s", out)
	}
	out, err := flinkctl("--ca", c.Certs.CA, "list")
	if err == nil || !strings.Contains(out, "Unauthenticated") && !strings.Contains(out, "needs a token") {
		t.Errorf("flinkctl without the token = %v: %s, want refused as unauthenticated", err, out)
	}
	wrong := filepath.Join(t.TempDir(), "wrong-token")
	if err := os.WriteFile(wrong, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := flinkctl("--ca", c.Certs.CA, "--token-file", wrong, "list"); err == nil || !strings.Contains(out, "token is wrong") {
		t.Errorf("flinkctl with a wrong token = %v: %s, want refused", err, out)
	}

	// With the CA and the token (c.flinkctl adds them): a job runs to its end.
	outDir := filepath.Join(t.TempDir(), "out")
	spec := writeSpec(t, fmt.Sprintf(`name: secured
config:
  execution.checkpointing.interval: 100ms
operators:
  - {name: n, type: sequence, from: 1, to: 2000}
  - {name: out, type: file, path: %q}
`, outDir))
	stdout, stderr, code := c.flinkctl("run", "-p", "2", spec)
	if code != 0 {
		t.Fatalf("flinkctl run with the token: exit %d: %s %s", code, stdout, stderr)
	}
	if n := countLines(t, outDir); n != 2000 {
		t.Errorf("%d rows committed, want 2000", n)
	}

	// grpcurl, as a user would call the API.
	grpcurl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "grpcurl"), args...).CombinedOutput()
		return string(out), err
	}
	tok, err := os.ReadFile(c.Certs.Token)
	if err != nil {
		t.Fatal(err)
	}
	addr := c.JobManagerAddr(0)
	out, err = grpcurl("-cacert", c.Certs.CA, "-cert", c.Certs.Client, "-key", c.Certs.ClientKey,
		"-H", "authorization: Bearer "+strings.TrimSpace(string(tok)), addr, "goflink.v1.JobService/ListJobs")
	if err != nil || !strings.Contains(out, "secured") {
		t.Errorf("grpcurl with the CA, client certificate and token = %v: %s", err, out)
	}
	out, err = grpcurl("-cacert", c.Certs.CA, "-cert", c.Certs.Client, "-key", c.Certs.ClientKey, addr, "goflink.v1.JobService/ListJobs")
	if err != nil || !strings.Contains(out, "secured") {
		t.Errorf("grpcurl with the client certificate alone = %v: %s", err, out)
	}
	if out, err := grpcurl("-plaintext", addr, "goflink.v1.JobService/ListJobs"); err == nil {
		t.Errorf("grpcurl in plaintext succeeded: %s", out)
	}

	// The metrics ports of the JobManager and a TaskManager: HTTPS with the cluster's
	// certificate, and the token.
	for _, p := range []*proccluster.Proc{c.JMs[0], c.TMs[0]} {
		checkSecuredMetrics(t, c.Certs.CA, strings.TrimSpace(string(tok)), p)
	}

	// A TaskManager without the internal certificate: its registration fails the handshake,
	// and the cluster keeps its two TaskManagers.
	rogue := startProc(t, "rogue-tm", "taskmanager", nil, "--jobmanager", c.Addr, "--addr", "127.0.0.1:0",
		"--id", "rogue", "--data-dir", filepath.Join(t.TempDir(), "rogue"), "--log-level", "debug")
	poll.Until(t, time.Minute, "the rogue TaskManager's registration to fail", func() error {
		out, _ := rogue.Output()
		if !strings.Contains(out, "no jobmanager accepted the registration") {
			return fmt.Errorf("no failed registration in its log yet")
		}
		return nil
	})
	if err := c.WaitTaskManagers(ctx, []string{"tm-0", "tm-1"}); err != nil {
		t.Errorf("after the rogue TaskManager: %v", err)
	}
}

// countLines counts the committed rows of a file sink directory.
func countLines(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "part-*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), "\n")
	}
	return n
}

// checkSecuredMetrics scrapes p's metrics port of a Secure cluster: plaintext and a scrape
// without the token are refused, one over TLS with the token is served.
func checkSecuredMetrics(t *testing.T, caFile, token string, p *proccluster.Proc) {
	t.Helper()
	if p.MetricsAddr == "" {
		t.Fatalf("%s has no metrics address", p.Name)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	tlsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}}
	url := "https://" + p.MetricsAddr + "/metrics"
	get := func(c *http.Client, url, token string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	if code, _, err := get(&http.Client{Timeout: 10 * time.Second}, "http://"+p.MetricsAddr+"/metrics", token); err == nil && code == http.StatusOK {
		t.Errorf("%s: plaintext scrape served", p.Name)
	}
	if code, _, err := get(tlsClient, url, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("%s: scrape without the token = %d %v, want 401", p.Name, code, err)
	}
	poll.Until(t, time.Minute, p.Name+"'s metrics with the token", func() error {
		code, body, err := get(tlsClient, url, token)
		if err != nil {
			return fmt.Errorf("scrape with the token: %w", err)
		}
		if code != http.StatusOK {
			return fmt.Errorf("scrape with the token = %d, want 200", code)
		}
		if !strings.Contains(body, "flink_") || !strings.Contains(body, "go_goroutines") {
			return fmt.Errorf("no flink_ or go_ series in %d bytes", len(body))
		}
		return nil
	})
}
