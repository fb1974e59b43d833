package process

import (
	"net"
	"strconv"

	"github.com/goflink/goflink/config"
)

// ListenAddr is the address a process listens on: given when its flag names one, else the
// port on every interface with security.ssl.internal.enabled, and on loopback only without
// it. An unsecured process is reachable from the network only when its operator asks for
// that by giving an address (and then it warns at start).
func ListenAddr(settings *config.Config, given string, port int) string {
	if given != "" {
		return given
	}
	if settings.Bool(config.SSLInternalEnabled) {
		return ":" + strconv.Itoa(port)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// ListenHelp describes ListenAddr's default for a flag's usage text.
func ListenHelp(port int) string {
	p := strconv.Itoa(port)
	return "default 127.0.0.1:" + p + ", or :" + p + " (every interface) with security.ssl.internal.enabled"
}
