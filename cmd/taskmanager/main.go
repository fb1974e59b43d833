// Command taskmanager runs a goflink TaskManager.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/process"
	"github.com/goflink/goflink/worker"
)

func main() {
	cfg := worker.DefaultConfig()
	var pf process.Flags
	var jobmanagers []string
	var slots int
	cmd := &cobra.Command{
		Use:           "taskmanager",
		Short:         "Run a goflink TaskManager",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := pf.Settings()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("slots") {
				if err := settings.Set(config.TaskSlots, strconv.Itoa(slots)); err != nil {
					return fmt.Errorf("--slots: %w", err)
				}
			}
			if cfg.Logger, err = pf.Logger(); err != nil {
				return err
			}
			cfg.Settings = settings
			if cfg.JobManagers, err = worker.ParseJobManagers(jobmanagers); err != nil {
				return fmt.Errorf("--jobmanager: %w", err)
			}
			sockets, err := process.Listeners("debug")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := pf.ServeDebug(ctx, cfg.Logger, sockets["debug"]); err != nil {
				return err
			}
			return worker.Run(ctx, cfg)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&jobmanagers, "jobmanager", cfg.JobManagers,
		"JobManager RPC address(es), host:port; comma-separated or repeated. The TaskManager finds and follows the leader among them")
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "host:port to listen on and advertise")
	fs.StringVar(&cfg.ID, "id", "", "TaskManager ID (default tm-<advertised address>)")
	fs.IntVar(&slots, "slots", 1, "task slots ("+config.TaskSlots+")")
	fs.StringVar(&cfg.DataDir, "data-dir", "data/taskmanager", "directory for local files")
	pf.Bind(fs)
	cmd.AddCommand(process.HealthCommand("127.0.0.1:6122", "TaskManager"))
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "taskmanager:", err)
		os.Exit(1)
	}
}
