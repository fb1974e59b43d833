package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	// ExitLostContact: run lost contact with every JobManager while following a job; the job
	// may still be running, its outcome is unknown.
	ExitLostContact = 3
	// ExitInterrupted: Ctrl-C (SIGINT) stopped flinkctl; 128 + the signal's number in general
	// (143 for SIGTERM).
	ExitInterrupted = 130
)

// exitError carries an exit code; an empty message prints nothing.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

// signalError is the cause of Main's context when a signal stopped flinkctl.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

// Main runs flinkctl with the process arguments and returns its exit code. The first SIGINT or
// SIGTERM cancels the command's context; a second one ends the process at once.
func Main() int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			sig, _ := s.(syscall.Signal)
			cancel(signalError{sig})
		case <-done:
		}
	}()
	return Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// interruptedCode is the exit code of a command whose context was canceled: 128 + the signal's
// number, ExitInterrupted when no signal is known.
func interruptedCode(ctx context.Context) int {
	var se signalError
	if errors.As(context.Cause(ctx), &se) && se.sig > 0 {
		return 128 + int(se.sig)
	}
	return ExitInterrupted
}

// interrupted is the error of a command stopped by its context, saying what msg says.
func interrupted(ctx context.Context, format string, args ...any) error {
	return &exitError{code: interruptedCode(ctx), msg: fmt.Sprintf(format, args...)}
}

// Execute runs flinkctl with args and returns its exit code.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "flinkctl:", ee.msg)
		}
		return ee.code
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "flinkctl: interrupted")
		return interruptedCode(ctx)
	}
	fmt.Fprintln(stderr, "flinkctl:", status.Convert(err).Message()) // a gRPC status's message without its code
	return ExitFailure
}

type globals struct {
	jobmanager string
	mGiven     bool // -m was given (else jobmanager is FLINKCTL_JOBMANAGER's or the default)
	output     string
	stdout     io.Writer
	stderr     io.Writer
	sec        securityFlags
}

// addrs parses the JobManager addresses (-m, else FLINKCTL_JOBMANAGER): a malformed one is a
// usage error.
func (g *globals) addrs() ([]string, error) {
	list, err := client.ParseAddrs(g.jobmanager)
	if err == nil {
		return list, nil
	}
	if !g.mGiven && os.Getenv("FLINKCTL_JOBMANAGER") != "" {
		return nil, usageErr("FLINKCTL_JOBMANAGER: %v", err)
	}
	return nil, usageErr("-m/--jobmanager: %v", err)
}

// newClient connects to the JobManagers of -m and prints a notice to stderr while a call
// retries because none can serve it.
func (g *globals) newClient() (*client.Client, error) {
	addrs, err := g.addrs()
	if err != nil {
		return nil, err
	}
	so, err := g.sec.dialOptions()
	if err != nil {
		return nil, err
	}
	opts, err := so.DialOptions()
	if err != nil {
		return nil, usageErr("%v", err)
	}
	c, err := client.NewWithOptions(opts, addrs...)
	if err != nil {
		return nil, err
	}
	c.Retrying = func(r client.Retry) { fmt.Fprintln(g.stderr, "flinkctl:", r) }
	return c, nil
}

// command is how to run flinkctl against the same JobManagers, for the hints flinkctl prints.
func (g *globals) command() string {
	if addrs, err := client.ParseAddrs(g.jobmanager); err == nil && g.mGiven {
		return "flinkctl -m " + strings.Join(addrs, ",")
	}
	return "flinkctl"
}

func (g *globals) json() (bool, error) {
	switch g.output {
	case "json":
		return true, nil
	case "table", "":
		return false, nil
	}
	return false, usageErr("--output %q: want table or json", g.output)
}

// withClient checks the output flag, connects to the cluster and runs fn.
func (g *globals) withClient(fn func(c *client.Client, asJSON bool) error) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	c, err := g.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c, asJSON)
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "flinkctl",
		Short:         "Submit and inspect goflink jobs",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	def := os.Getenv("FLINKCTL_JOBMANAGER")
	if def == "" {
		def = "localhost:6123"
	}
	root.PersistentFlags().StringVarP(&g.jobmanager, "jobmanager", "m", def, "JobManager address(es), host[:port][,host[:port]...] (port 6123 by default): any members of the group; flinkctl finds the leader (env FLINKCTL_JOBMANAGER)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	g.sec.bind(root)
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) { g.mGiven = cmd.Flags().Changed("jobmanager") }
	root.Args = func(_ *cobra.Command, a []string) error {
		if len(a) > 0 {
			return usageErr("unknown command %q (see flinkctl --help)", a[0])
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		cmd.SetOut(stderr)
		_ = cmd.Usage()
		return usageErr("want a command")
	}
	root.AddCommand(runCmd(g), listCmd(g), statusCmd(g), cancelCmd(g), checkpointsCmd(g), checkpointCmd(g), savepointCmd(g), stopCmd(g), rescaleCmd(g), clusterCmd(g), certCmd(g))
	return root
}

func args(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, a []string) error {
		if len(a) != n {
			return usageErr("want %s, got %d argument(s)", what, len(a))
		}
		return nil
	}
}

// queryCmd sets cmd to run get against the cluster and print its result: as JSON (what toJSON
// makes of it) or as text (table). then, when set, checks the printed result.
func queryCmd[T, J any](g *globals, cmd *cobra.Command, get func(ctx context.Context, c *client.Client, a []string) (T, error),
	toJSON func(T) J, table func(io.Writer, T) error, then func(T) error) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, a []string) error {
		return g.withClient(func(c *client.Client, asJSON bool) error {
			v, err := get(cmd.Context(), c, a)
			if err != nil {
				return err
			}
			if asJSON {
				err = writeJSON(g.stdout, toJSON(v))
			} else {
				err = table(g.stdout, v)
			}
			if err != nil || then == nil {
				return err
			}
			return then(v)
		})
	}
	return cmd
}

func listCmd(g *globals) *cobra.Command {
	return queryCmd(g, &cobra.Command{Use: "list", Short: "List jobs, newest first", Args: args(0, "no arguments")},
		func(ctx context.Context, c *client.Client, _ []string) ([]*pb.JobSummary, error) { return c.List(ctx) },
		func(jobs []*pb.JobSummary) []jobSummaryJSON { return mapSlice(jobs, summaryJSON) }, writeList, nil)
}

func statusCmd(g *globals) *cobra.Command {
	return queryCmd(g, &cobra.Command{Use: "status JOBID", Short: "Show a job with its tasks and exception history", Args: args(1, "a job ID")},
		func(ctx context.Context, c *client.Client, a []string) (*pb.JobDetails, error) {
			return c.Job(ctx, a[0])
		}, statusJSON, writeStatus, nil)
}

func cancelCmd(g *globals) *cobra.Command {
	return queryCmd(g, &cobra.Command{Use: "cancel JOBID", Short: "Cancel a job", Args: args(1, "a job ID")},
		func(ctx context.Context, c *client.Client, a []string) (string, error) {
			return a[0], c.Cancel(ctx, a[0])
		}, func(id string) map[string]string {
			return map[string]string{"job_id": id, "status": "CANCELLING"}
		}, func(w io.Writer, id string) error {
			fmt.Fprintf(w, "Cancelling job %s\n", id)
			return nil
		}, nil)
}

func checkpointsCmd(g *globals) *cobra.Command {
	return queryCmd(g, &cobra.Command{
		Use:   "checkpoints JOBID",
		Short: "List a job's checkpoints, newest first: in progress, completed and failed",
		Long: `List a job's checkpoints, newest first: the ones in progress, completed and failed in the
current JobManager's run, and the retained completed checkpoints. A failed entry with ID "-"
(0 in JSON) is a trigger that could not start a checkpoint, e.g. because not all tasks were
running.`,
		Args: args(1, "a job ID"),
	}, func(ctx context.Context, c *client.Client, a []string) ([]*pb.CheckpointInfo, error) {
		return c.Checkpoints(ctx, a[0])
	}, func(cps []*pb.CheckpointInfo) []checkpointJSON { return mapSlice(cps, checkpointOut) }, writeCheckpoints, nil)
}

// defaultCheckpointTimeout is execution.checkpointing.timeout's default: the JobManager gives up
// on a checkpoint after it, so waiting longer would be pointless.
const defaultCheckpointTimeout = 10 * time.Minute

func checkpointCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "checkpoint JOBID",
		Short: "Trigger a checkpoint of a running job and wait until it completed or failed",
		Long: `Trigger a checkpoint of a running job and wait until it completed (exit 0) or failed (exit 1).
The job must take checkpoints (execution.checkpointing.interval set).`,
		Args: args(1, "a job ID"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if timeout <= 0 {
				return usageErr("--timeout must be positive, got %v", timeout)
			}
			return g.withClient(func(c *client.Client, asJSON bool) error {
				return triggerCheckpoint(cmd.Context(), g, c, a[0], timeout, asJSON)
			})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", defaultCheckpointTimeout, "how long to wait for the checkpoint (match the job's execution.checkpointing.timeout)")
	return cmd
}

func triggerCheckpoint(ctx context.Context, g *globals, c *client.Client, id string, timeout time.Duration, asJSON bool) error {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cp, err := c.TriggerCheckpoint(tctx, id)
	if err != nil && ctx.Err() != nil {
		return interrupted(ctx, "stopped waiting for the checkpoint of job %s; it may still complete: %s checkpoints %s", id, g.command(), id)
	}
	if err != nil {
		// The JobManager's copy of the deadline may end the call (RST_STREAM) before this
		// process's timer has marked tctx done: go by the clock.
		if dl, _ := tctx.Deadline(); tctx.Err() != nil || !time.Now().Before(dl) {
			return &exitError{code: ExitFailure, msg: fmt.Sprintf("checkpoint of job %s did not end within %v (see --timeout); it may still complete: %s checkpoints %s", id, timeout, g.command(), id)}
		}
		return err
	}
	if asJSON {
		err = writeJSON(g.stdout, checkpointOut(cp))
	} else {
		fmt.Fprintln(g.stdout, checkpointOutcome(id, cp))
	}
	if err == nil && cp.GetStatus() != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
		return &exitError{code: ExitFailure}
	}
	return err
}

// checkpointSizeText is a completed checkpoint's size, with its in-flight data when it is
// unaligned: "3.0 MiB, unaligned: 2.9 MiB in flight".
func checkpointSizeText(cp *pb.CheckpointInfo) string {
	size := bytesText(cp.GetStateSizeBytes())
	if cp.GetUnaligned() {
		size += ", unaligned: " + bytesText(cp.GetInFlightBytes()) + " in flight"
	}
	return size
}

// checkpointOutcome is the line flinkctl checkpoint prints.
func checkpointOutcome(job string, cp *pb.CheckpointInfo) string {
	name := "Checkpoint"
	if cp.GetId() != 0 {
		name = fmt.Sprintf("Checkpoint %d", cp.GetId())
	}
	switch cp.GetStatus() {
	case pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
		line := fmt.Sprintf("%s of job %s completed in %s (%s)", name, job, msText(cp.GetDurationMs()), checkpointSizeText(cp))
		if cp.GetPath() != "" {
			line += " at " + cp.GetPath()
		}
		return line
	case pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED:
		if f := failureText(cp); f != "" {
			return fmt.Sprintf("%s of job %s failed: %s", name, job, f)
		}
		return fmt.Sprintf("%s of job %s failed", name, job)
	}
	return fmt.Sprintf("%s of job %s did not end: the jobmanager answered with status %s", name, job, checkpointStatusName(cp.GetStatus()))
}

func clusterCmd(g *globals) *cobra.Command {
	return queryCmd(g, &cobra.Command{
		Use:   "cluster",
		Short: "Show JobManagers (Raft role, term, leader) and TaskManagers (slots, last heartbeat)",
		Long: `Show every JobManager of the Raft group (ID, RPC and Raft address, role, term, last log
index; the leader marked *; a member whose status could not be read is shown with "-" and the
reason below the table) and the TaskManagers registered with the leader (slots, free slots,
last heartbeat). Any JobManager answers, with the leader's view. An incomplete view (a
JobManager that could not be asked, or no leader to list the TaskManagers) is shown, said so
on stderr, and exits 1.`,
		Args: args(0, "no arguments"),
	}, func(ctx context.Context, c *client.Client, _ []string) (*pb.GetClusterResponse, error) {
		return c.Cluster(ctx)
	}, clusterOut, writeCluster, clusterComplete)
}

// clusterComplete fails flinkctl cluster, once it printed the view, when the view is incomplete.
func clusterComplete(info *pb.GetClusterResponse) error {
	if gaps := clusterGaps(info); len(gaps) > 0 {
		return &exitError{code: ExitFailure, msg: "incomplete cluster view: " + strings.Join(gaps, "; ")}
	}
	return nil
}

type runFlags struct {
	parallelism      int
	parallelismGiven bool
	detached         bool
	dynamic          []string
	local            bool
	taskmanagers     int
	slots            int
	slotsGiven       bool
	verbose          bool
	fromSavepoint    string
	allowNonRestored bool
	claimMode        string
}

func runCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run JOBFILE",
		Short: "Submit a job spec and follow it until it ends (or -d to return at once)",
		Long: `Submit a YAML job spec. Without -d, follow the job and exit 0 if it FINISHED, 1 otherwise.
With --local, run it on an embedded mini cluster (one JobManager and --taskmanagers
TaskManagers in this process, over real loopback gRPC) instead of -m.`,
		Args: args(1, "a job spec file"),
		RunE: func(cmd *cobra.Command, a []string) error {
			f.parallelismGiven = cmd.Flags().Changed("parallelism")
			f.slotsGiven = cmd.Flags().Changed("slots")
			return runJob(cmd.Context(), g, f, a[0])
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&f.parallelism, "parallelism", "p", 0, "default parallelism of the job (overrides the spec)")
	fl.BoolVarP(&f.detached, "detached", "d", false, "print the job ID and return without following")
	fl.StringArrayVarP(&f.dynamic, "define", "D", nil, "job config key=value (overrides the spec's config); repeatable")
	fl.BoolVar(&f.local, "local", false, "run on an embedded mini cluster")
	fl.IntVar(&f.taskmanagers, "taskmanagers", 2, "TaskManagers of the --local cluster")
	fl.IntVar(&f.slots, "slots", 0, "slots per TaskManager of the --local cluster (default: enough for the job)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log the --local cluster's activity to stderr (without it: errors only)")
	fl.StringVarP(&f.fromSavepoint, "fromSavepoint", "s", "", "start from this savepoint or retained checkpoint (its directory or _metadata; a local path or s3://…)")
	fl.BoolVarP(&f.allowNonRestored, "allow-non-restored-state", "n", false, "with -s: skip the state of operators (by uid) the job does not have")
	fl.StringVar(&f.claimMode, "claim-mode", "no-claim", "with -s: no-claim (never delete the snapshot) or claim (the job's retention deletes it once subsumed)")
	return cmd
}

// maxLocalTaskManagers bounds --taskmanagers: they all run in the flinkctl process, and slots
// (--slots) rather than TaskManagers give a local job its parallelism.
const maxLocalTaskManagers = 64

// checkParallelism checks a --parallelism flag before it travels as an int32: 1 to
// config.UpperBoundMaxParallelism, as every parallelism of a job.
func checkParallelism(p int) error {
	if p < 1 {
		return usageErr("--parallelism must be at least 1, got %d", p)
	}
	if p > config.UpperBoundMaxParallelism {
		return usageErr("--parallelism must be at most %d (Flink's upper bound of the max parallelism), got %d", config.UpperBoundMaxParallelism, p)
	}
	return nil
}

func runJob(ctx context.Context, g *globals, f *runFlags, path string) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	if f.parallelismGiven {
		if err := checkParallelism(f.parallelism); err != nil {
			return err
		}
	}
	if !f.local {
		if _, err := g.addrs(); err != nil {
			return err
		}
	}
	spec, err := os.ReadFile(path)
	if err != nil {
		return &exitError{code: ExitFailure, msg: fmt.Sprintf("read job spec: %v", err)}
	}
	overrides := map[string]string{}
	for _, kv := range f.dynamic {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usageErr("-D %q: want key=value", kv)
		}
		overrides[strings.TrimSpace(k)] = v
	}
	req := &pb.SubmitJobRequest{Spec: spec, SpecName: filepath.Base(path), Config: overrides, Parallelism: int32(f.parallelism)}
	if err := f.restoreRequest(req); err != nil {
		return err
	}
	var c *client.Client
	if f.local {
		cluster, err := startLocal(ctx, g, f, req, asJSON)
		if err != nil {
			return err
		}
		defer cluster.Close()
		c, err = client.New(cluster.Addr())
		if err != nil {
			return err
		}
	} else if c, err = g.newClient(); err != nil {
		return err
	}
	defer c.Close()
	id, err := c.Submit(ctx, req)
	if err != nil && ctx.Err() != nil && !f.local {
		return interrupted(ctx, "interrupted while submitting the job; it may have been submitted: %s list", g.command())
	}
	if err != nil {
		return err
	}
	if asJSON && f.detached && !f.local {
		return writeJSON(g.stdout, map[string]string{"job_id": id})
	}
	if !asJSON {
		fmt.Fprintf(g.stdout, "Job has been submitted with JobID %s\n", id)
	}
	if f.detached && !f.local {
		return nil
	}
	last, err := follow(ctx, g, c, id, asJSON)
	if err != nil {
		return followError(ctx, g, f, c, id, err)
	}
	if asJSON {
		if err := writeJSON(g.stdout, statusJSON(last)); err != nil {
			return err
		}
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		return &exitError{code: ExitFailure}
	}
	return nil
}

// restoreRequest adds -s, -n and --claim-mode to a submission.
func (f *runFlags) restoreRequest(req *pb.SubmitJobRequest) error {
	switch f.claimMode {
	case "no-claim", "":
		req.ClaimMode = pb.ClaimMode_CLAIM_MODE_NO_CLAIM
	case "claim":
		req.ClaimMode = pb.ClaimMode_CLAIM_MODE_CLAIM
	default:
		return usageErr("--claim-mode must be claim or no-claim, got %q", f.claimMode)
	}
	if f.fromSavepoint == "" {
		if f.allowNonRestored {
			return usageErr("-n (--allow-non-restored-state) needs -s")
		}
		return nil
	}
	abs, err := absPath("-s", f.fromSavepoint)
	if err != nil {
		return err
	}
	req.RestorePath, req.AllowNonRestoredState = abs, f.allowNonRestored
	return nil
}

// followError is what run reports when following job id ended before the job did: Ctrl-C, lost
// contact with every JobManager, or another error.
func followError(ctx context.Context, g *globals, f *runFlags, c *client.Client, id string, err error) error {
	switch {
	case ctx.Err() != nil && f.local:
		// The embedded cluster ends with flinkctl: cancel the job first, so its sinks abort.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cerr := c.Cancel(cctx, id); cerr != nil {
			return interrupted(ctx, "interrupted; cancelling job %s failed: %v", id, cerr)
		}
		return interrupted(ctx, "interrupted: job %s cancelled", id)
	case ctx.Err() != nil:
		return interrupted(ctx, "stopped following job %s; it is still running: %s cancel %s (or see it: %s status %s)",
			id, g.command(), id, g.command(), id)
	}
	var ue *client.UnavailableError
	if errors.As(err, &ue) && !f.local {
		return &exitError{code: ExitLostContact, msg: fmt.Sprintf("lost contact with the jobmanagers while following job %s: %v\n"+
			"flinkctl: the job may still be running; its outcome is unknown: check with %s status %s", id, err, g.command(), id)}
	}
	return err
}

// follow prints the job's status changes, its completed checkpoints, each new exception with
// what the JobManager did about it, and the checkpoint a restart restored, until the job ends.
func follow(ctx context.Context, g *globals, c *client.Client, id string, quiet bool) (*pb.JobDetails, error) {
	var lastStatus pb.JobStatus
	var lastCheckpoint int64
	var lastRestarts int32
	// Exceptions already printed. Not a count: when the watch resumes on a new leader, the job's
	// exception history is the new leader's.
	printed := map[string]bool{}
	return c.Watch(ctx, id, func(d *pb.JobDetails) error {
		if quiet {
			return nil
		}
		now := time.Now().Format("15:04:05.000")
		if cp := d.GetLastCheckpoint(); cp.GetId() > lastCheckpoint {
			lastCheckpoint = cp.GetId()
			fmt.Fprintf(g.stdout, "%s  checkpoint %d completed in %d ms (%s)\n", now, cp.GetId(), cp.GetDurationMs(), checkpointSizeText(cp))
		}
		for _, e := range d.GetExceptions() {
			key := exceptionKey(e)
			if printed[key] {
				continue
			}
			printed[key] = true
			fmt.Fprintf(g.stdout, "%s  failure: %s: %s\n", now, e.GetTask(), e.GetCause())
			if h := handlingText(e); h != "" {
				fmt.Fprintf(g.stdout, "%*s→ %s\n", len(now)+4, "", h)
			}
		}
		// A restart shows even when the status did not change on the way (a new leader takes
		// the job over while it runs: RUNNING, then RUNNING again after a restart).
		if d.GetStatus() == lastStatus && d.GetRestarts() == lastRestarts {
			return nil
		}
		lastStatus, lastRestarts = d.GetStatus(), d.GetRestarts()
		line := fmt.Sprintf("%s  job %s %s", now, id, JobStatusName(d.GetStatus()))
		if d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING && d.GetRestarts() > 0 {
			line += fmt.Sprintf(" (restart %d", d.GetRestarts())
			if r := d.GetRestoredCheckpointId(); r > 0 {
				line += fmt.Sprintf(", state and source offsets restored from checkpoint %d", r)
			} else {
				line += ", no completed checkpoint: starting over"
			}
			line += ")"
		}
		if client.IsTerminal(d.GetStatus()) && d.GetStartTime() != nil && d.GetEndTime() != nil {
			line += fmt.Sprintf(" after %v", d.GetEndTime().AsTime().Sub(d.GetStartTime().AsTime()).Round(time.Millisecond))
		}
		if d.GetFailureCause() != "" {
			line += ": " + d.GetFailureCause()
		}
		fmt.Fprintln(g.stdout, line)
		return nil
	})
}

// exceptionKey identifies an exception history entry.
func exceptionKey(e *pb.ExceptionEntry) string {
	return fmt.Sprintf("%d\x00%s\x00%s\x00%s", e.GetTime().AsTime().UnixNano(), e.GetTask(), e.GetTaskmanager(), e.GetCause())
}

// startLocal starts an embedded cluster sized for the job.
// With -o json its print sinks write to stderr, so that stdout holds only the JSON.
func startLocal(ctx context.Context, g *globals, f *runFlags, req *pb.SubmitJobRequest, asJSON bool) (*minicluster.Cluster, error) {
	if f.taskmanagers < 1 || f.taskmanagers > maxLocalTaskManagers {
		return nil, usageErr("--taskmanagers must be between 1 and %d, got %d", maxLocalTaskManagers, f.taskmanagers)
	}
	if f.slotsGiven && (f.slots < 1 || f.slots > config.MaxTaskSlots) {
		return nil, usageErr("--slots must be between 1 and %d, got %d", config.MaxTaskSlots, f.slots)
	}
	// io.allowed-paths configures processes, and no job may set it; the embedded cluster runs
	// in this process for the user who runs flinkctl, so -D sets it for that cluster.
	settings := config.New()
	if v, ok := req.GetConfig()[config.AllowedPaths]; ok {
		if err := settings.Set(config.AllowedPaths, v); err != nil {
			return nil, usageErr("-D %v", err)
		}
		delete(req.Config, config.AllowedPaths)
	}
	graph, err := job.Build(job.Request{Spec: req.GetSpec(), SpecName: req.GetSpecName(), Overrides: req.GetConfig(), Parallelism: int(req.GetParallelism())}, job.Env{Operators: operator.MustRegistry(coordinator.ConnectorTypes...)})
	if err != nil {
		return nil, err
	}
	// Every operator's subtask i shares slot i (slot sharing): the job needs as many slots as
	// its widest operator has subtasks.
	need, widest := 0, ""
	for _, v := range graph.GetVertices() {
		if p := int(v.GetParallelism()); p > need {
			need, widest = p, v.GetName()
		}
	}
	need = max(need, 1)
	slots := f.slots
	if !f.slotsGiven {
		slots = (need + f.taskmanagers - 1) / f.taskmanagers
	}
	if have := f.taskmanagers * slots; have < need {
		return nil, usageErr("the local cluster would have %s (--taskmanagers %d × --slots %d), but job %q needs %d (operator %q runs %d subtasks): use --slots %d, or leave --slots out",
			plural(have, "slot"), f.taskmanagers, slots, graph.GetName(), need, widest, need, (need+f.taskmanagers-1)/f.taskmanagers)
	}
	// Without -v only errors: the warnings a run expects (an injected failure, the tasks it
	// cancels) are in flinkctl's own output already.
	level := slog.LevelError
	if f.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	sinks := g.stdout
	if asJSON {
		sinks = g.stderr
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cluster, err := minicluster.StartReady(wctx, minicluster.Options{TaskManagers: f.taskmanagers, Slots: slots, Settings: settings, Stdout: sinks, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("start local cluster: %w", err)
	}
	return cluster, nil
}

// plural is "1 slot", "2 slots".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
