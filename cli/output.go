package cli

import (
	"encoding/json"
	"fmt"
	"io"
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
}

type exceptionJSON struct {
	Time        *string `json:"time"`
	Task        string  `json:"task"`
	TaskManager string  `json:"taskmanager"`
	Cause       string  `json:"cause"`
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
	LastCheckpoint *struct{}       `json:"last_checkpoint"`
}

type jobManagerJSON struct {
	ID          string `json:"id"`
	Address     string `json:"address"`
	RaftAddress string `json:"raft_address"`
	Role        string `json:"role"`
	Term        uint64 `json:"term"`
	LastIndex   uint64 `json:"last_index"`
	Leader      bool   `json:"leader"`
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

func summaryJSON(j *pb.JobSummary) jobSummaryJSON {
	return jobSummaryJSON{ID: j.GetId(), Name: j.GetName(), Status: JobStatusName(j.GetStatus()), StartTime: timeJSON(j.GetStartTime()), EndTime: timeJSON(j.GetEndTime())}
}

func statusJSON(d *pb.JobDetails) jobStatusJSON {
	out := jobStatusJSON{
		ID: d.GetId(), Name: d.GetName(), Status: JobStatusName(d.GetStatus()), Parallelism: d.GetParallelism(),
		StartTime: timeJSON(d.GetStartTime()), EndTime: timeJSON(d.GetEndTime()), Restarts: d.GetRestarts(),
		FailureCause: d.GetFailureCause(), Tasks: []taskJSON{}, Exceptions: []exceptionJSON{},
	}
	for _, t := range d.GetTasks() {
		out.Tasks = append(out.Tasks, taskJSON{Operator: t.GetOperator(), Subtask: t.GetSubtask(), Attempt: t.GetAttempt(),
			Status: execStateName(t.GetStatus()), TaskManager: t.GetTaskmanager(), RecordsIn: t.GetRecordsIn(), RecordsOut: t.GetRecordsOut()})
	}
	for _, e := range d.GetExceptions() {
		out.Exceptions = append(out.Exceptions, exceptionJSON{Time: timeJSON(e.GetTime()), Task: e.GetTask(), TaskManager: e.GetTaskmanager(), Cause: e.GetCause()})
	}
	return out
}

func clusterOut(c *pb.GetClusterResponse) clusterJSON {
	out := clusterJSON{JobManagers: []jobManagerJSON{}, TaskManagers: []taskManagerJSON{}}
	for _, j := range c.GetJobmanagers() {
		out.JobManagers = append(out.JobManagers, jobManagerJSON{ID: j.GetId(), Address: j.GetAddress(), RaftAddress: j.GetRaftAddress(),
			Role: j.GetRole(), Term: j.GetTerm(), LastIndex: j.GetLastIndex(), Leader: j.GetLeader()})
	}
	for _, t := range c.GetTaskmanagers() {
		out.TaskManagers = append(out.TaskManagers, taskManagerJSON{ID: t.GetId(), Address: t.GetAddress(), Slots: t.GetSlots(),
			FreeSlots: t.GetFreeSlots(), LastHeartbeat: timeJSON(t.GetLastHeartbeat())})
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
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
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.GetTasks()) > 0 {
		fmt.Fprintln(w, "\nTasks:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OPERATOR\tSUBTASK\tATTEMPT\tSTATUS\tTASKMANAGER\tRECORDS IN\tRECORDS OUT")
		for _, t := range d.GetTasks() {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\n", t.GetOperator(), t.GetSubtask(), t.GetAttempt(), execStateName(t.GetStatus()),
				t.GetTaskmanager(), t.GetRecordsIn(), t.GetRecordsOut())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(d.GetExceptions()) > 0 {
		fmt.Fprintln(w, "\nExceptions:")
		for _, e := range d.GetExceptions() {
			fmt.Fprintf(w, "  %s  %s on %s: %s\n", timeText(e.GetTime()), e.GetTask(), e.GetTaskmanager(), e.GetCause())
		}
	}
	return nil
}

func writeCluster(w io.Writer, c *pb.GetClusterResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOBMANAGER\tADDRESS\tRAFT ADDRESS\tROLE\tTERM\tLAST INDEX\tLEADER")
	for _, j := range c.GetJobmanagers() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%v\n", j.GetId(), orDash(j.GetAddress()), j.GetRaftAddress(), orDash(j.GetRole()), j.GetTerm(), j.GetLastIndex(), j.GetLeader())
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "TASKMANAGER\tADDRESS\tSLOTS\tFREE\tLAST HEARTBEAT")
	for _, t := range c.GetTaskmanagers() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.GetId(), t.GetAddress(), t.GetSlots(), t.GetFreeSlots(), timeText(t.GetLastHeartbeat()))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
