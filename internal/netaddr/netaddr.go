// Package netaddr turns listen addresses into addresses other processes can dial.
package netaddr

import (
	"fmt"
	"net"
	"os"
)

// Advertised returns the address to advertise for a listener: the listen host (the hostname
// when it is empty or a wildcard) with the port actually bound (so port 0 works). An empty
// listen address (a listener bound by someone else) advertises the bound address, with the
// hostname for a wildcard.
func Advertised(listen string, bound net.Addr) (string, error) {
	if listen == "" {
		listen = bound.String()
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("advertise address: %w", err)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// IsLoopback reports whether a bound address (host:port) accepts loopback connections only:
// a loopback IP or localhost; an empty host, 0.0.0.0 or :: is every interface.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback() || host == "localhost"
}
