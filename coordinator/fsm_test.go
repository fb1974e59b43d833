package coordinator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

func newApplier(t *testing.T) *applier { return &applier{t: t, f: newFSM()} }

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

func TestFSMApplyPanicsOnUndecodableEntry(t *testing.T) {
	empty, err := proto.Marshal(&pb.RaftCommand{Time: ts(1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string // in the panic message
	}{
		{"truncated varint", []byte{0xff, 0xff, 0xff}, "index 42"},
		{"truncated submit_job", []byte{0x52, 0x05, 0x01}, "index 42"},
		{"no operation", empty, "index 42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFSM()
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				f.Apply(&raft.Log{Type: raft.LogCommand, Index: 42, Data: tc.data})
			}()
			if recovered == nil {
				t.Fatalf("Apply(%x) did not panic", tc.data)
			}
			if msg := fmt.Sprint(recovered); !strings.Contains(msg, tc.want) {
				t.Errorf("Apply(%x) panicked with %q, want it to contain %q", tc.data, msg, tc.want)
			}
			if n := len(f.list()); n != 0 {
				t.Errorf("list() after a panicking Apply has %d jobs, want 0", n)
			}
		})
	}
}

func TestFSMApplyIgnoresNonCommandEntries(t *testing.T) {
	for _, typ := range []raft.LogType{raft.LogNoop, raft.LogBarrier, raft.LogConfiguration} {
		t.Run(typ.String(), func(t *testing.T) {
			f := newFSM()
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
	f := newFSM()
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
