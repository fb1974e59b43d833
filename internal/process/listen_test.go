package process

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/goflink/goflink/config"
)

// Without internal TLS a process binds loopback unless an address is given (issue 16 F2: every
// port was bound to every interface, unauthenticated).
func TestListenAddr(t *testing.T) {
	plain, secured := config.New(), config.New()
	if err := secured.Set(config.SSLInternalEnabled, "true"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		settings *config.Config
		given    string
		want     string
	}{
		{plain, "", "127.0.0.1:6123"},
		{secured, "", ":6123"},
		{plain, ":7000", ":7000"},
		{plain, "0.0.0.0:7000", "0.0.0.0:7000"},
		{secured, "127.0.0.1:7000", "127.0.0.1:7000"},
	} {
		if got := ListenAddr(tc.settings, tc.given, 6123); got != tc.want {
			t.Errorf("ListenAddr(internal TLS %v, %q) = %q, want %q", tc.settings.Bool(config.SSLInternalEnabled), tc.given, got, tc.want)
		}
	}
}

// ListenPorts takes the first free port of a range, reports taken ports as ErrPortsTaken, and
// refuses a setting that is not a port or range, naming the key.
func TestListenPorts(t *testing.T) {
	first, err := ListenPorts("127.0.0.1", "0", config.MetricsPort)
	if err != nil {
		t.Fatalf("port 0: %v", err)
	}
	defer first.Close()
	_, port, _ := net.SplitHostPort(first.Addr().String())
	p, _ := strconv.Atoi(port)

	if _, err := ListenPorts("127.0.0.1", port, config.MetricsPort); !errors.Is(err, ErrPortsTaken) {
		t.Fatalf("a taken port: %v, want ErrPortsTaken", err)
	}
	// A range whose first port is taken yields a later one (or none is free: ErrPortsTaken).
	next, err := ListenPorts("127.0.0.1", fmt.Sprintf("%d-%d", p, p+20), config.MetricsPort)
	switch {
	case errors.Is(err, ErrPortsTaken):
	case err != nil:
		t.Fatalf("range: %v", err)
	default:
		if next.Addr().String() == first.Addr().String() {
			t.Fatalf("range took the taken port %s", next.Addr())
		}
		next.Close()
	}
	for _, bad := range []string{"", "abc", "-1", "70000", "10-5", "0-5", "9250-", "1-5000"} {
		_, err := ListenPorts("127.0.0.1", bad, config.MetricsPort)
		if err == nil || errors.Is(err, ErrPortsTaken) || !strings.Contains(err.Error(), config.MetricsPort) {
			t.Errorf("ListenPorts(%q) = %v, want an error naming %s", bad, err, config.MetricsPort)
		}
	}
}
