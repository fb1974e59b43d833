// Command taskmanager runs a goflink TaskManager.
package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/gcpace"
	"github.com/goflink/goflink/internal/process"
	"github.com/goflink/goflink/worker"
)

func main() {
	cfg := worker.DefaultConfig()
	var pf process.Flags
	var jobmanagers []string
	var slots int
	slotsFlag := func(cmd *cobra.Command, settings *config.Config) error {
		if cmd.Flags().Changed("slots") {
			if err := settings.Set(config.TaskSlots, strconv.Itoa(slots)); err != nil {
				return fmt.Errorf("--slots: %w", err)
			}
		}
		return nil
	}
	cmd := pf.Command("taskmanager", "Run a goflink TaskManager", []string{"metrics"}, slotsFlag,
		func(ctx context.Context, env process.Env) error {
			var err error
			if cfg.JobManagers, err = worker.ParseJobManagers(jobmanagers); err != nil {
				return fmt.Errorf("--jobmanager: %w", err)
			}
			cfg.Settings, cfg.Logger = env.Settings, env.Logger
			cfg.Addr = process.ListenAddr(env.Settings, cfg.Addr, worker.DefaultPort)
			if cfg.MetricsListener, err = process.MetricsListener(env, cfg.Addr, config.DefaultTaskManagerMetricsPort); err != nil {
				return err
			}
			// The process's own collector pacing (off when GOGC is set): a TaskManager's live
			// heap is small and it allocates a buffer per 32 KiB of records.
			defer gcpace.Start(env.Logger)()
			return worker.Run(ctx, cfg)
		})
	fs := cmd.Flags()
	fs.StringSliceVar(&jobmanagers, "jobmanager", cfg.JobManagers,
		"JobManager RPC address(es), host:port; comma-separated or repeated. The TaskManager finds and follows the leader among them")
	fs.StringVar(&cfg.Addr, "addr", "", "host:port to listen on and advertise ("+process.ListenHelp(worker.DefaultPort)+")")
	fs.StringVar(&cfg.ID, "id", "", "TaskManager ID (default tm-<advertised address>)")
	fs.IntVar(&slots, "slots", 1, "task slots ("+config.TaskSlots+")")
	fs.StringVar(&cfg.DataDir, "data-dir", "data/taskmanager", "directory for local files: the tasks' working files (bbolt state) in scratch/, removed when a task ends")
	cmd.AddCommand(process.HealthCommand("127.0.0.1:6122", "TaskManager"))
	process.Execute(cmd)
}
