package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/goflink/goflink/client"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// absPath makes a path the user gave absolute: the JobManager resolves none itself, since it
// may run elsewhere (with the same shared directory mounted at the same path). A URI
// (s3://bucket/prefix) is passed on as it is: the JobManager checks it.
func absPath(what, p string) (string, error) {
	if p == "" || strings.Contains(p, "://") {
		return p, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", usageErr("%s %q: %v", what, p, err)
	}
	return abs, nil
}

func savepointCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var dispose string
	cmd := &cobra.Command{
		Use:   "savepoint JOBID [DIR] | savepoint --dispose PATH",
		Short: "Take a savepoint of a running job and print its path, or dispose of one",
		Long: `Take a savepoint of a running job into a directory of its own under DIR (default: the job's
execution.checkpointing.savepoint-dir) and wait until it completed (exit 0, printing its path)
or failed (exit 1). A savepoint is aligned, complete and self-contained: it can be moved or
copied elsewhere, and a job started from it (run -s) gets its state whatever its state backend
or parallelism. The job keeps running; the savepoint commits nothing and no failover restores it.
--dispose PATH deletes a savepoint (refusing a path that is not one). DIR and PATH are local
paths or s3://bucket/prefix locations (reached with the cluster's s3.* settings).`,
		Args: func(cmd *cobra.Command, a []string) error {
			if dispose != "" {
				return args(0, "no arguments with --dispose")(cmd, a)
			}
			if len(a) < 1 || len(a) > 2 {
				return usageErr("want a job ID and an optional directory, got %d argument(s)", len(a))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			if dispose != "" {
				return disposeSavepoint(cmd.Context(), g, dispose)
			}
			if timeout <= 0 {
				return usageErr("--timeout must be positive, got %v", timeout)
			}
			dir := ""
			if len(a) == 2 {
				var err error
				if dir, err = absPath("savepoint directory", a[1]); err != nil {
					return err
				}
			}
			return takeSavepoint(cmd.Context(), g, &pb.TriggerSavepointRequest{JobId: a[0], TargetDirectory: dir}, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", defaultCheckpointTimeout, "how long to wait for the savepoint (match the job's execution.checkpointing.timeout)")
	cmd.Flags().StringVarP(&dispose, "dispose", "d", "", "delete the savepoint at this path")
	return cmd
}

func stopCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var dir string
	var drain bool
	cmd := &cobra.Command{
		Use:   "stop JOBID",
		Short: "Stop a job with a savepoint: sources stop, the savepoint is taken and committed, the job ends FINISHED",
		Long: `Stop a running job with a savepoint (Flink's stop-with-savepoint): the sources stop, a final
savepoint is taken into --savepoint-path (default: execution.checkpointing.savepoint-dir),
two-phase-commit sinks commit it, and the job ends FINISHED; flinkctl prints the savepoint's
path once it has. If the savepoint fails the job keeps running (exit 1). --drain first ends
event time and every operator's input, so every window and event-time timer fires into the
savepoint (use it for a job that will not be resumed). --savepoint-path is a local path or an
s3://bucket/prefix location.`,
		Args: args(1, "a job ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if timeout <= 0 {
				return usageErr("--timeout must be positive, got %v", timeout)
			}
			abs, err := absPath("--savepoint-path", dir)
			if err != nil {
				return err
			}
			return takeSavepoint(cmd.Context(), g, &pb.TriggerSavepointRequest{JobId: a[0], TargetDirectory: abs, Stop: true, Drain: drain}, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", defaultCheckpointTimeout, "how long to wait for the savepoint and the job's end")
	cmd.Flags().StringVarP(&dir, "savepoint-path", "p", "", "directory of the savepoint (default: execution.checkpointing.savepoint-dir)")
	cmd.Flags().BoolVarP(&drain, "drain", "d", false, "end event time and every operator's input before the savepoint")
	return cmd
}

func takeSavepoint(ctx context.Context, g *globals, req *pb.TriggerSavepointRequest, timeout time.Duration) error {
	return g.withClient(func(c *client.Client, asJSON bool) error {
		tctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := c.TriggerSavepoint(tctx, req)
		if err != nil && ctx.Err() != nil {
			return interrupted(ctx, "stopped waiting for the savepoint of job %s; it may still complete: %s checkpoints %s", req.GetJobId(), g.command(), req.GetJobId())
		}
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(g.stdout, map[string]string{"savepoint_path": resp.GetSavepointPath()})
		}
		if req.GetStop() {
			fmt.Fprintf(g.stdout, "Savepoint completed. Path: %s\nJob %s stopped (FINISHED)\n", resp.GetSavepointPath(), req.GetJobId())
			return nil
		}
		fmt.Fprintf(g.stdout, "Savepoint completed. Path: %s\n", resp.GetSavepointPath())
		return nil
	})
}

func disposeSavepoint(ctx context.Context, g *globals, p string) error {
	abs, err := absPath("savepoint path", p)
	if err != nil {
		return err
	}
	return g.withClient(func(c *client.Client, asJSON bool) error {
		if err := c.DisposeSavepoint(ctx, abs); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(g.stdout, map[string]string{"disposed": abs})
		}
		fmt.Fprintf(g.stdout, "Savepoint %s disposed\n", abs)
		return nil
	})
}

func rescaleCmd(g *globals) *cobra.Command {
	var parallelism int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "rescale JOBID -p N",
		Short: "Change a running job's parallelism in place (same job ID)",
		Long: `Change a running job's parallelism in place: a checkpoint is taken, every task is redeployed at
parallelism N and restores it (keyed state by key-group ranges, operator state split or
unioned as in Flink). Operators whose parallelism the spec sets keep it. N cannot exceed the
job's max parallelism (pipeline.max-parallelism). The job must take checkpoints.`,
		Args: args(1, "a job ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !cmd.Flags().Changed("parallelism") {
				return usageErr("rescale needs -p N")
			}
			if err := checkParallelism(parallelism); err != nil {
				return err
			}
			return g.withClient(func(c *client.Client, asJSON bool) error {
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				defer cancel()
				id, err := c.Rescale(ctx, a[0], parallelism)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(g.stdout, map[string]any{"job_id": a[0], "parallelism": parallelism, "checkpoint_id": id})
				}
				fmt.Fprintf(g.stdout, "Job %s rescaled to parallelism %d from checkpoint %d\n", a[0], parallelism, id)
				return nil
			})
		},
	}
	cmd.Flags().IntVarP(&parallelism, "parallelism", "p", 0, "the new parallelism")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultCheckpointTimeout, "how long to wait for the checkpoint and the redeployment")
	return cmd
}
