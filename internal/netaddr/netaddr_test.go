package netaddr

import (
	"net"
	"os"
	"testing"
)

func TestAdvertised(t *testing.T) {
	host, _ := os.Hostname()
	bound := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41234}
	for _, tc := range []struct{ listen, want string }{
		{"127.0.0.1:0", "127.0.0.1:41234"},
		{":6123", net.JoinHostPort(host, "41234")},
		{"0.0.0.0:0", net.JoinHostPort(host, "41234")},
		{"tm1:6122", "tm1:41234"},
		{"", "127.0.0.1:41234"}, // a listener bound by someone else
	} {
		if got, err := Advertised(tc.listen, bound); err != nil || got != tc.want {
			t.Errorf("Advertised(%q) = %q, %v; want %q", tc.listen, got, err, tc.want)
		}
	}
	// A wildcard socket bound by someone else (socket activation) advertises the hostname.
	for _, wild := range []net.IP{net.IPv4zero, net.IPv6zero} {
		if got, err := Advertised("", &net.TCPAddr{IP: wild, Port: 6124}); err != nil || got != net.JoinHostPort(host, "6124") {
			t.Errorf("Advertised(\"\", %v) = %q, %v; want %q", wild, got, err, net.JoinHostPort(host, "6124"))
		}
	}
	if _, err := Advertised("no-port", bound); err == nil {
		t.Error("Advertised(no-port) succeeded")
	}
}
