// Command jobmanager runs a goflink JobManager.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/internal/process"
)

func main() {
	cfg := coordinator.DefaultConfig()
	var pf process.Flags
	var peers string
	cmd := &cobra.Command{
		Use:           "jobmanager",
		Short:         "Run a goflink JobManager",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := pf.Settings()
			if err != nil {
				return err
			}
			if cfg.Logger, err = pf.Logger(); err != nil {
				return err
			}
			cfg.Settings = settings
			if cfg.Peers, err = coordinator.ParsePeers(peers); err != nil {
				return err
			}
			sockets, err := process.Listeners("rpc", "raft", "debug")
			if err != nil {
				return err
			}
			cfg.RPCListener, cfg.RaftListener = sockets["rpc"], sockets["raft"]
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := pf.ServeDebug(ctx, cfg.Logger, sockets["debug"]); err != nil {
				return err
			}
			return coordinator.Run(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "stable ID of this JobManager in the Raft group")
	fs.StringVar(&cfg.RPCAddr, "rpc-addr", cfg.RPCAddr, "host:port for clients and TaskManagers")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", cfg.RaftAddr, "host:port for Raft")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the Raft log and snapshots")
	fs.StringVar(&peers, "peers", "", "the Raft group of JobManagers, this one included: id=raft-host:port,… (empty: a single JobManager)")
	pf.Bind(fs)
	cmd.AddCommand(process.HealthCommand("127.0.0.1:6123", "JobManager"))
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "jobmanager:", err)
		os.Exit(1)
	}
}
