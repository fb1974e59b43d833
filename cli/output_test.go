package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// exceptionKeys are the keys of an exception in status JSON: the documented contract.
var exceptionKeys = []string{"cause", "failover", "handling", "restart_attempt", "restart_delay_ms", "restarted_tasks",
	"task", "taskmanager", "time"}

func TestStatusExceptionHandlingText(t *testing.T) {
	many := make([]string, 7)
	for i := range many {
		many[i] = fmt.Sprintf("numbers (%d/7)", i+1)
	}
	tests := []struct {
		name string
		e    *pb.ExceptionEntry
		want string // the handling line, "" for none
	}{
		{"restart", &pb.ExceptionEntry{Handling: pb.FailureHandling_FAILURE_HANDLING_RESTART, Failover: "region",
			RestartedTasks: []string{"numbers (2/4)", "out (2/4)"}, RestartAttempt: 3, RestartDelayMs: 1500},
			"    → restart 3 after 1.5 s (region failover: 2 tasks: numbers (2/4), out (2/4))"},
		{"restart without delay", &pb.ExceptionEntry{Handling: pb.FailureHandling_FAILURE_HANDLING_RESTART, Failover: "full",
			RestartedTasks: []string{"numbers (1/1)"}, RestartAttempt: 1},
			"    → restart 1 immediately (full failover: 1 task: numbers (1/1))"},
		{"restart of many tasks", &pb.ExceptionEntry{Handling: pb.FailureHandling_FAILURE_HANDLING_RESTART, Failover: "global",
			RestartedTasks: many, RestartAttempt: 2, RestartDelayMs: 250},
			"    → restart 2 after 250 ms (global failover: 7 tasks: numbers (1/7), numbers (2/7), numbers (3/7), numbers (4/7), … and 3 more)"},
		{"merged", &pb.ExceptionEntry{Handling: pb.FailureHandling_FAILURE_HANDLING_MERGED, Failover: "region",
			RestartedTasks: []string{"out (1/4)"}, RestartAttempt: 3, RestartDelayMs: 1500},
			"    → merged into pending restart 3 (region failover: 1 task: out (1/4))"},
		{"merged without scope", &pb.ExceptionEntry{Handling: pb.FailureHandling_FAILURE_HANDLING_MERGED, RestartAttempt: 4},
			"    → merged into pending restart 4"},
		{"suppressed", &pb.ExceptionEntry{Handling: pb.FailureHandling_FAILURE_HANDLING_SUPPRESSED},
			"    → job failed: recovery suppressed by the restart strategy"},
		{"unrecoverable", &pb.ExceptionEntry{Handling: pb.FailureHandling_FAILURE_HANDLING_UNRECOVERABLE},
			"    → job failed: unrecoverable error"},
		{"unspecified", &pb.ExceptionEntry{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.e
			e.Time, e.Task, e.Taskmanager, e.Cause = timestamppb.New(cpTime), "map (2/4)", "tm-1", "division by zero"
			var out bytes.Buffer
			if err := writeStatus(&out, &pb.JobDetails{Id: "j1", Exceptions: []*pb.ExceptionEntry{e}}); err != nil {
				t.Fatal(err)
			}
			_, section, ok := strings.Cut(out.String(), "\nExceptions:\n")
			if !ok {
				t.Fatalf("status output has no Exceptions section:\n%s", out.String())
			}
			want := []string{"  " + timeText(e.Time) + "  map (2/4) on tm-1: division by zero"}
			if tc.want != "" {
				want = append(want, tc.want)
			}
			if got := strings.Split(strings.TrimSuffix(section, "\n"), "\n"); !slices.Equal(got, want) {
				t.Errorf("exceptions of %v =\n%s\nwant\n%s", e, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// An entry of no TaskManager (a leader change, a checkpoint restore) names only its task.
func TestStatusExceptionWithoutTaskManager(t *testing.T) {
	e := &pb.ExceptionEntry{Time: timestamppb.New(cpTime), Task: "jobmanager leader change", Cause: "the JobManager leader changed (jm1 → jm2, term 3)"}
	var out bytes.Buffer
	if err := writeStatus(&out, &pb.JobDetails{Id: "j1", Exceptions: []*pb.ExceptionEntry{e}}); err != nil {
		t.Fatal(err)
	}
	if want := "  " + timeText(e.Time) + "  jobmanager leader change: the JobManager leader changed (jm1 → jm2, term 3)\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status output:\n%s\nwant the line %q", out.String(), want)
	}
}

func TestStatusExceptionsJSON(t *testing.T) {
	d := &pb.JobDetails{Id: "j1", Exceptions: []*pb.ExceptionEntry{
		{Time: timestamppb.New(cpTime), Task: "map (2/4)", Taskmanager: "tm-1", Cause: "boom",
			Handling: pb.FailureHandling_FAILURE_HANDLING_RESTART, Failover: "region",
			RestartedTasks: []string{"numbers (2/4)", "map (2/4)"}, RestartAttempt: 3, RestartDelayMs: 1500},
		{Task: "checkpoint restore", Cause: "corrupt checkpoint"},
		{Task: "map (1/4)", Cause: "evaluate", Handling: pb.FailureHandling_FAILURE_HANDLING_UNRECOVERABLE},
	}}
	var buf bytes.Buffer
	if err := writeJSON(&buf, statusJSON(d)); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Exceptions []map[string]any `json:"exceptions"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil || len(out.Exceptions) != 3 {
		t.Fatalf("status JSON exceptions = %v (%v), want 3:\n%s", out.Exceptions, err, buf.String())
	}
	for i, e := range out.Exceptions {
		var keys []string
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !slices.Equal(keys, exceptionKeys) {
			t.Errorf("exceptions[%d] keys = %v, want %v", i, keys, exceptionKeys)
		}
	}
	checkFields(t, "exceptions[0]", out.Exceptions[0], map[string]any{"handling": "restart", "failover": "region",
		"restart_attempt": 3.0, "restart_delay_ms": 1500.0, "task": "map (2/4)", "taskmanager": "tm-1", "cause": "boom"})
	if got, _ := out.Exceptions[0]["restarted_tasks"].([]any); !slices.Equal(got, []any{"numbers (2/4)", "map (2/4)"}) {
		t.Errorf("exceptions[0] restarted_tasks = %v, want [numbers (2/4) map (2/4)]", out.Exceptions[0]["restarted_tasks"])
	}
	checkFields(t, "exceptions[1]", out.Exceptions[1], map[string]any{"handling": "", "failover": "", "restart_attempt": 0.0,
		"restart_delay_ms": 0.0, "time": nil})
	if got, ok := out.Exceptions[1]["restarted_tasks"].([]any); !ok || len(got) != 0 {
		t.Errorf("exceptions[1] restarted_tasks = %#v, want []", out.Exceptions[1]["restarted_tasks"])
	}
	checkFields(t, "exceptions[2]", out.Exceptions[2], map[string]any{"handling": "unrecoverable"})
}

func TestHandlingName(t *testing.T) {
	for h, want := range map[pb.FailureHandling]string{
		pb.FailureHandling_FAILURE_HANDLING_UNSPECIFIED:   "",
		pb.FailureHandling_FAILURE_HANDLING_RESTART:       "restart",
		pb.FailureHandling_FAILURE_HANDLING_MERGED:        "merged",
		pb.FailureHandling_FAILURE_HANDLING_SUPPRESSED:    "suppressed",
		pb.FailureHandling_FAILURE_HANDLING_UNRECOVERABLE: "unrecoverable",
	} {
		if got := handlingName(h); got != want {
			t.Errorf("handlingName(%v) = %q, want %q", h, got, want)
		}
	}
}
