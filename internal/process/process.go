// Package process holds what the jobmanager and taskmanager commands share: the --config,
// -D and --log-level flags, and how they become a Config and a logger.
package process

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/netaddr"
	"github.com/goflink/goflink/internal/security"
)

// Flags are the common flags of a goflink process.
type Flags struct {
	ConfigFile string
	Dynamic    []string
	LogLevel   string
	LogFormat  string
	DebugAddr  string
}

// Env is what a process's run function gets from its common flags and its parent.
type Env struct {
	Settings *config.Config // --config, then -D
	Logger   *slog.Logger   // --log-level, --log-format
	// Sockets are the listeners the parent passed by name (see Listeners); a missing one is
	// nil, and the process binds its address flag instead.
	Sockets map[string]net.Listener
}

// Command is the cobra command of a goflink process: it binds the common flags, and runs run
// with what they give (settings, logger and the sockets named, besides "debug") under a
// context that SIGINT or SIGTERM ends, with the debug server when one is asked for. prepare,
// when set, may adjust the settings from the command's own flags first.
func (f *Flags) Command(use, short string, sockets []string, prepare func(cmd *cobra.Command, settings *config.Config) error,
	run func(ctx context.Context, env Env) error) *cobra.Command {
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.NoArgs, SilenceUsage: true, SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := f.Settings()
			if err != nil {
				return err
			}
			if prepare != nil {
				if err := prepare(cmd, settings); err != nil {
					return err
				}
			}
			log, err := f.Logger()
			if err != nil {
				return err
			}
			passed, err := Listeners(append([]string{"debug"}, sockets...)...)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := f.ServeDebug(ctx, log, passed["debug"]); err != nil {
				return err
			}
			return run(ctx, Env{Settings: settings, Logger: log, Sockets: passed})
		},
	}
	f.Bind(cmd.Flags())
	return cmd
}

// Execute runs a process's command and exits 1, naming the process, on an error.
func Execute(cmd *cobra.Command) {
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name(), err)
		os.Exit(1)
	}
}

// Bind registers the flags.
func (f *Flags) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.ConfigFile, "config", "", "Flink-style YAML config file")
	fs.StringArrayVarP(&f.Dynamic, "define", "D", nil, "config key=value (overrides --config); repeatable")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.DebugAddr, "debug-addr", "", "serve Go's /debug/pprof on this host:port (off when empty)")
}

// ServeDebug serves /debug/pprof until ctx is done: on lis when it is set (a socket the
// parent passed, see Listeners), else on --debug-addr. It returns at once when there is
// neither.
func (f *Flags) ServeDebug(ctx context.Context, log *slog.Logger, lis net.Listener) error {
	if lis == nil {
		if f.DebugAddr == "" {
			return nil
		}
		var err error
		if lis, err = net.Listen("tcp", f.DebugAddr); err != nil {
			return fmt.Errorf("--debug-addr: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	go func() {
		if err := srv.Serve(lis); err != nil && err != http.ErrServerClosed {
			log.Warn("debug server stopped", "err", err)
		}
	}()
	log.Info("serving pprof", "addr", lis.Addr().String())
	if !netaddr.IsLoopback(lis.Addr().String()) {
		log.Warn("serving pprof on a network address: it has no authentication, and a profile shows the process's memory", "addr", lis.Addr().String())
	}
	return nil
}

// Settings loads the config file, then applies -D (flag > file > default).
func (f *Flags) Settings() (*config.Config, error) {
	c := config.New()
	if f.ConfigFile != "" {
		fc, err := config.LoadFile(f.ConfigFile)
		if err != nil {
			return nil, err
		}
		c.Merge(fc)
	}
	dc, err := config.ParseDynamic(f.Dynamic)
	if err != nil {
		return nil, err
	}
	c.Merge(dc)
	return c, nil
}

// Logger builds the process logger on stderr.
func (f *Flags) Logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(f.LogFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.LogFormat)
}

// HealthCommand is the `healthcheck` subcommand of a goflink process: it asks the gRPC health
// service at --addr and exits 0 when the service is SERVING, 1 otherwise. Docker healthchecks
// run it inside FROM-scratch images, where no other tool exists.
//
// It takes the process's --config and -D, so that with internal TLS it dials as a cluster
// process.
func HealthCommand(defaultAddr, what string) *cobra.Command {
	var addr, service string
	var timeout time.Duration
	var f Flags
	cmd := &cobra.Command{
		Use:           "healthcheck",
		Short:         "Exit 0 when the local " + what + " reports SERVING on gRPC health",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			settings, err := f.Settings()
			if err != nil {
				return err
			}
			sec, err := security.FromSettings(settings, nil)
			if err != nil {
				return err
			}
			conn, err := grpc.NewClient(addr, sec.MemberDialOptions()...)
			if err != nil {
				return fmt.Errorf("healthcheck %s: %w", addr, err)
			}
			defer conn.Close()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			if err != nil {
				return fmt.Errorf("healthcheck %s: %w", addr, err)
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("healthcheck %s: %s", addr, resp.GetStatus())
			}
			fmt.Fprintln(cmd.OutOrStdout(), "SERVING")
			return nil
		},
	}
	cmd.Flags().StringVar(&f.ConfigFile, "config", "", "the process's Flink-style YAML config file (its security keys)")
	cmd.Flags().StringArrayVarP(&f.Dynamic, "define", "D", nil, "config key=value (overrides --config); repeatable")
	cmd.Flags().StringVar(&addr, "addr", defaultAddr, "host:port of the gRPC server to check")
	cmd.Flags().StringVar(&service, "service", "", "health service name (\"\": the process)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}
