package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/internal/poll"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// recoveryVariant is one job shape and failover strategy the recovery section kills.
type recoveryVariant struct {
	job      string // "forward" or "keyed"
	strategy string // jobmanager.execution.failover-strategy
	runs     int
}

func (rv recoveryVariant) String() string {
	return fmt.Sprintf("%s job, %s failover", rv.job, rv.strategy)
}

// recoveryResult is what one TaskManager kill measured, each time from the SIGKILL.
type recoveryResult struct {
	victim    string
	hosted    []string // tasks on the victim, "<vertex> (<i>/<p>)"
	restarted []string // tasks whose attempt changed
	jmRestart []string // the restarted tasks the JobManager recorded (ExceptionEntry.restarted_tasks)
	tasks     int      // tasks of the job
	cause     string

	detected  time.Duration // the job left RUNNING
	cpTrigger time.Duration // the first checkpoint completed after recovery was triggered (JobManager clock)

	afterKill
}

// recoveryPoll is how often the job status and the output directory are looked at after the
// kill. The status comes from the Go client (one cheap RPC), not a flinkctl process per poll,
// which would cost more CPU than the recovery it measures on 2 cores.
const recoveryPoll = 5 * time.Millisecond

// The recovery cluster: two TaskManagers with recoverySlots slots run a job with parallelism
// recoveryParallelism (the JobManager spreads it, two subtask indices each), and a spare
// TaskManager with the same free slots is started once the job runs.
const (
	recoveryParallelism = 4
	recoverySlots       = 2
	recoveryBusyTMs     = 2
)

// recoveryWarmCheckpoints is how many checkpoints' worth of part files (one per subtask) a
// job must have committed before the kill.
const recoveryWarmCheckpoints = 3

// recoveryTarget is the target: the job RUNNING again this soon after a TaskManager
// kill, with a spare slot.
const recoveryTarget = 500 * time.Millisecond

// recovery measures the time from a TaskManager SIGKILL to the job RUNNING again and to its
// first new committed output, for each failover strategy on a forward-only job (each subtask
// index its own pipelined region) and for a keyed job (one region). Every kill is a new job on
// two busy TaskManagers plus a spare; the kills of the variants are interleaved.
func recovery(o options, v *verdicts) (err error) {
	c, err := startCluster(o.bin, 1, recoveryBusyTMs, recoverySlots, false)
	if err != nil {
		return err
	}
	defer c.finish(&err)
	cl, err := client.New(c.Addr)
	if err != nil {
		return err
	}
	defer cl.Close()
	full := recoveryVariant{job: "forward", strategy: "full", runs: o.recRuns}
	region := recoveryVariant{job: "forward", strategy: "region", runs: o.recRuns}
	keyed := recoveryVariant{job: "keyed", strategy: "region", runs: o.recKeyedRuns}
	p := recoveryParallelism
	fmt.Printf("\n== recovery from a TaskManager SIGKILL ==\n")
	fmt.Printf("%d TaskManager processes with %d slots run the job (%d subtask indices each); a spare TaskManager with %d free slots registers before the kill\n",
		recoveryBusyTMs, recoverySlots, p/recoveryBusyTMs, recoverySlots)
	fmt.Printf("forward job: sequence from 0, unbounded, %d records/s -> map -> file sink (2PC), parallelism %d: chained into %d tasks, each its own pipelined region\n", o.recRate, p, p)
	fmt.Printf("keyed job:   sequence from 0, unbounded, %d records/s -> key-by value %% 1024 -> count -> file sink, parallelism %d: the key-by edge makes its %d tasks one region\n", o.recRate, p, 2*p)
	fmt.Printf("execution.checkpointing.interval %s (EXACTLY_ONCE, hashmap), restart-strategy.type fixed-delay, delay %s, attempts 10;\n", durText(o.recInterval), durText(o.recDelay))
	fmt.Printf("jobmanager.execution.failover-strategy full or region; heartbeat defaults (a killed TaskManager is noticed when its heartbeat stream breaks)\n")
	fmt.Printf("each kill: a new job; once it committed >= %d part files and after a random part of an interval, SIGKILL the TaskManager hosting subtask 1,\n", recoveryWarmCheckpoints*p)
	fmt.Printf("then poll the job status (Go client) and the output directory every %s. New committed output: a visible part file with data written\n", durText(recoveryPoll))
	fmt.Printf("after the kill (mtime) that appeared once the job was RUNNING again: no file committed before, no restored transaction re-committed,\n")
	fmt.Printf("no late commit of a checkpoint completed before the kill and no file already pending at the kill (each kill lists those not counted);\n")
	fmt.Printf("it waits for the first checkpoint after recovery (checkpoints are aborted during RESTARTING), so it includes up to one interval\n")
	fmt.Printf("kills: %d per failover strategy of the forward job, %d of the keyed job, interleaved\n\n", o.recRuns, o.recKeyedRuns)
	live := []string{"tm-0", "tm-1"}
	nextTM := recoveryBusyTMs
	results := map[recoveryVariant][]recoveryResult{}
	kill := 0
	for pass := range max(o.recRuns, o.recKeyedRuns) {
		var order []recoveryVariant
		if pass < o.recRuns {
			order = []recoveryVariant{full, region}
			if pass%2 == 1 {
				order = []recoveryVariant{region, full}
			}
		}
		if pass < o.recKeyedRuns {
			order = append(order, keyed)
		}
		for _, rv := range order {
			kill++
			spare := fmt.Sprintf("tm-%d", nextTM)
			nextTM++
			r, err := recoverOnce(c, cl, o, rv, kill, live, spare)
			if err != nil {
				return fmt.Errorf("recovery kill %d (%s): %w", kill, rv, err)
			}
			results[rv] = append(results[rv], r)
			// The job ran on the survivors and the spare; they run the next job.
			live = slices.DeleteFunc(append(live, spare), func(id string) bool { return id == r.victim })
			fmt.Printf("  kill %2d, %s: SIGKILL %s (hosting %s), restarted %s, restored checkpoint %d\n",
				kill, rv, r.victim, groupTasks(r.hosted), restartedText(r), r.restoredID)
			fmt.Printf("           RUNNING again %s, all tasks RUNNING %s, first new committed output %s: %s\n",
				ms(r.running), ms(r.allRunning), ms(r.committed), r.outputText())
			if !slices.Equal(sortedCopy(r.jmRestart), sortedCopy(r.restarted)) {
				fmt.Printf("           note: the JobManager's exception history names %s as restarted\n", groupTasks(r.jmRestart))
			}
			if kill == 1 && r.cause != "" {
				fmt.Printf("           cause recorded by the JobManager: %s\n", r.cause)
			}
		}
	}
	for _, rv := range []recoveryVariant{full, region, keyed} {
		if rs := results[rv]; rv.runs > 0 {
			fmt.Printf("\n  %s, %d %s; restarted: %s\n", rv, len(rs), plural(len(rs), "kill"), restartedSummary(rs))
			printTable(recoveryRows, rs, 28)
		}
	}
	fmt.Printf("\n  target (issue): job RUNNING again under %s after a TaskManager kill, with a spare slot (judged on the max over the kills):\n", ms(recoveryTarget))
	for _, rv := range []recoveryVariant{region, full, keyed} {
		rs := results[rv]
		if len(rs) == 0 {
			continue
		}
		run := figures(rs, func(r recoveryResult) time.Duration { return r.running })
		word := v.check(fmt.Sprintf("recovery %s/%s: RUNNING again, max %s < %s", rv.job, rv.strategy, ms(slices.Max(run)), ms(recoveryTarget)),
			slices.Max(run) < recoveryTarget)
		fmt.Printf("    %-30s median %9s  max %9s   %s\n", rv.String()+":", ms(median(run)), ms(slices.Max(run)), word)
	}
	fmt.Printf("\n  region vs full failover, forward job (same run, kills interleaved), medians:\n")
	for _, row := range recoveryRows {
		if row.name == "failover started" || row.name == "first checkpoint triggered" {
			continue
		}
		r, f := median(figures(results[region], row.f)), median(figures(results[full], row.f))
		fmt.Printf("    kill -> %-28s region %9s  full %9s  region/full %.2f\n", row.name+":", ms(r), ms(f), float64(r)/float64(f))
	}
	sinceTrigger := func(r recoveryResult) time.Duration { return r.committed - r.cpTrigger }
	r, f := median(figures(results[region], sinceTrigger)), median(figures(results[full], sinceTrigger))
	fmt.Printf("    %-36s region %9s  full %9s  region/full %.2f\n", "first checkpoint -> output:", ms(r), ms(f), float64(r)/float64(f))
	fmt.Printf("    after recovery the first checkpoint is triggered after a random delay in [min-pause, interval], as in Flink: that, more\n")
	fmt.Printf("    than the failover strategy, spreads kill -> first new committed output over up to one interval; the status and the directory\n")
	fmt.Printf("    are polled every %s, so differences of a few ms are within the resolution\n", durText(recoveryPoll))
	return nil
}

// row is one figure of a table of results R.
type row[R any] struct {
	name string
	f    func(R) time.Duration
}

// recoveryRows are the figures of a recovery table.
var recoveryRows = []row[recoveryResult]{
	{"failover started", func(r recoveryResult) time.Duration { return r.detected }},
	{"job RUNNING again", func(r recoveryResult) time.Duration { return r.running }},
	{"all tasks RUNNING", func(r recoveryResult) time.Duration { return r.allRunning }},
	{"first checkpoint triggered", func(r recoveryResult) time.Duration { return r.cpTrigger }},
	{"first new committed output", func(r recoveryResult) time.Duration { return r.committed }},
}

// figures picks one duration out of every result.
func figures[R any](rs []R, f func(R) time.Duration) []time.Duration {
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = f(r)
	}
	return ds
}

// printTable prints each row's median, max and every value over rs, its name in a column
// width wide.
func printTable[R any](rows []row[R], rs []R, width int) {
	fmt.Printf("    %-*s %9s  %9s   %s\n", width+8, "", "median", "max", "each")
	for _, row := range rows {
		ds := figures(rs, row.f)
		each := make([]string, len(ds))
		for i, d := range ds {
			each[i] = ms(d)
		}
		fmt.Printf("    kill -> %-*s %9s  %9s   %s\n", width, row.name+":", ms(median(ds)), ms(slices.Max(ds)), strings.Join(each, ", "))
	}
}

// restartedText says which tasks one kill restarted.
func restartedText(r recoveryResult) string {
	switch {
	case len(r.restarted) == r.tasks:
		return fmt.Sprintf("all %d tasks", r.tasks)
	case slices.Equal(sortedCopy(r.restarted), sortedCopy(r.hosted)):
		return fmt.Sprintf("the killed TaskManager's %d of %d tasks", len(r.restarted), r.tasks)
	}
	return fmt.Sprintf("%d of %d tasks: %s", len(r.restarted), r.tasks, groupTasks(r.restarted))
}

// restartedSummary says which tasks the kills restarted, once if every kill did the same.
func restartedSummary(rs []recoveryResult) string {
	each := make([]string, len(rs))
	for i, r := range rs {
		each[i] = restartedText(r)
	}
	if len(slices.Compact(slices.Clone(each))) == 1 {
		s := each[0]
		if len(rs) > 1 {
			s += " in every kill"
		}
		if r := rs[0]; len(r.restarted) < r.tasks {
			s += fmt.Sprintf(" (the other %d kept running)", r.tasks-len(r.restarted))
		}
		return s
	}
	return strings.Join(each, "; ")
}

// groupTasks writes task names "v (1/4)", "v (3/4)" as "v (1/4, 3/4)".
func groupTasks(names []string) string {
	var vertices []string
	subtasks := map[string][]string{}
	for _, n := range sortedCopy(names) {
		v, st := n, ""
		if i := strings.LastIndex(n, " ("); i >= 0 && strings.HasSuffix(n, ")") {
			v, st = n[:i], n[i+2:len(n)-1]
		}
		if _, ok := subtasks[v]; !ok {
			vertices = append(vertices, v)
		}
		subtasks[v] = append(subtasks[v], st)
	}
	out := make([]string, len(vertices))
	for i, v := range vertices {
		out[i] = fmt.Sprintf("%s (%s)", v, strings.Join(subtasks[v], ", "))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// forwardOps are the operators between the source and the sink of the forward-only job.
const forwardOps = `  - {name: double, type: map, fields: {value: "value * 2"}}`

// recoverySpec is a job of the recovery and ha sections: a sequence from 0 at -recovery-rate,
// then ops, then a file sink writing to out; checkpoints every -recovery-interval
// (EXACTLY_ONCE, hashmap) to cpDir, fixed-delay restarts, and the config keys and values more.
func recoverySpec(o options, name string, parallelism int, ops, out, cpDir string, more ...string) string {
	cfg := checkpointConfig(fmt.Sprintf("%dms", o.recInterval.Milliseconds()), cpDir, append([]string{
		"state.backend.type", "hashmap",
		"restart-strategy.type", "fixed-delay",
		"restart-strategy.fixed-delay.delay", fmt.Sprintf("%dms", o.recDelay.Milliseconds()),
		"restart-strategy.fixed-delay.attempts", "10"}, more...)...)
	return fmt.Sprintf(`name: %s
parallelism: %d
%soperators:
  - {name: numbers, type: sequence, from: 0, rate: %d}
%s
  - {name: out, type: file, path: %q}
`, name, parallelism, cfg, o.recRate, ops, out)
}

// recoverOnce runs one job on the live TaskManagers, starts the spare, kills the TaskManager
// hosting subtask 1 once the job committed output, measures the recovery and cancels the job.
func recoverOnce(c *cluster, cl *client.Client, o options, rv recoveryVariant, kill int, live []string, spare string) (r recoveryResult, err error) {
	// Only the live TaskManagers (not the previous victim) may offer slots to the job.
	if err := c.waitTaskManagers(live, 30*time.Second); err != nil {
		return r, err
	}
	out := filepath.Join(c.dir, fmt.Sprintf("recovery-out-%d", kill))
	ops := forwardOps
	if rv.job == "keyed" {
		ops = `  - {name: by-key, type: key-by, key: "value % 1024"}
  - {name: counts, type: count}`
	}
	spec := recoverySpec(o, fmt.Sprintf("bench-recovery-%d-%s-%s", kill, rv.job, rv.strategy), recoveryParallelism, ops, out,
		filepath.Join(c.dir, "checkpoints"), "jobmanager.execution.failover-strategy", rv.strategy)
	id, err := c.startJob(fmt.Sprintf("recovery-%d", kill), spec, 20*time.Millisecond)
	defer c.cancelAtReturn(id, &err)
	if err != nil {
		return r, err
	}
	// The spare registers after the job took the other TaskManagers' slots: the JobManager
	// spreads a job over the TaskManagers with the most free slots.
	if _, err := c.StartTaskManager(spare); err != nil {
		return r, err
	}
	if err := c.waitTaskManagers(append(slices.Clone(live), spare), 30*time.Second); err != nil {
		return r, err
	}
	warm := recoveryWarmCheckpoints * recoveryParallelism
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := poll.Wait(wctx, func() error {
		files, err := committedParts(out)
		if err != nil {
			return poll.Stop(err)
		}
		if len(files) < warm {
			return fmt.Errorf("%d committed part files, want %d", len(files), warm)
		}
		return nil
	}); err != nil {
		return r, fmt.Errorf("job %s not warm: %w", id, err)
	}
	// Kill at a random point of the checkpoint interval, not just after a commit: a kill may
	// also meet a checkpoint in flight, or one completed whose commits are still under way.
	time.Sleep(rand.N(o.recInterval))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := cl.Job(ctx, id)
	if err != nil {
		return r, err
	}
	if before.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		return r, fmt.Errorf("job %s is %v before the kill", id, before.GetStatus())
	}
	oldAttempt := map[string]int32{}
	for _, t := range before.GetTasks() {
		oldAttempt[taskName(t, before)] = t.GetAttempt()
		if t.GetSubtask() == 0 && r.victim == "" {
			r.victim = t.GetTaskmanager()
		}
	}
	if r.victim == spare {
		return r, fmt.Errorf("job %s runs on the spare %s", id, spare)
	}
	for _, t := range before.GetTasks() {
		if t.GetTaskmanager() == r.victim {
			r.hosted = append(r.hosted, taskName(t, before))
		}
	}
	r.tasks = len(before.GetTasks())
	if err := r.kill(c, r.victim, out, before); err != nil {
		return r, err
	}
	for r.committed == 0 || r.allRunning == 0 {
		// The listing comes first: a part file in it was committed before the status below.
		if err := r.scan(); err != nil {
			return r, err
		}
		d, err := cl.Job(ctx, id)
		if err != nil {
			return r, fmt.Errorf("job status after the kill: %w", err)
		}
		now, restarted := r.observe(d, before)
		if r.detected == 0 && (d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING || restarted) {
			r.detected = now
		}
		r.firstCheckpoint(d)
		if client.IsTerminal(d.GetStatus()) {
			return r, fmt.Errorf("job %s ended %v after the kill: %s", id, d.GetStatus(), d.GetFailureCause())
		}
		if ctx.Err() != nil {
			return r, fmt.Errorf("job %s did not recover within 30 s of the kill (status %v)", id, d.GetStatus())
		}
		time.Sleep(recoveryPoll)
	}
	d, err := cl.Job(ctx, id)
	if err != nil {
		return r, err
	}
	r.firstCheckpoint(d)
	for _, t := range d.GetTasks() {
		if n := taskName(t, d); t.GetAttempt() != oldAttempt[n] {
			r.restarted = append(r.restarted, n)
		}
	}
	for _, e := range d.GetExceptions()[len(before.GetExceptions()):] {
		if r.cause == "" && e.GetTaskmanager() == r.victim {
			r.cause = e.GetCause()
		}
		for _, t := range e.GetRestartedTasks() {
			if !slices.Contains(r.jmRestart, t) {
				r.jmRestart = append(r.jmRestart, t)
			}
		}
	}
	return r, nil
}

// firstCheckpoint records when the first checkpoint completed after recovery was triggered,
// if d shows it.
func (r *recoveryResult) firstCheckpoint(d *pb.JobDetails) {
	if cp := d.GetLastCheckpoint(); r.cpTrigger == 0 && r.running != 0 && cp.GetId() > r.restoredID && cp.GetTriggerTime() != nil {
		r.cpTrigger = cp.GetTriggerTime().AsTime().Sub(r.killed)
	}
}

// taskName is how the JobManager names a task: "<vertex> (<subtask+1>/<parallelism>)".
func taskName(t *pb.TaskDetails, d *pb.JobDetails) string {
	return fmt.Sprintf("%s (%d/%d)", t.GetOperator(), t.GetSubtask()+1, d.GetParallelism())
}

// allTasksRunning reports whether the job and every task are RUNNING.
func allTasksRunning(d *pb.JobDetails) bool {
	return client.RunningAt(d, 0) == nil
}

// committedParts lists the committed part files of a file sink directory: visible files
// named part-*; hidden ones (leading dot) are in progress or pending.
func committedParts(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "part-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// afterKill is what the recovery and ha sections measure alike after a SIGKILL, each time
// from it: the job RUNNING again, all its tasks RUNNING, and its first new committed output.
// It tells that output from part files that are not new output: those visible at the kill,
// those that appeared before the job was RUNNING again (a checkpoint completed before the
// failover committed them) and those holding only data written before the kill (a restored
// transaction re-committed, a late commit, an older pending file).
type afterKill struct {
	killed        time.Time
	attemptBefore int32 // the highest task attempt before the kill

	running    time.Duration // the job is RUNNING again, restarted (the restarted tasks are being deployed)
	allRunning time.Duration // every task of the job is RUNNING
	restarts   int32         // the job's restarts when it was RUNNING again
	restoredID int64

	committed  time.Duration // when the first new part file was listed
	firstParts []string      // the new part files of that listing
	olderData  int           // part files committed after the kill with data only from before it
	early      int           // part files committed after the kill, before the job was RUNNING again

	dir  string
	seen map[string]bool // part files that are not new output
}

// kill records the part files in dir visible now and the highest task attempt of before,
// the job's details just read, then SIGKILLs the process victim.
func (a *afterKill) kill(c *cluster, victim, dir string, before *pb.JobDetails) error {
	files, err := committedParts(dir)
	if err != nil {
		return err
	}
	a.dir, a.seen = dir, map[string]bool{}
	for _, f := range files {
		a.seen[f] = true
	}
	for _, t := range before.GetTasks() {
		a.attemptBefore = max(a.attemptBefore, t.GetAttempt())
	}
	a.killed, err = c.kill(victim)
	return err
}

// observe records from the job's details d, read after the kill, whether it is RUNNING again
// and all its tasks are, restarted since before. It returns the time since the kill and
// whether the job restarted.
func (a *afterKill) observe(d, before *pb.JobDetails) (now time.Duration, restarted bool) {
	now = time.Since(a.killed)
	restarted = d.GetRestarts() > before.GetRestarts()
	if a.running == 0 && restarted && d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING {
		a.running, a.restarts, a.restoredID = now, d.GetRestarts(), d.GetRestoredCheckpointId()
	}
	if a.allRunning == 0 && restarted && allTasksRunning(d) {
		a.allRunning = now
	}
	return now, restarted
}

// scan lists the directory once. A part file in the listing that is new output was committed
// before the next status read, and after the job was RUNNING again if a status read before
// the listing showed it.
func (a *afterKill) scan() error {
	files, err := committedParts(a.dir)
	if err != nil {
		return err
	}
	listed := time.Since(a.killed)
	for _, f := range files {
		if a.seen[f] || (a.committed != 0 && a.committed != listed) {
			continue
		}
		st, err := os.Stat(filepath.Join(a.dir, f))
		if err != nil {
			return err
		}
		if !st.ModTime().After(a.killed) {
			a.seen[f] = true
			a.olderData++
			continue
		}
		if a.running == 0 {
			a.seen[f] = true
			a.early++
			continue
		}
		a.committed = listed
		a.firstParts = append(a.firstParts, f)
	}
	return nil
}

// outputText describes the first new part files "part-<subtask>-<attempt>-<n>.jsonl" by who
// wrote them (restarted tasks run an attempt above every attempt before the kill) and the
// part files not counted.
func (a *afterKill) outputText() string {
	restarted := 0
	for _, name := range a.firstParts {
		if f := strings.Split(name, "-"); len(f) >= 4 {
			if n, err := strconv.Atoi(f[2]); err == nil && int32(n) > a.attemptBefore {
				restarted++
			}
		}
	}
	s := fmt.Sprintf("%d part %s, %d by restarted tasks, %d by tasks that kept running",
		len(a.firstParts), plural(len(a.firstParts), "file"), restarted, len(a.firstParts)-restarted)
	if a.olderData > 0 {
		s += fmt.Sprintf("; not counted: %d part %s committed after the kill with data written before it", a.olderData, plural(a.olderData, "file"))
	}
	if a.early > 0 {
		s += fmt.Sprintf("; not counted: %d part %s committed after the kill, before the job was RUNNING again", a.early, plural(a.early, "file"))
	}
	return s
}
