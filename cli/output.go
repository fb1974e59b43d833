package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// The JSON shapes below are flinkctl's output contract: fields may be added, never renamed.

type jobSummaryJSON struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Status    string  `json:"status"`
	StartTime *string `json:"start_time"`
	EndTime   *string `json:"end_time"`
}

type taskJSON struct {
	Operator    string `json:"operator"`
	Subtask     int32  `json:"subtask"`
	Attempt     int32  `json:"attempt"`
	Status      string `json:"status"`
	TaskManager string `json:"taskmanager"`
	RecordsIn   int64  `json:"records_in"`
	RecordsOut  int64  `json:"records_out"`
	// The load of a running task over its TaskManager's last heartbeat interval.
	RecordsInPerSecond  float64 `json:"records_in_per_second"`
	RecordsOutPerSecond float64 `json:"records_out_per_second"`
	BusyRatio           float64 `json:"busy_ratio"`
	BackPressuredRatio  float64 `json:"backpressured_ratio"`
	IdleRatio           float64 `json:"idle_ratio"`
	BytesIn             int64   `json:"bytes_in"`
	BytesOut            int64   `json:"bytes_out"`
	InputWatermark      *int64  `json:"input_watermark,omitempty"`
}

type exceptionJSON struct {
	Time        *string `json:"time"`
	Task        string  `json:"task"`
	TaskManager string  `json:"taskmanager"`
	Cause       string  `json:"cause"`
	// Handling is what the JobManager did: restart, merged, suppressed, unrecoverable, or ""
	// (not a task failure, or the job was already ending).
	Handling       string   `json:"handling"`
	Failover       string   `json:"failover"`
	RestartedTasks []string `json:"restarted_tasks"`
	RestartAttempt int32    `json:"restart_attempt"`
	RestartDelayMs int64    `json:"restart_delay_ms"`
}

type jobStatusJSON struct {
	ID             string          `json:"id"`
	Name           string          `json:"name"`
	Status         string          `json:"status"`
	Parallelism    int32           `json:"parallelism"`
	StartTime      *string         `json:"start_time"`
	EndTime        *string         `json:"end_time"`
	Restarts       int32           `json:"restarts"`
	FailureCause   string          `json:"failure_cause,omitempty"`
	Tasks          []taskJSON      `json:"tasks"`
	Exceptions     []exceptionJSON `json:"exceptions"`
	LastCheckpoint *checkpointJSON `json:"last_checkpoint"`
	// RestoredCheckpointID is the checkpoint the current run restored from (0: none).
	RestoredCheckpointID int64 `json:"restored_checkpoint_id"`
}

// checkpointJSON is one checkpoint (checkpoints, checkpoint, and status's last_checkpoint).
type checkpointJSON struct {
	ID             int64   `json:"id"` // 0: a trigger that could not start a checkpoint
	Status         string  `json:"status"`
	TriggerTime    *string `json:"trigger_time"`
	DurationMs     int64   `json:"duration_ms"`
	StateSizeBytes int64   `json:"state_size_bytes"`
	AlignmentMs    int64   `json:"alignment_ms"`
	Failure        string  `json:"failure"`
	FailureReason  string  `json:"failure_reason"`
	Acknowledged   int32   `json:"acknowledged"`
	Total          int32   `json:"total"`
	Path           string  `json:"path"`
	Manual         bool    `json:"manual"`
	Savepoint      bool    `json:"savepoint"`
	// Unaligned: some task took the checkpoint unaligned; InFlightBytes is the channel state
	// (in-flight data) it persisted, counted in StateSizeBytes too.
	Unaligned     bool  `json:"unaligned"`
	InFlightBytes int64 `json:"in_flight_bytes"`
}

// jobManagerJSON is one member of the JobManagers' Raft group.
type jobManagerJSON struct {
	ID          string `json:"id"`
	Address     string `json:"address"` // RPC address, "" while it is not known
	RaftAddress string `json:"raft_address"`
	Role        string `json:"role"` // Leader, Follower or Candidate; "" when unknown
	Term        uint64 `json:"term"`
	LastIndex   uint64 `json:"last_index"`
	Leader      bool   `json:"leader"`
	// Error says why the member's own status is missing (down, unreachable, address not
	// known yet): role, term and last_index are then unknown. "" otherwise.
	Error string `json:"error"`
}

type taskManagerJSON struct {
	ID            string  `json:"id"`
	Address       string  `json:"address"`
	Slots         int32   `json:"slots"`
	FreeSlots     int32   `json:"free_slots"`
	LastHeartbeat *string `json:"last_heartbeat"`
}

type clusterJSON struct {
	JobManagers  []jobManagerJSON  `json:"jobmanagers"`
	TaskManagers []taskManagerJSON `json:"taskmanagers"`
}

func timeJSON(t *timestamppb.Timestamp) *string {
	if t == nil {
		return nil
	}
	s := t.AsTime().UTC().Format(time.RFC3339Nano)
	return &s
}

func timeText(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05.000")
}

// JobStatusName is the Flink name of a job status (RUNNING, FINISHED, ...).
func JobStatusName(s pb.JobStatus) string { return strings.TrimPrefix(s.String(), "JOB_STATUS_") }

func execStateName(s pb.ExecutionState) string {
	return strings.TrimPrefix(s.String(), "EXECUTION_STATE_")
}

// handlingName is the lowercase name of a failure handling (restart, merged, suppressed,
// unrecoverable), or "" for unspecified.
func handlingName(h pb.FailureHandling) string {
	if h == pb.FailureHandling_FAILURE_HANDLING_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(h.String(), "FAILURE_HANDLING_"))
}

// checkpointStatusName is IN_PROGRESS, COMPLETED or FAILED.
func checkpointStatusName(s pb.CheckpointStatus) string {
	return strings.TrimPrefix(s.String(), "CHECKPOINT_STATUS_")
}

// failureReasonName is Flink's name of a checkpoint failure reason (CHECKPOINT_EXPIRED, ...),
// or "" for none.
func failureReasonName(r pb.CheckpointFailureReason) string {
	if r == pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_UNSPECIFIED {
		return ""
	}
	return strings.TrimPrefix(r.String(), "CHECKPOINT_FAILURE_REASON_")
}

func checkpointOut(c *pb.CheckpointInfo) checkpointJSON {
	return checkpointJSON{
		ID: c.GetId(), Status: checkpointStatusName(c.GetStatus()), TriggerTime: timeJSON(c.GetTriggerTime()),
		DurationMs: c.GetDurationMs(), StateSizeBytes: c.GetStateSizeBytes(), AlignmentMs: c.GetAlignmentMs(),
		Failure: c.GetFailure(), FailureReason: failureReasonName(c.GetFailureReason()),
		Acknowledged: c.GetAcknowledged(), Total: c.GetTotal(), Path: c.GetPath(), Manual: c.GetManual(),
		Savepoint: c.GetSavepoint(), Unaligned: c.GetUnaligned(), InFlightBytes: c.GetInFlightBytes(),
	}
}

// mapSlice is f of every element of in; empty, not nil, for none (JSON [], not null).
func mapSlice[T, U any](in []T, f func(T) U) []U {
	out := make([]U, 0, len(in))
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}

func summaryJSON(j *pb.JobSummary) jobSummaryJSON {
	return jobSummaryJSON{ID: j.GetId(), Name: j.GetName(), Status: JobStatusName(j.GetStatus()), StartTime: timeJSON(j.GetStartTime()), EndTime: timeJSON(j.GetEndTime())}
}

func statusJSON(d *pb.JobDetails) jobStatusJSON {
	out := jobStatusJSON{
		ID: d.GetId(), Name: d.GetName(), Status: JobStatusName(d.GetStatus()), Parallelism: d.GetParallelism(),
		StartTime: timeJSON(d.GetStartTime()), EndTime: timeJSON(d.GetEndTime()), Restarts: d.GetRestarts(),
		FailureCause: d.GetFailureCause(), RestoredCheckpointID: d.GetRestoredCheckpointId(),
		Tasks: mapSlice(d.GetTasks(), func(t *pb.TaskDetails) taskJSON {
			l := t.GetLoad()
			tj := taskJSON{Operator: t.GetOperator(), Subtask: t.GetSubtask(), Attempt: t.GetAttempt(),
				Status: execStateName(t.GetStatus()), TaskManager: t.GetTaskmanager(), RecordsIn: t.GetRecordsIn(), RecordsOut: t.GetRecordsOut(),
				RecordsInPerSecond: l.GetRecordsInPerSecond(), RecordsOutPerSecond: l.GetRecordsOutPerSecond(),
				BusyRatio: l.GetBusyTimeMsPerSecond() / 1000, BackPressuredRatio: l.GetBackPressuredTimeMsPerSecond() / 1000,
				IdleRatio: l.GetIdleTimeMsPerSecond() / 1000, BytesIn: l.GetBytesIn(), BytesOut: l.GetBytesOut()}
			if l.GetHasWatermarks() && l.GetInputWatermark() != math.MinInt64 {
				wm := l.GetInputWatermark()
				tj.InputWatermark = &wm
			}
			return tj
		}),
		Exceptions: mapSlice(d.GetExceptions(), func(e *pb.ExceptionEntry) exceptionJSON {
			return exceptionJSON{Time: timeJSON(e.GetTime()), Task: e.GetTask(), TaskManager: e.GetTaskmanager(), Cause: e.GetCause(),
				Handling: handlingName(e.GetHandling()), Failover: e.GetFailover(), RestartedTasks: append([]string{}, e.GetRestartedTasks()...),
				RestartAttempt: e.GetRestartAttempt(), RestartDelayMs: e.GetRestartDelayMs()}
		}),
	}
	if lc := d.GetLastCheckpoint(); lc != nil {
		cp := checkpointOut(lc)
		out.LastCheckpoint = &cp
	}
	return out
}

func clusterOut(c *pb.GetClusterResponse) clusterJSON {
	return clusterJSON{
		JobManagers: mapSlice(c.GetJobmanagers(), func(j *pb.JobManagerInfo) jobManagerJSON {
			return jobManagerJSON{ID: j.GetId(), Address: j.GetAddress(), RaftAddress: j.GetRaftAddress(),
				Role: j.GetRole(), Term: j.GetTerm(), LastIndex: j.GetLastIndex(), Leader: j.GetLeader(), Error: j.GetError()}
		}),
		TaskManagers: mapSlice(c.GetTaskmanagers(), func(t *pb.TaskManagerInfo) taskManagerJSON {
			return taskManagerJSON{ID: t.GetId(), Address: t.GetAddress(), Slots: t.GetSlots(),
				FreeSlots: t.GetFreeSlots(), LastHeartbeat: timeJSON(t.GetLastHeartbeat())}
		}),
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "a -> b", not "a -\u003e b"
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeList(w io.Writer, jobs []*pb.JobSummary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tNAME\tSTATUS\tSTART\tEND")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.GetId(), j.GetName(), JobStatusName(j.GetStatus()), timeText(j.GetStartTime()), timeText(j.GetEndTime()))
	}
	return tw.Flush()
}

func writeStatus(w io.Writer, d *pb.JobDetails) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Job:\t%s\nName:\t%s\nStatus:\t%s\nParallelism:\t%d\nRestarts:\t%d\nStart:\t%s\nEnd:\t%s\n",
		d.GetId(), d.GetName(), JobStatusName(d.GetStatus()), d.GetParallelism(), d.GetRestarts(), timeText(d.GetStartTime()), timeText(d.GetEndTime()))
	if d.GetFailureCause() != "" {
		fmt.Fprintf(tw, "Failure:\t%s\n", d.GetFailureCause())
	}
	if lc := d.GetLastCheckpoint(); lc != nil {
		fmt.Fprintf(tw, "Last checkpoint:\t%s (%s, %s, %s)\n", checkpointIDText(lc.GetId()), checkpointStatusName(lc.GetStatus()),
			msText(lc.GetDurationMs()), bytesText(lc.GetStateSizeBytes()))
	}
	if id := d.GetRestoredCheckpointId(); id != 0 {
		fmt.Fprintf(tw, "Restored from checkpoint:\t%d\n", id)
	}
	// A line without a tab ends a table: the tasks' columns are aligned on their own.
	if len(d.GetTasks()) > 0 {
		fmt.Fprintln(tw, "\nTasks:")
		fmt.Fprintln(tw, "OPERATOR\tSUBTASK\tATTEMPT\tSTATUS\tTASKMANAGER\tRECORDS IN\tRECORDS OUT\tIN/S\tOUT/S\tBUSY\tBACKPRESSURED")
		for _, t := range d.GetTasks() {
			l := t.GetLoad()
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", t.GetOperator(), t.GetSubtask(), t.GetAttempt(), execStateName(t.GetStatus()),
				t.GetTaskmanager(), t.GetRecordsIn(), t.GetRecordsOut(), rateText(l, l.GetRecordsInPerSecond()), rateText(l, l.GetRecordsOutPerSecond()),
				ratioText(l, l.GetBusyTimeMsPerSecond()), ratioText(l, l.GetBackPressuredTimeMsPerSecond()))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.GetExceptions()) > 0 {
		fmt.Fprintln(w, "\nExceptions:")
		for _, e := range d.GetExceptions() {
			where := e.GetTask()
			if tm := e.GetTaskmanager(); tm != "" {
				where += " on " + tm
			}
			fmt.Fprintf(w, "  %s  %s: %s\n", timeText(e.GetTime()), where, e.GetCause())
			if h := handlingText(e); h != "" {
				fmt.Fprintf(w, "    → %s\n", h)
			}
		}
	}
	return nil
}

// maxRestartedTasks is how many restarted tasks a handling line names before "… and N more".
const maxRestartedTasks = 4

// handlingText describes what the JobManager did about a failure, or "" when the entry does
// not say (not a task failure, or the job was already ending):
//
//	restart 3 after 1.5 s (region failover: 2 tasks: numbers (2/4), out (2/4))
//	merged into pending restart 3 (region failover: 1 task: out (1/4))
//	job failed: recovery suppressed by the restart strategy
//	job failed: unrecoverable error
func handlingText(e *pb.ExceptionEntry) string {
	switch e.GetHandling() {
	case pb.FailureHandling_FAILURE_HANDLING_RESTART:
		when := "immediately"
		if ms := e.GetRestartDelayMs(); ms > 0 {
			when = "after " + msText(ms)
		}
		return fmt.Sprintf("restart %d %s%s", e.GetRestartAttempt(), when, restartScope(e))
	case pb.FailureHandling_FAILURE_HANDLING_MERGED:
		return fmt.Sprintf("merged into pending restart %d%s", e.GetRestartAttempt(), restartScope(e))
	case pb.FailureHandling_FAILURE_HANDLING_SUPPRESSED:
		return "job failed: recovery suppressed by the restart strategy"
	case pb.FailureHandling_FAILURE_HANDLING_UNRECOVERABLE:
		return "job failed: unrecoverable error"
	}
	return handlingName(e.GetHandling()) // "" for unspecified, or a handling this flinkctl does not know yet
}

// restartScope is " (region failover: 2 tasks: a (1/2), b (1/2))", naming at most
// maxRestartedTasks tasks, or "" when the entry names neither a strategy nor tasks.
func restartScope(e *pb.ExceptionEntry) string {
	var parts []string
	if f := e.GetFailover(); f != "" {
		parts = append(parts, f+" failover")
	}
	if tasks := e.GetRestartedTasks(); len(tasks) > 0 {
		shown := tasks[:min(len(tasks), maxRestartedTasks)]
		list := strings.Join(shown, ", ")
		if more := len(tasks) - len(shown); more > 0 {
			list += fmt.Sprintf(", … and %d more", more)
		}
		parts = append(parts, plural(len(tasks), "task")+": "+list)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ": ") + ")"
}

// leaderMark marks the leader's row in flinkctl cluster.
const leaderMark = "*"

// clusterGaps says what a cluster view lacks: the status of a JobManager that could not be
// asked, or the TaskManagers, which only the leader lists (none is known, or another member
// answered).
func clusterGaps(c *pb.GetClusterResponse) []string {
	var gaps []string
	leader := ""
	for _, j := range c.GetJobmanagers() {
		if j.GetError() != "" {
			gaps = append(gaps, fmt.Sprintf("jobmanager %s could not be asked (%s)", j.GetId(), j.GetError()))
		}
		if j.GetLeader() {
			leader = j.GetId()
		}
	}
	switch {
	case leader == "":
		gaps = append(gaps, "no leader is known (an election may be under way), so no TaskManagers are listed")
	case c.GetAnsweredBy() != leader:
		gaps = append(gaps, fmt.Sprintf("the leader %s could not be asked, so no TaskManagers are listed (only the leader tracks them)", leader))
	}
	return gaps
}

// writeCluster writes the JobManagers (the leader marked; members whose status is missing
// shown with "-" and the reason below the table) and the TaskManagers.
func writeCluster(w io.Writer, c *pb.GetClusterResponse) error {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOBMANAGER\tRPC ADDRESS\tRAFT ADDRESS\tROLE\tTERM\tLAST INDEX\tLEADER")
	var notes []string
	leaders := 0
	for _, j := range c.GetJobmanagers() {
		term, index, mark := fmt.Sprint(j.GetTerm()), fmt.Sprint(j.GetLastIndex()), ""
		if j.GetError() != "" {
			term, index = "-", "-"
			notes = append(notes, fmt.Sprintf("%s: %s", j.GetId(), j.GetError()))
		}
		if j.GetLeader() {
			mark = leaderMark
			leaders++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.GetId(), orDash(j.GetAddress()), orDash(j.GetRaftAddress()),
			orDash(j.GetRole()), term, index, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(&buf, n)
	}
	if leaders == 0 {
		fmt.Fprintln(&buf, "No leader is known: an election may be under way.")
	}
	fmt.Fprintln(&buf)
	tw = tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASKMANAGER\tADDRESS\tSLOTS\tFREE\tLAST HEARTBEAT")
	for _, t := range c.GetTaskmanagers() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.GetId(), orDash(t.GetAddress()), t.GetSlots(), t.GetFreeSlots(), timeText(t.GetLastHeartbeat()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The leader column is empty on the other rows: no trailing blanks.
	_, err := io.WriteString(w, trailingBlanks.ReplaceAllString(buf.String(), ""))
	return err
}

var trailingBlanks = regexp.MustCompile(`(?m) +$`)

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// maxFailureText is how many characters of a checkpoint failure the table shows.
const maxFailureText = 80

func writeCheckpoints(w io.Writer, cps []*pb.CheckpointInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATUS\tTRIGGERED\tDURATION\tSIZE\tIN-FLIGHT\tALIGNMENT\tACKS\tFAILURE")
	for _, c := range cps {
		done := c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
		// A measure shows once the checkpoint completed, or as far as it got.
		measure := func(v int64, text func(int64) string) string {
			if done || v > 0 {
				return text(v)
			}
			return "-"
		}
		acks := "-"
		if c.GetTotal() > 0 {
			acks = fmt.Sprintf("%d/%d", c.GetAcknowledged(), c.GetTotal())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", checkpointIDText(c.GetId()), checkpointKind(c), checkpointStatusName(c.GetStatus()),
			timeText(c.GetTriggerTime()), measure(c.GetDurationMs(), msText), measure(c.GetStateSizeBytes(), bytesText),
			measure(c.GetInFlightBytes(), bytesText), measure(c.GetAlignmentMs(), msText), acks, orDash(truncate(failureText(c), maxFailureText)))
	}
	return tw.Flush()
}

// checkpointKind is Flink's type of a checkpoint as its dashboard shows it: savepoint (always
// aligned), unaligned checkpoint (some task took it unaligned, as far as the tasks that
// acknowledged tell) or aligned checkpoint.
func checkpointKind(c *pb.CheckpointInfo) string {
	switch {
	case c.GetSavepoint():
		return "savepoint"
	case c.GetUnaligned():
		return "unaligned checkpoint"
	}
	return "aligned checkpoint"
}

// checkpointIDText is the ID, or "-" for a trigger that could not start a checkpoint (ID 0).
func checkpointIDText(id int64) string {
	if id == 0 {
		return "-"
	}
	return fmt.Sprint(id)
}

// failureText is "REASON: message" (either part may be missing), on one line.
func failureText(c *pb.CheckpointInfo) string {
	parts := make([]string, 0, 2)
	if r := failureReasonName(c.GetFailureReason()); r != "" {
		parts = append(parts, r)
	}
	if f := strings.Join(strings.Fields(c.GetFailure()), " "); f != "" {
		parts = append(parts, f)
	}
	return strings.Join(parts, ": ")
}

// truncate shortens s to at most n characters, ending it with "…" when it cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// msText formats milliseconds: "35 ms", "2.5 s", "3m20s".
func msText(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// bytesText formats a size in binary units: "512 B", "1.2 KiB", "3.0 MiB".
func bytesText(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n) / 1024
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for v >= 1023.95 && i < len(units)-1 { // 1023.95 would print as 1024.0
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// rateText is a records/s figure of a task's load, "-" without one (the task is not running).
func rateText(l *pb.TaskLoad, perSecond float64) string {
	if l == nil {
		return "-"
	}
	return strconv.FormatFloat(perSecond, 'f', 0, 64)
}

// ratioText is a milliseconds-per-second figure of a task's load as a percentage.
func ratioText(l *pb.TaskLoad, msPerSecond float64) string {
	if l == nil {
		return "-"
	}
	return strconv.FormatFloat(msPerSecond/10, 'f', 0, 64) + "%"
}
