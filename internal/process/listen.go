package process

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

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

// ListenPorts listens on host at the first free port of spec: a port ("9249"), a range
// ("9250-9260"), or "0" for any free one. key names the setting spec came from, for errors.
func ListenPorts(host, spec, key string) (net.Listener, error) {
	lo, hi, err := parsePorts(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	var errs []error
	for p := lo; p <= hi; p++ {
		lis, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return lis, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%s: %w in %s on %q: %w", key, ErrPortsTaken, spec, host, errors.Join(errs...))
}

// ErrPortsTaken is ListenPorts' error when no port of the setting could be bound (as opposed
// to a setting that is not a port or range).
var ErrPortsTaken = errors.New("no free port")

// parsePorts parses "N" or "LO-HI".
func parsePorts(spec string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(spec), "-")
	if lo, err = parsePort(a); err != nil {
		return 0, 0, fmt.Errorf("%q: %w", spec, err)
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = parsePort(b); err != nil {
		return 0, 0, fmt.Errorf("%q: %w", spec, err)
	}
	if lo == 0 || hi < lo || hi-lo > maxPortRange {
		return 0, 0, fmt.Errorf("%q is not a range lo-hi of at most %d ports above 0", spec, maxPortRange+1)
	}
	return lo, hi, nil
}

// maxPortRange bounds how many ports a range may try.
const maxPortRange = 1000

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("%q is not a port (0-65535)", s)
	}
	return p, nil
}

// HTTPListener is a process's HTTP listener named name ("metrics", "rest"): the socket the
// parent passed under that name, else one bound on host at the first free port of the setting
// key (def when unset).
func HTTPListener(env Env, name, host, key, def string) (net.Listener, error) {
	if lis := env.Sockets[name]; lis != nil {
		return lis, nil
	}
	spec := env.Settings.String(key)
	if spec == "" {
		spec = def
	}
	return ListenPorts(host, spec, key)
}

// RESTListener is HTTPListener for a JobManager's dashboard (rest.port) on rest.bind-address,
// by default the host of its RPC address rpcAddr. Ports all taken are logged and the
// JobManager runs without its dashboard, like MetricsListener.
func RESTListener(env Env, rpcAddr string) (net.Listener, error) {
	host := env.Settings.String(config.RestBindAddress)
	if host == "" && env.Sockets["rest"] == nil {
		var err error
		if host, _, err = net.SplitHostPort(rpcAddr); err != nil {
			return nil, fmt.Errorf("rest: rpc address %q: %w", rpcAddr, err)
		}
	}
	lis, err := HTTPListener(env, "rest", host, config.RestPort, "")
	if errors.Is(err, ErrPortsTaken) {
		env.Logger.Error("running without the dashboard", "err", err)
		return nil, nil
	}
	return lis, err
}

// MetricsListener is HTTPListener for the Prometheus metrics of a process whose RPC address is
// rpcAddr: on its host, at metrics.reporter.prom.port (def when unset). As in Flink, a process
// whose metrics ports are all taken runs without metrics (logged); a setting that is not a
// port or range is an error.
func MetricsListener(env Env, rpcAddr, def string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(rpcAddr)
	if err != nil && env.Sockets["metrics"] == nil {
		return nil, fmt.Errorf("metrics: rpc address %q: %w", rpcAddr, err)
	}
	lis, err := HTTPListener(env, "metrics", host, config.MetricsPort, def)
	if errors.Is(err, ErrPortsTaken) {
		env.Logger.Error("running without Prometheus metrics", "err", err)
		return nil, nil
	}
	return lis, err
}
