// Command jobmanager runs a goflink JobManager.
package main

import (
	"context"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/internal/process"
)

func main() {
	cfg := coordinator.DefaultConfig()
	var pf process.Flags
	var peers string
	cmd := pf.Command("jobmanager", "Run a goflink JobManager", []string{"rpc", "raft", "metrics", "rest"}, nil,
		func(ctx context.Context, env process.Env) error {
			var err error
			if cfg.Peers, err = coordinator.ParsePeers(peers); err != nil {
				return err
			}
			cfg.Settings, cfg.Logger = env.Settings, env.Logger
			cfg.RPCAddr = process.ListenAddr(env.Settings, cfg.RPCAddr, coordinator.DefaultRPCPort)
			cfg.RaftAddr = process.ListenAddr(env.Settings, cfg.RaftAddr, coordinator.DefaultRaftPort)
			cfg.RPCListener, cfg.RaftListener = env.Sockets["rpc"], env.Sockets["raft"]
			if cfg.MetricsListener, err = process.MetricsListener(env, cfg.RPCAddr, config.DefaultJobManagerMetricsPort); err != nil {
				return err
			}
			if cfg.RESTListener, err = process.RESTListener(env, cfg.RPCAddr); err != nil {
				if cfg.MetricsListener != nil {
					cfg.MetricsListener.Close()
				}
				return err
			}
			return coordinator.Run(ctx, cfg)
		})
	fs := cmd.Flags()
	fs.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "stable ID of this JobManager in the Raft group")
	fs.StringVar(&cfg.RPCAddr, "rpc-addr", "", "host:port for clients and TaskManagers ("+process.ListenHelp(coordinator.DefaultRPCPort)+")")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", "", "host:port for Raft ("+process.ListenHelp(coordinator.DefaultRaftPort)+")")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the Raft log and snapshots")
	fs.StringVar(&peers, "peers", "", "the Raft group of JobManagers, this one included: id=raft-host:port,… (empty: a single JobManager)")
	cmd.AddCommand(process.HealthCommand("127.0.0.1:6123", "JobManager"))
	process.Execute(cmd)
}
