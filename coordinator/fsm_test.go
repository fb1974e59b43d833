package coordinator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// ts returns a fixed timestamp sec seconds after a base time.
func ts(sec int) *timestamppb.Timestamp {
	return timestamppb.New(time.Date(2025, 3, 1, 12, 0, sec, 0, time.UTC))
}

// applier feeds commands to an fsm as committed log entries with growing indexes.
type applier struct {
	t     *testing.T
	f     *fsm
	index uint64
	term  uint64 // the Raft term of the entries
}

func newApplier(t *testing.T) *applier { return &applier{t: t, f: newFSM(discardLog)} }

// apply marshals cmd, applies it and returns the FSM's response as an error (nil when none).
func (a *applier) apply(cmd *pb.RaftCommand) error {
	a.t.Helper()
	data, err := proto.Marshal(cmd)
	if err != nil {
		a.t.Fatalf("marshal %v: %v", cmd, err)
	}
	a.index++
	res := a.f.Apply(&raft.Log{Type: raft.LogCommand, Index: a.index, Term: a.term, Data: data})
	if res == nil {
		return nil
	}
	err, ok := res.(error)
	if !ok {
		a.t.Fatalf("Apply(%v) = %T %v, want nil or an error", cmd, res, res)
	}
	return err
}

func submitCmd(id, name string, at *timestamppb.Timestamp) *pb.RaftCommand {
	return &pb.RaftCommand{Time: at, Op: &pb.RaftCommand_SubmitJob{SubmitJob: &pb.SubmitJobCommand{
		JobId: id, Graph: &pb.JobGraph{Name: name, Config: map[string]string{"k": name}},
	}}}
}

func statusCmd(id string, s pb.JobStatus, cause string, at *timestamppb.Timestamp) *pb.RaftCommand {
	return &pb.RaftCommand{Time: at, Op: &pb.RaftCommand_UpdateJobStatus{UpdateJobStatus: &pb.UpdateJobStatusCommand{
		JobId: id, Status: s, FailureCause: cause,
	}}}
}

const (
	created    = pb.JobStatus_JOB_STATUS_CREATED
	running    = pb.JobStatus_JOB_STATUS_RUNNING
	restarting = pb.JobStatus_JOB_STATUS_RESTARTING
	failing    = pb.JobStatus_JOB_STATUS_FAILING
	cancelling = pb.JobStatus_JOB_STATUS_CANCELLING
	finished   = pb.JobStatus_JOB_STATUS_FINISHED
	failed     = pb.JobStatus_JOB_STATUS_FAILED
	canceled   = pb.JobStatus_JOB_STATUS_CANCELED
)

func TestFSMSubmitJobTwiceIsNoOp(t *testing.T) {
	a := newApplier(t)
	if err := a.apply(submitCmd("j1", "first", ts(1))); err != nil {
		t.Fatalf("first SubmitJob = %v, want nil", err)
	}
	if err := a.apply(statusCmd("j1", running, "", ts(2))); err != nil {
		t.Fatalf("UpdateJobStatus(RUNNING) = %v, want nil", err)
	}
	before := a.f.list()
	// The same job ID again (a retried proposal), even with another graph and time, changes
	// nothing: not the graph, not the submit time, not the status, and it adds no second job.
	if err := a.apply(submitCmd("j1", "second", ts(3))); err != nil {
		t.Errorf("repeated SubmitJob = %v, want nil", err)
	}
	after := a.f.list()
	if len(after) != 1 {
		t.Fatalf("list() after a repeated SubmitJob has %d jobs, want 1: %v", len(after), after)
	}
	if !proto.Equal(before[0], after[0]) {
		t.Errorf("repeated SubmitJob changed the record:\n got %v\nwant %v", after[0], before[0])
	}
	want := &pb.JobRecord{Id: "j1", Graph: &pb.JobGraph{Name: "first", Config: map[string]string{"k": "first"}},
		Status: running, SubmitTime: ts(1), StartTime: ts(2), Runs: 1}
	if !proto.Equal(after[0], want) {
		t.Errorf("record = %v, want %v", after[0], want)
	}
}

// A status change records the leader that proposed it and the term of its entry, so that the
// next leader can say whom it took the job over from; a repeated status changes nothing.
func TestFSMRecordsTheLeaderOfStatusChanges(t *testing.T) {
	a := newApplier(t)
	if err := a.apply(submitCmd("j1", "job", ts(1))); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		status           pb.JobStatus
		proposer         string
		term             uint64
		wantID, describe string
		wantTerm         uint64
	}{
		{running, "jm1", 3, "jm1", "RUNNING by jm1 in term 3", 3},
		{running, "jm2", 5, "jm1", "RUNNING again (a no-op) by jm2 in term 5", 3},
		{restarting, "jm2", 5, "jm2", "RESTARTING by jm2 in term 5", 5},
	}
	for i, st := range steps {
		cmd := statusCmd("j1", st.status, "", ts(2+i))
		cmd.Proposer, a.term = st.proposer, st.term
		if err := a.apply(cmd); err != nil {
			t.Fatalf("%s: %v", st.describe, err)
		}
		rec, _ := a.f.job("j1")
		if rec.GetLeaderId() != st.wantID || rec.GetLeaderTerm() != st.wantTerm {
			t.Errorf("after %s: leader %q in term %d, want %q in term %d", st.describe, rec.GetLeaderId(), rec.GetLeaderTerm(), st.wantID, st.wantTerm)
		}
	}
}

func TestFSMSubmitKeepsOrder(t *testing.T) {
	a := newApplier(t)
	ids := []string{"c", "a", "b"}
	for i, id := range ids {
		if err := a.apply(submitCmd(id, "job-"+id, ts(i))); err != nil {
			t.Fatalf("SubmitJob(%s) = %v", id, err)
		}
	}
	var got []string
	for _, r := range a.f.list() {
		got = append(got, r.GetId())
		if r.GetStatus() != created {
			t.Errorf("job %s status = %v, want %v", r.GetId(), r.GetStatus(), created)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("list() ids = %v, want submission order %v", got, ids)
	}
	if j, ok := a.f.job("a"); !ok || j.GetSubmitTime().AsTime() != ts(1).AsTime() {
		t.Errorf("job(a) = %v, %v; want submit time %v", j, ok, ts(1).AsTime())
	}
	if _, ok := a.f.job("zzz"); ok {
		t.Errorf("job(zzz) found, want not found")
	}
}

func TestFSMUpdateJobStatus(t *testing.T) {
	type step struct {
		status  pb.JobStatus
		cause   string
		at      int
		wantErr error // nil, ErrJobTerminal or ErrJobNotFound
		job     string
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  *pb.JobRecord
	}{
		{
			name:  "created to running sets start time and counts a run",
			steps: []step{{status: running, at: 10}},
			want:  &pb.JobRecord{Status: running, StartTime: ts(10), Runs: 1},
		},
		{
			name:  "repeating the current status is a no-op",
			steps: []step{{status: running, at: 10}, {status: running, at: 20}},
			want:  &pb.JobRecord{Status: running, StartTime: ts(10), Runs: 1},
		},
		{
			name:  "running to finished sets end time and no cause",
			steps: []step{{status: running, at: 10}, {status: finished, at: 30}},
			want:  &pb.JobRecord{Status: finished, StartTime: ts(10), EndTime: ts(30), Runs: 1},
		},
		{
			name:  "running to failed keeps the failure cause",
			steps: []step{{status: running, at: 10}, {status: failing, at: 20}, {status: failed, cause: "boom", at: 30}},
			want:  &pb.JobRecord{Status: failed, StartTime: ts(10), EndTime: ts(30), FailureCause: "boom", Runs: 1},
		},
		{
			name:  "running to canceled",
			steps: []step{{status: running, at: 10}, {status: cancelling, at: 20}, {status: canceled, at: 30}},
			want:  &pb.JobRecord{Status: canceled, StartTime: ts(10), EndTime: ts(30), Runs: 1},
		},
		{
			name:  "a restart counts a run and keeps the first start time",
			steps: []step{{status: running, at: 10}, {status: restarting, at: 20}, {status: running, at: 30}},
			want:  &pb.JobRecord{Status: running, StartTime: ts(10), Runs: 2},
		},
		{
			name:  "canceled before it ran",
			steps: []step{{status: canceled, at: 5}},
			want:  &pb.JobRecord{Status: canceled, EndTime: ts(5)},
		},
		{
			name: "finished cannot run again",
			steps: []step{{status: running, at: 10}, {status: finished, at: 30},
				{status: running, at: 40, wantErr: ErrJobTerminal}},
			want: &pb.JobRecord{Status: finished, StartTime: ts(10), EndTime: ts(30), Runs: 1},
		},
		{
			name: "failed cannot become finished or lose its cause",
			steps: []step{{status: running, at: 10}, {status: failed, cause: "boom", at: 30},
				{status: finished, at: 40, wantErr: ErrJobTerminal},
				{status: canceled, cause: "other", at: 50, wantErr: ErrJobTerminal}},
			want: &pb.JobRecord{Status: failed, StartTime: ts(10), EndTime: ts(30), FailureCause: "boom", Runs: 1},
		},
		{
			name: "canceled cannot restart",
			steps: []step{{status: running, at: 10}, {status: canceled, at: 30},
				{status: restarting, at: 40, wantErr: ErrJobTerminal}},
			want: &pb.JobRecord{Status: canceled, StartTime: ts(10), EndTime: ts(30), Runs: 1},
		},
		{
			name:  "unknown job",
			steps: []step{{job: "nope", status: running, at: 10, wantErr: ErrJobNotFound}},
			want:  &pb.JobRecord{Status: created},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			if err := a.apply(submitCmd("j1", "job", ts(1))); err != nil {
				t.Fatalf("SubmitJob = %v", err)
			}
			for i, s := range tc.steps {
				id := s.job
				if id == "" {
					id = "j1"
				}
				before := a.f.list()
				err := a.apply(statusCmd(id, s.status, s.cause, ts(s.at)))
				switch {
				case s.wantErr == nil && err != nil:
					t.Fatalf("step %d: UpdateJobStatus(%s, %v) = %v, want nil", i, id, s.status, err)
				case s.wantErr != nil && !errors.Is(err, s.wantErr):
					t.Fatalf("step %d: UpdateJobStatus(%s, %v) = %v, want an error wrapping %v", i, id, s.status, err, s.wantErr)
				case s.wantErr != nil:
					after := a.f.list()
					if len(after) != len(before) || !proto.Equal(after[0], before[0]) {
						t.Errorf("step %d: rejected UpdateJobStatus(%s, %v) changed the state:\n got %v\nwant %v", i, id, s.status, after, before)
					}
				}
			}
			got, ok := a.f.job("j1")
			if !ok {
				t.Fatalf("job(j1) not found")
			}
			want := proto.Clone(tc.want).(*pb.JobRecord)
			want.Id, want.SubmitTime = "j1", ts(1)
			want.Graph = &pb.JobGraph{Name: "job", Config: map[string]string{"k": "job"}}
			if !proto.Equal(got, want) {
				t.Errorf("job(j1) =\n %v\nwant\n %v", got, want)
			}
			if _, ok := a.f.job("nope"); ok {
				t.Errorf("job(nope) exists after an update of an unknown job")
			}
		})
	}
}

// rawEntry marshals cmd for a test that applies it as a raft.Log itself.
func rawEntry(t *testing.T, cmd *pb.RaftCommand) []byte {
	t.Helper()
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// An entry of the log is input: a forged AppendEntries put an undecodable entry in the log, and
// the FSM panicked on it again at every restart. Now every entry that does not decode, holds no
// known command, or holds an invalid one is rejected: the state stays as it was, the error is
// the entry's result, and the rejection is logged with the entry's index and term.
func TestFSMRejectsInvalidEntries(t *testing.T) {
	vertex := func(id, par int32) *pb.JobVertex { return &pb.JobVertex{Id: id, Parallelism: par} }
	submit := func(id string, g *pb.JobGraph, restore *pb.CompletedCheckpoint) *pb.RaftCommand {
		return &pb.RaftCommand{Op: &pb.RaftCommand_SubmitJob{SubmitJob: &pb.SubmitJobCommand{JobId: id, Graph: g, Restore: restore}}}
	}
	complete := func(job string, cp *pb.CompletedCheckpoint) *pb.RaftCommand {
		return &pb.RaftCommand{Op: &pb.RaftCommand_CompleteCheckpoint{CompleteCheckpoint: &pb.CompleteCheckpointCommand{JobId: job, Checkpoint: cp}}}
	}
	rescale := func(job string, g *pb.JobGraph) *pb.RaftCommand {
		return &pb.RaftCommand{Op: &pb.RaftCommand_RescaleJob{RescaleJob: &pb.RescaleJobCommand{JobId: job, Graph: g}}}
	}
	good := &pb.JobGraph{Name: "g", Vertices: []*pb.JobVertex{vertex(0, 1), vertex(1, 2)}, Edges: []*pb.JobEdge{{Source: 0, Target: 1}}}
	// An op field number no version knows (field 99, length 0): it decodes as an unknown field.
	unknownOp := append(rawEntry(t, &pb.RaftCommand{Time: ts(1)}), 0x9a, 0x06, 0x00)
	for _, tc := range []struct {
		name    string
		data    []byte
		wantErr error  // wrapped by the result
		want    string // in the result's message
	}{
		{"truncated varint", []byte{0xff, 0xff, 0xff}, ErrInvalidCommand, "does not decode"},
		{"truncated submit_job", []byte{0x52, 0x05, 0x01}, ErrInvalidCommand, "does not decode"},
		{"no operation", rawEntry(t, &pb.RaftCommand{Time: ts(1)}), ErrInvalidCommand, "no command"},
		{"unknown operation", unknownOp, ErrInvalidCommand, "no command"},
		{"empty job ID", rawEntry(t, submit("", good, nil)), ErrInvalidCommand, "job_id is empty"},
		{"job ID with a path", rawEntry(t, submit("../../etc", good, nil)), ErrInvalidCommand, `job_id "../../etc" has a character`},
		{"job ID too long", rawEntry(t, submit(strings.Repeat("a", maxJobIDLen+1), good, nil)), ErrInvalidCommand, "the limit is 64"},
		{"no graph", rawEntry(t, submit("j2", nil, nil)), ErrInvalidCommand, "graph is missing"},
		{"vertex ID not its index", rawEntry(t, submit("j2", &pb.JobGraph{Vertices: []*pb.JobVertex{vertex(3, 1)}}, nil)), ErrInvalidCommand, "vertex 0 has ID 3"},
		{"no subtask", rawEntry(t, submit("j2", &pb.JobGraph{Vertices: []*pb.JobVertex{vertex(0, 0)}}, nil)), ErrInvalidCommand, "parallelism 0"},
		{"edge to nowhere", rawEntry(t, submit("j2", &pb.JobGraph{Vertices: []*pb.JobVertex{vertex(0, 1)}, Edges: []*pb.JobEdge{{Source: 0, Target: 5}}}, nil)),
			ErrInvalidCommand, "edge 0 names vertex 5"},
		{"restore ID 0", rawEntry(t, submit("j2", good, &pb.CompletedCheckpoint{})), ErrInvalidCommand, "checkpoint ID 0 is out of range"},
		{"restore ID beyond the counter's range", rawEntry(t, submit("j2", good, &pb.CompletedCheckpoint{Id: maxCheckpointID + 1})), ErrInvalidCommand, "out of range"},
		{"status unspecified", rawEntry(t, statusCmd("live", pb.JobStatus_JOB_STATUS_UNSPECIFIED, "", ts(1))), ErrInvalidCommand, "not one a job moves to"},
		{"status created", rawEntry(t, statusCmd("live", created, "", ts(1))), ErrInvalidCommand, "not one a job moves to"},
		{"status unknown", rawEntry(t, statusCmd("live", pb.JobStatus(99), "", ts(1))), ErrInvalidCommand, "status 99 is unknown"},
		{"status of an unknown job", rawEntry(t, statusCmd("nope", running, "", ts(1))), ErrJobNotFound, "nope"},
		{"status of an ended job", rawEntry(t, statusCmd("done", running, "", ts(1))), ErrJobTerminal, "done"},
		{"checkpoint ID of an unknown job", rawEntry(t, allocCmd("nope", 1)), ErrJobNotFound, "nope"},
		{"completion without a checkpoint", rawEntry(t, complete("live", nil)), ErrInvalidCommand, "checkpoint is missing"},
		{"completion of checkpoint 0", rawEntry(t, complete("live", &pb.CompletedCheckpoint{})), ErrInvalidCommand, "checkpoint ID 0"},
		{"completion never allocated", rawEntry(t, completeCmd("live", 1000, 1)), nil, "never allocated"},
		{"rescale of an unknown job", rawEntry(t, rescale("nope", good)), ErrJobNotFound, "nope"},
		{"rescale to a broken graph", rawEntry(t, rescale("live", &pb.JobGraph{Vertices: []*pb.JobVertex{vertex(1, 1)}})), ErrInvalidCommand, "vertex 0 has ID 1"},
		{"removal of a job ID with a path", rawEntry(t, removeCmd("done", "../x")), ErrInvalidCommand, `job_id "../x"`},
		{"removal of too many jobs", rawEntry(t, removeCmd(slices.Repeat([]string{"done"}, maxRemoveJobs+1)...)), ErrInvalidCommand, "the limit is 1000"},
		{"jobmanager without a node ID", rawEntry(t, registerJMCmd("", "10.0.0.1:6123")), ErrInvalidCommand, "node_id is empty"},
		{"jobmanager address without a port", rawEntry(t, registerJMCmd("jm1", "10.0.0.1")), ErrInvalidCommand, "rpc_address"},
		{"jobmanager address with port 0", rawEntry(t, registerJMCmd("jm1", "10.0.0.1:0")), ErrInvalidCommand, "port must be a number from 1 to 65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := populated(t)
			var logs bytes.Buffer
			a.f.log = slog.New(slog.NewJSONHandler(&logs, nil))
			before := a.f.state()
			ch := a.f.watch()
			res := a.f.Apply(&raft.Log{Type: raft.LogCommand, Index: 42, Term: 7, Data: tc.data})
			err, ok := res.(error)
			if !ok {
				t.Fatalf("Apply(%x) = %T %v, want an error", tc.data, res, res)
			}
			if (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply(%x) = %v, want an error wrapping %v with %q", tc.data, err, tc.wantErr, tc.want)
			}
			if after := a.f.state(); !proto.Equal(after, before) {
				t.Errorf("a rejected entry changed the state:\n got %v\nwant %v", after, before)
			}
			select {
			case <-ch:
				t.Errorf("a rejected entry woke the watchers")
			default:
			}
			if l := logs.String(); !strings.Contains(l, `"msg":"raft entry rejected"`) || !strings.Contains(l, `"index":42`) || !strings.Contains(l, `"term":7`) {
				t.Errorf("log = %s, want the rejection with index 42 and term 7", l)
			}
		})
	}
}

// The counter of a job never wraps: a job restored from a snapshot with the highest ID cannot
// allocate beyond it.
func TestFSMCheckpointCounterDoesNotWrap(t *testing.T) {
	a := newApplier(t)
	cmd := submitCmd("j1", "job", ts(1))
	cmd.GetSubmitJob().Restore = &pb.CompletedCheckpoint{Id: maxCheckpointID, Path: "chk-x"}
	if err := a.apply(cmd); err != nil {
		t.Fatal(err)
	}
	if err := a.apply(allocCmd("j1", 1)); err == nil || !strings.Contains(err.Error(), "would pass the highest ID") {
		t.Fatalf("allocate beyond the highest ID = %v, want a refusal", err)
	}
	if rec, _ := a.f.job("j1"); rec.GetLastCheckpointId() != maxCheckpointID {
		t.Errorf("counter = %d, want it unchanged at %d", rec.GetLastCheckpointId(), int64(maxCheckpointID))
	}
}

// The leader does not propose a command every replica would reject.
func TestRaftNodeRefusesToProposeAnInvalidCommand(t *testing.T) {
	n := &raftNode{id: "jm-1"} // no Raft: the command must be refused before it gets there
	_, err := n.apply(submitCmd("../j", "job", ts(1)), time.Second)
	if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), "job_id") {
		t.Fatalf("apply(job ID ../j) = %v, want ErrInvalidCommand naming job_id", err)
	}
}

func TestFSMApplyIgnoresNonCommandEntries(t *testing.T) {
	for _, typ := range []raft.LogType{raft.LogNoop, raft.LogBarrier, raft.LogConfiguration} {
		t.Run(typ.String(), func(t *testing.T) {
			f := newFSM(discardLog)
			ch := f.watch()
			if res := f.Apply(&raft.Log{Type: typ, Index: 1, Data: []byte{0xff, 0xff}}); res != nil {
				t.Errorf("Apply(%v) = %v, want nil", typ, res)
			}
			select {
			case <-ch:
				t.Errorf("watch() channel closed by a %v entry, want it open", typ)
			default:
			}
		})
	}
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, canceled bool
	failWrite        bool
}

func (s *memSink) ID() string { return "mem" }

func (s *memSink) Write(p []byte) (int, error) {
	if s.failWrite {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}

func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.canceled = true; return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

// populated returns an fsm with jobs in every kind of state.
func populated(t *testing.T) *applier {
	t.Helper()
	a := newApplier(t)
	for _, cmd := range []*pb.RaftCommand{
		submitCmd("done", "finished-job", ts(1)),
		statusCmd("done", running, "", ts(2)),
		statusCmd("done", finished, "", ts(3)),
		submitCmd("bad", "failed-job", ts(4)),
		statusCmd("bad", running, "", ts(5)),
		statusCmd("bad", failed, "operator \"boom\": injected failure", ts(6)),
		submitCmd("live", "running-job", ts(7)),
		statusCmd("live", running, "", ts(8)),
		statusCmd("live", restarting, "", ts(9)),
		statusCmd("live", running, "", ts(10)),
		submitCmd("new", "created-job", ts(11)),
		allocCmd("live", 64),
		completeCmd("live", 3, 2),
		completeCmd("live", 5, 2),
		registerJMCmd("jm1", "10.0.0.1:6123"),
		registerJMCmd("jm2", "10.0.0.2:6123"),
		registerJMCmd("jm1", "10.0.0.1:7123"), // moved
	} {
		if err, ok := a.applyResult(cmd).(error); ok && err != nil {
			t.Fatalf("apply %v: %v", cmd, err)
		}
	}
	return a
}

func snapshotBytes(t *testing.T, f *fsm) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist() = %v", err)
	}
	if !sink.closed || sink.canceled {
		t.Errorf("Persist left the sink closed=%v canceled=%v, want closed and not canceled", sink.closed, sink.canceled)
	}
	return sink.Bytes()
}

func equalRecords(a, b []*pb.JobRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestFSMSnapshotRestore(t *testing.T) {
	src := populated(t)
	want := src.f.list()
	data := snapshotBytes(t, src.f)

	dst := newApplier(t)
	// Restore must throw away whatever the FSM held before.
	if err := dst.apply(submitCmd("stale", "stale-job", ts(99))); err != nil {
		t.Fatal(err)
	}
	ch := dst.f.watch()
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	got := dst.f.list()
	if !equalRecords(got, want) {
		t.Errorf("list() after Restore =\n %v\nwant\n %v", got, want)
	}
	if live, restored := src.f.state(), dst.f.state(); !proto.Equal(live, restored) {
		t.Errorf("state after Restore =\n %v\nwant the live state\n %v", restored, live)
	}
	if a, _ := dst.f.jobManagerAddr("jm1"); a != "10.0.0.1:7123" {
		t.Errorf("jobManagerAddr(jm1) after Restore = %q, want the latest 10.0.0.1:7123", a)
	}
	if _, ok := dst.f.job("stale"); ok {
		t.Errorf("job(stale) survived Restore, want the old state discarded")
	}
	select {
	case <-ch:
	default:
		t.Errorf("watch() channel not closed by Restore")
	}

	// The restored FSM keeps working: commands apply to the restored records, and its own
	// snapshot round-trips to the same state.
	dst.index = 100
	if err := dst.apply(statusCmd("done", running, "", ts(200))); !errors.Is(err, ErrJobTerminal) {
		t.Errorf("UpdateJobStatus(done, RUNNING) after Restore = %v, want %v", err, ErrJobTerminal)
	}
	if err := dst.apply(statusCmd("new", running, "", ts(201))); err != nil {
		t.Errorf("UpdateJobStatus(new, RUNNING) after Restore = %v, want nil", err)
	}
	if j, _ := dst.f.job("new"); j.GetRuns() != 1 || !proto.Equal(j.GetStartTime(), ts(201)) {
		t.Errorf("job(new) after Restore and RUNNING = %v, want runs 1 and start time %v", j, ts(201).AsTime())
	}
	if err := dst.apply(submitCmd("later", "later-job", ts(202))); err != nil {
		t.Fatal(err)
	}
	if ids := fmt.Sprint(jobIDs(dst.f.list())); ids != "[done bad live new later]" {
		t.Errorf("list() ids after Restore and a submit = %s, want [done bad live new later]", ids)
	}
}

func jobIDs(recs []*pb.JobRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.GetId())
	}
	return out
}

func TestFSMSnapshotIsPointInTime(t *testing.T) {
	a := populated(t)
	want := a.f.list()
	snap, err := a.f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	defer snap.Release()
	// Apply keeps going between Snapshot and Persist (raft runs Persist concurrently).
	for _, cmd := range []*pb.RaftCommand{
		statusCmd("live", canceled, "", ts(50)),
		statusCmd("new", running, "", ts(51)),
		submitCmd("after", "after-snapshot", ts(52)),
	} {
		if err := a.apply(cmd); err != nil {
			t.Fatal(err)
		}
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist() = %v", err)
	}
	f := newFSM(discardLog)
	if err := f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := f.list(); !equalRecords(got, want) {
		t.Errorf("restored snapshot =\n %v\nwant the state at Snapshot()\n %v", got, want)
	}
}

func TestFSMPersistCancelsOnWriteError(t *testing.T) {
	a := populated(t)
	snap, err := a.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &memSink{failWrite: true}
	if err := snap.Persist(sink); err == nil {
		t.Errorf("Persist() into a failing sink = nil, want an error")
	}
	if !sink.canceled {
		t.Errorf("Persist() into a failing sink did not Cancel it")
	}
}

func TestFSMRestoreRejects(t *testing.T) {
	jobs := populated(t).f.list()
	marshal := func(s *pb.FSMSnapshot) []byte {
		b, err := proto.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"newer version", marshal(&pb.FSMSnapshot{Version: fsmVersion + 1, Jobs: jobs}), "version"},
		{"missing version", marshal(&pb.FSMSnapshot{Jobs: jobs}), "version"},
		{"garbage", []byte{0xff, 0xff, 0xff}, "fsm restore"},
		{"job ID with a path", marshal(&pb.FSMSnapshot{Version: fsmVersion, Jobs: []*pb.JobRecord{{Id: "../x", Graph: &pb.JobGraph{}, Status: running}}}), `job_id "../x"`},
		{"job twice", marshal(&pb.FSMSnapshot{Version: fsmVersion, Jobs: []*pb.JobRecord{jobs[0], jobs[0]}}), "in the snapshot twice"},
		{"job without a graph", marshal(&pb.FSMSnapshot{Version: fsmVersion, Jobs: []*pb.JobRecord{{Id: "j", Status: running}}}), "graph is missing"},
		{"job with an edge to nowhere", marshal(&pb.FSMSnapshot{Version: fsmVersion, Jobs: []*pb.JobRecord{{Id: "j", Status: running,
			Graph: &pb.JobGraph{Edges: []*pb.JobEdge{{Source: 0, Target: 1}}}}}}), "edge 0 names vertex 0"},
		{"job without a status", marshal(&pb.FSMSnapshot{Version: fsmVersion, Jobs: []*pb.JobRecord{{Id: "j", Graph: &pb.JobGraph{}}}}), "status 0 is unknown"},
		{"jobmanager without an address", marshal(&pb.FSMSnapshot{Version: fsmVersion, Jobmanagers: []*pb.JobManagerRecord{{NodeId: "jm1"}}}), "jobmanager jm1: rpc_address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			if err := a.apply(submitCmd("mine", "kept", ts(1))); err != nil {
				t.Fatal(err)
			}
			before := a.f.list()
			err := a.f.Restore(io.NopCloser(bytes.NewReader(tc.data)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore(%s) = %v, want an error containing %q", tc.name, err, tc.want)
			}
			if got := a.f.list(); !equalRecords(got, before) {
				t.Errorf("a rejected Restore changed the state:\n got %v\nwant %v", got, before)
			}
		})
	}
}

func TestFSMWatchClosedAfterApply(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  *pb.RaftCommand
	}{
		{"submit", submitCmd("j2", "other", ts(5))},
		{"status change", statusCmd("j1", running, "", ts(5))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t)
			if err := a.apply(submitCmd("j1", "job", ts(1))); err != nil {
				t.Fatal(err)
			}
			ch := a.f.watch()
			select {
			case <-ch:
				t.Fatalf("watch() channel closed before any Apply")
			default:
			}
			if err := a.apply(tc.cmd); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			default:
				t.Fatalf("watch() channel still open after Apply(%v)", tc.cmd)
			}
			// The next watch waits for the next change.
			select {
			case <-a.f.watch():
				t.Errorf("a fresh watch() channel is already closed")
			default:
			}
		})
	}
}

func registerJMCmd(id, addr string) *pb.RaftCommand {
	return &pb.RaftCommand{Op: &pb.RaftCommand_RegisterJobmanager{RegisterJobmanager: &pb.RegisterJobManagerCommand{NodeId: id, RpcAddress: addr}}}
}
