package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// fsmHost is a job master's host on a real FSM, with the commands applied directly (no Raft).
type fsmHost struct {
	f     *fsm
	index atomic.Uint64
}

func (h *fsmHost) apply(cmd *pb.RaftCommand) any {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return err
	}
	return h.f.Apply(&raft.Log{Type: raft.LogCommand, Index: h.index.Add(1), Term: 1, Data: data})
}

func (h *fsmHost) setJobStatus(_ context.Context, id string, s pb.JobStatus, cause string) (*pb.JobRecord, error) {
	if err, _ := h.apply(statusCmd(id, s, cause, timestamppb.Now())).(error); err != nil {
		return nil, err
	}
	rec, ok := h.f.job(id)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	return rec, nil
}

func (h *fsmHost) allocateCheckpointIDs(id string, count int) (int64, error) {
	switch r := h.apply(allocCmd(id, int32(count))).(type) {
	case int64:
		return r, nil
	case error:
		return 0, r
	default:
		return 0, fmt.Errorf("allocate checkpoint IDs: unexpected result %T", r)
	}
}

func (h *fsmHost) completeCheckpoint(id string, cp *pb.CompletedCheckpoint, numRetained int, savepointOnly bool) ([]*pb.CompletedCheckpoint, error) {
	res := h.apply(&pb.RaftCommand{Op: &pb.RaftCommand_CompleteCheckpoint{CompleteCheckpoint: &pb.CompleteCheckpointCommand{
		JobId: id, Checkpoint: cp, NumRetained: int32(numRetained), SavepointOnly: savepointOnly}}})
	if err, ok := res.(error); ok {
		return nil, err
	}
	subsumed, _ := res.([]*pb.CompletedCheckpoint)
	return subsumed, nil
}

func (h *fsmHost) jobRecord(id string) (*pb.JobRecord, bool) { return h.f.job(id) }
func (h *fsmHost) rescaleJob(id string, g *pb.JobGraph) error {
	if err, ok := h.apply(&pb.RaftCommand{Op: &pb.RaftCommand_RescaleJob{RescaleJob: &pb.RescaleJobCommand{JobId: id, Graph: g}}}).(error); ok {
		return err
	}
	return nil
}
func (h *fsmHost) notify() {}

// startRestoringJob starts the job master of a job an earlier leader ran, with checkpoints 1
// and 2 retained and verify checking their files. No TaskManager is registered: once restored,
// the tasks wait for slots.
func startRestoringJob(t *testing.T, verify func(jobDir, chkPath string) (*pb.CheckpointMetadata, error)) (*jobMaster, *fsmHost) {
	t.Helper()
	return startRestoringJobWith(t, verify, nil)
}

// startRestoringJobWith is startRestoringJob with the records of checkpoints 1 and 2 changed
// by mod (when not nil) before they are committed.
func startRestoringJobWith(t *testing.T, verify func(jobDir, chkPath string) (*pb.CheckpointMetadata, error), mod func(*pb.CompletedCheckpoint)) (*jobMaster, *fsmHost) {
	t.Helper()
	dir := t.TempDir()
	g := testGraph(t, fmt.Sprintf("name: restore\nconfig:\n  execution.checkpointing.interval: 1 h\n  execution.checkpointing.dir: %s\n"+
		"operators:\n  - {name: n, type: sequence, from: 1}\n  - {name: out, type: discard}\n", dir))
	h := &fsmHost{f: newFSM(discardLog)}
	for _, cmd := range []*pb.RaftCommand{
		{Op: &pb.RaftCommand_SubmitJob{SubmitJob: &pb.SubmitJobCommand{JobId: "j1", Graph: g}}},
		statusCmd("j1", running, "", timestamppb.Now()),
		allocCmd("j1", 2),
	} {
		if err, _ := h.apply(cmd).(error); err != nil {
			t.Fatalf("apply %v: %v", cmd, err)
		}
	}
	for id := int64(1); id <= 2; id++ {
		cp := &pb.CompletedCheckpoint{Id: id, Path: fmt.Sprintf("chk-%d", id), BaseDir: dir}
		if mod != nil {
			mod(cp)
		}
		if _, err := h.completeCheckpoint("j1", cp, 2, false); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := h.f.job("j1")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := newJobMaster(context.Background(), rec, leaderInfo{id: "jm-2", term: 2}, config.New(), h,
		newResourceManager(log, time.Second, time.Second, nil), log)
	if err != nil {
		t.Fatal(err)
	}
	m.verify = verify
	go m.run()
	t.Cleanup(m.stop)
	return m, h
}

// restoreCauses returns the causes of the checkpoint restore entries of the exception history.
func restoreCauses(d *pb.JobDetails) []string {
	var out []string
	for _, e := range d.GetExceptions() {
		if e.GetTask() == "checkpoint restore" {
			out = append(out, e.GetCause())
		}
	}
	return out
}

// Checkpoint verification runs off the job master's loop: while it reads the files, a manual
// checkpoint is answered and a cancel is honoured, and the verification's late outcome is
// ignored.
func TestJobMasterHandlesEventsWhileVerifyingCheckpoint(t *testing.T) {
	started := make(chan string, 2)
	release := make(chan struct{})
	m, h := startRestoringJob(t, func(_, path string) (*pb.CheckpointMetadata, error) {
		started <- path
		<-release // slow files
		return &pb.CheckpointMetadata{}, nil
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the job master's stop (cleanups run last first)

	select {
	case path := <-started:
		if path != "chk-2" {
			t.Errorf("verified %s first, want chk-2 (the newest)", path)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint was verified")
	}

	reply := make(chan checkpointResult, 1)
	m.send(evTriggerCheckpoint{reply: reply})
	select {
	case r := <-reply:
		if !errors.Is(r.err, ErrJobNotRunning) {
			t.Errorf("manual checkpoint while restoring = %v, want %v", r.err, ErrJobNotRunning)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a manual checkpoint got no answer while a checkpoint was verified: the job master's loop is blocked")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.requestCancel(ctx); err != nil {
		t.Fatalf("cancel while a checkpoint is verified = %v", err)
	}
	poll.Until(t, 10*time.Second, "the job to be CANCELED", func() error {
		if rec, _ := h.f.job("j1"); rec.GetStatus() != canceled {
			return fmt.Errorf("job is %v", rec.GetStatus())
		}
		return nil
	})

	unblock()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job master did not stop after its verification ended")
	}
	if d := m.view().details; d.GetStatus() != canceled || d.GetRestoredCheckpointId() != 0 || len(d.GetTasks()) != 0 {
		t.Errorf("after the cancel the view is %v, restored %d, %d tasks; want CANCELED, nothing restored, no tasks",
			d.GetStatus(), d.GetRestoredCheckpointId(), len(d.GetTasks()))
	}
}

// The newest retained checkpoint whose files are intact is restored; corrupt ones are skipped
// loudly; with none intact the job fails.
func TestJobMasterRestoresNewestIntactCheckpoint(t *testing.T) {
	corrupt := errors.New("keyed-0-0: CRC mismatch")
	const fallback = "; falling back to checkpoint 1: output that sinks committed after it may appear twice" +
		" (exactly-once is lost for that span)"
	for _, tc := range []struct {
		name         string
		intact       map[string]bool
		wantStatus   pb.JobStatus
		wantRestored int64
		wantCauses   []string
	}{
		{"newest intact", map[string]bool{"chk-1": true, "chk-2": true}, running, 2, nil},
		{"newest corrupt", map[string]bool{"chk-1": true}, running, 1, []string{
			"checkpoint 2 cannot be restored: keyed-0-0: CRC mismatch" + fallback}},
		{"none intact", map[string]bool{}, failed, 0, []string{
			"checkpoint 2 cannot be restored: keyed-0-0: CRC mismatch" + fallback,
			"checkpoint 1 cannot be restored: keyed-0-0: CRC mismatch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, h := startRestoringJob(t, func(_, path string) (*pb.CheckpointMetadata, error) {
				if !tc.intact[path] {
					return nil, corrupt
				}
				return &pb.CheckpointMetadata{}, nil
			})
			var d *pb.JobDetails
			poll.Until(t, 10*time.Second, fmt.Sprintf("the job to be %v", tc.wantStatus), func() error {
				d = m.view().details
				rec, _ := h.f.job("j1")
				if rec.GetStatus() != tc.wantStatus || d.GetStatus() != tc.wantStatus {
					return fmt.Errorf("job is %v (view %v)", rec.GetStatus(), d.GetStatus())
				}
				if tc.wantStatus == running && (rec.GetRuns() != 2 || len(d.GetTasks()) == 0) {
					return fmt.Errorf("job is %v in run %d with %d tasks, not redeployed yet", rec.GetStatus(), rec.GetRuns(), len(d.GetTasks()))
				}
				return nil
			})
			if d.GetRestoredCheckpointId() != tc.wantRestored {
				t.Errorf("restored checkpoint %d, want %d", d.GetRestoredCheckpointId(), tc.wantRestored)
			}
			causes := restoreCauses(d)
			if len(causes) != len(tc.wantCauses) {
				t.Fatalf("exception history says %q, want %d checkpoint restore entries", causes, len(tc.wantCauses))
			}
			for i, want := range tc.wantCauses {
				if causes[i] != want {
					t.Errorf("exception %d = %q, want %q", i, causes[i], want)
				}
			}
			if tc.wantStatus == failed {
				if want := "none of the 2 retained checkpoints can be restored (see the exception history)"; d.GetFailureCause() != want {
					t.Errorf("failure cause %q, want %q", d.GetFailureCause(), want)
				}
			}
		})
	}
}

// A job master that stops while it verifies checkpoints stops verifying after the current one
// and reports no choice (a partial one would read as "none intact").
func TestChooseRestoreGivesUpWhenStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var verified []string
	cps := []*pb.CompletedCheckpoint{{Id: 1, Path: "chk-1"}, {Id: 2, Path: "chk-2"}}
	c := chooseRestore(ctx, cps, func(_, path string) (*pb.CheckpointMetadata, error) {
		verified = append(verified, path)
		cancel() // the job master stops while this one is verified
		return nil, errors.New("CRC mismatch")
	}, func(int64, int, error) bool { return true })
	if c != nil || len(verified) != 1 {
		t.Errorf("chooseRestore after a stop = %+v having verified %v, want nil after chk-2 alone", c, verified)
	}
}

// A checkpoint whose storage does not answer is verified again until it does, not skipped
// for an older one (nor reported corrupt); a stop while waiting gives up with no choice.
func TestChooseRestoreWaitsForUnreachableStorage(t *testing.T) {
	cps := []*pb.CompletedCheckpoint{{Id: 1, Path: "chk-1"}, {Id: 2, Path: "chk-2"}}
	down := fmt.Errorf("storage: open s3://b/j/chk-2/_metadata: %w", storage.ErrUnreachable)
	var verified []string
	var waits []int
	c := chooseRestore(context.Background(), cps, func(_, path string) (*pb.CheckpointMetadata, error) {
		verified = append(verified, path)
		if len(verified) <= 3 {
			return nil, down
		}
		return &pb.CheckpointMetadata{CheckpointId: 2}, nil
	}, func(id int64, attempt int, err error) bool {
		if id != 2 || !errors.Is(err, storage.ErrUnreachable) {
			t.Errorf("await(%d, %d, %v)", id, attempt, err)
		}
		waits = append(waits, attempt)
		return true
	})
	if c == nil || c.cp.GetId() != 2 || len(c.corrupt) != 0 {
		t.Fatalf("chooseRestore = %+v, want checkpoint 2 and nothing corrupt", c)
	}
	if !slices.Equal(verified, []string{"chk-2", "chk-2", "chk-2", "chk-2"}) || !slices.Equal(waits, []int{1, 2, 3}) {
		t.Errorf("verified %v after waits %v, want chk-2 four times after waits 1, 2, 3", verified, waits)
	}
	c = chooseRestore(context.Background(), cps, func(string, string) (*pb.CheckpointMetadata, error) { return nil, down },
		func(int64, int, error) bool { return false })
	if c != nil {
		t.Errorf("chooseRestore stopped while waiting = %+v, want nil", c)
	}
}
