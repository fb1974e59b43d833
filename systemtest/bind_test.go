package systemtest

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
	"github.com/goflink/goflink/internal/security"
)

// listeners returns the local addresses of the sockets listening on port (in this network
// namespace), from /proc/net/tcp and tcp6: what a process really bound, not what it logs.
func listeners(t *testing.T, port int) []net.IP {
	t.Helper()
	var ips []net.IP
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			host, p, ok := strings.Cut(fields[1], ":")
			if n, err := strconv.ParseUint(p, 16, 16); !ok || err != nil || int(n) != port {
				continue
			}
			raw, err := hex.DecodeString(host)
			if err != nil || len(raw)%4 != 0 {
				t.Fatalf("%s: local address %q", file, fields[1])
			}
			// The kernel prints each 32-bit word of the address in host (little-endian) order.
			ip := make(net.IP, len(raw))
			for i := 0; i < len(raw); i += 4 {
				binary.BigEndian.PutUint32(ip[i:], binary.LittleEndian.Uint32(raw[i:]))
			}
			ips = append(ips, ip)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return ips
}

// waitListening polls until something listens on port and returns its addresses.
func waitListening(t *testing.T, p *proccluster.Proc, port int) []net.IP {
	t.Helper()
	var ips []net.IP
	poll.Until(t, time.Minute, fmt.Sprintf("%s to listen on port %d", p.Name, port), func() error {
		select {
		case <-p.Done():
			t.Fatalf("%s exited: %s", p.Name, p.Tail(20))
		default:
		}
		if ips = listeners(t, port); len(ips) == 0 {
			return fmt.Errorf("nothing listens yet")
		}
		return nil
	})
	return ips
}

// Safe defaults (security review F2: every port was bound to every interface without TLS).
// Without internal TLS and without address flags, the JobManager's RPC and Raft ports and the
// TaskManager's port are bound to loopback only; with internal TLS, the same flags bind every
// interface. A process given a network address without TLS says so at start. The default
// ports are Flink's (6122–6124), so this test needs them free.
func TestDefaultBindIsLoopbackWithoutTLS(t *testing.T) {
	skipShort(t)
	for _, port := range []int{6122, 6123, 6124} {
		if ips := listeners(t, port); len(ips) > 0 {
			t.Fatalf("port %d is in use (%v): this test starts processes on the default ports", port, ips)
		}
	}
	loopbackOnly := func(what string, ips []net.IP) {
		t.Helper()
		for _, ip := range ips {
			if !ip.IsLoopback() {
				t.Errorf("%s listens on %v, want loopback only", what, ip)
			}
		}
	}
	jm := startProc(t, "jm-default", "jobmanager", nil, "--node-id", "jm-default", "--data-dir", filepath.Join(t.TempDir(), "jm"))
	loopbackOnly("the JobManager's RPC port", waitListening(t, jm, 6123))
	loopbackOnly("the JobManager's Raft port", waitListening(t, jm, 6124))
	tm := startProc(t, "tm-default", "taskmanager", nil, "--jobmanager", "127.0.0.1:6123", "--data-dir", filepath.Join(t.TempDir(), "tm"))
	loopbackOnly("the TaskManager's port", waitListening(t, tm, 6122))
	if out := logOf(t, jm) + logOf(t, tm); strings.Contains(out, "without security.ssl.internal.enabled") {
		t.Errorf("a loopback-only process warned about its network address:\n%s", out)
	}
	tm.Stop()
	jm.Stop()

	// Given every interface without TLS: it serves there, and warns.
	open := startProc(t, "jm-open", "jobmanager", nil, "--node-id", "jm-open", "--data-dir", filepath.Join(t.TempDir(), "open"),
		"--rpc-addr", ":6123", "--raft-addr", ":6124")
	for _, port := range []int{6123, 6124} {
		for _, ip := range waitListening(t, open, port) {
			if !ip.IsUnspecified() {
				t.Errorf("with --rpc-addr :6123 --raft-addr :6124 port %d listens on %v, want every interface", port, ip)
			}
		}
	}
	poll.Until(t, 30*time.Second, "the warnings of a JobManager on a network address without TLS", func() error {
		out := logOf(t, open)
		for _, want := range []string{"serving Raft without security.ssl.internal.enabled", "serving without security.ssl.internal.enabled", "serving clients without security.auth.token-file"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in its log", want)
			}
		}
		return nil
	})
	open.Stop()

	// With internal TLS and no address flags: every interface.
	certs, err := security.Generate(filepath.Join(t.TempDir(), "certs"), []string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secured := startProc(t, "jm-tls", "jobmanager", nil, "--node-id", "jm-tls", "--data-dir", filepath.Join(t.TempDir(), "tls"),
		"-D", "security.ssl.internal.enabled=true", "-D", "security.ssl.internal.cert="+certs.Cluster,
		"-D", "security.ssl.internal.key="+certs.ClusterKey, "-D", "security.ssl.internal.ca="+certs.CA,
		"-D", "security.auth.token-file="+certs.Token)
	for _, port := range []int{6123, 6124} {
		for _, ip := range waitListening(t, secured, port) {
			if !ip.IsUnspecified() {
				t.Errorf("with internal TLS port %d listens on %v, want every interface", port, ip)
			}
		}
	}
	if out := logOf(t, secured); strings.Contains(out, "without security.") {
		t.Errorf("a JobManager with internal TLS and a token warned:\n%s", out)
	}
}
