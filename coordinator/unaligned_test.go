package coordinator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// TestSubmitValidatesUnaligned checks the keys unaligned checkpoints cannot be combined with,
// from the spec, -D and the cluster's defaults: more than one concurrent checkpoint and
// at-least-once are refused, naming the keys; without unaligned they are fine.
func TestSubmitValidatesUnaligned(t *testing.T) {
	spec := "name: u\noperators:\n  - {name: n, type: sequence, from: 1, to: 3}\n  - {name: out, type: discard}\n"
	clusterUnaligned := config.New()
	if err := clusterUnaligned.Set(config.CheckpointUnaligned, "true"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cluster   *config.Config
		overrides map[string]string
		want      []string // "" for accepted
	}{
		{"unaligned alone", nil, map[string]string{config.CheckpointUnaligned: "true", config.CheckpointAlignedTimeout: "5 s"}, nil},
		{"aligned with concurrent at-least-once", nil, map[string]string{config.CheckpointMaxConcurrent: "3", config.CheckpointMode: "AT_LEAST_ONCE"}, nil},
		{"concurrent", nil, map[string]string{config.CheckpointUnaligned: "true", config.CheckpointMaxConcurrent: "2"},
			[]string{"execution.checkpointing.unaligned = true needs execution.checkpointing.max-concurrent-checkpoints = 1, got 2"}},
		{"at-least-once by the alias", nil, map[string]string{config.CheckpointUnalignedAlias: "true", config.CheckpointMode: "AT_LEAST_ONCE"},
			[]string{"execution.checkpointing.unaligned = true needs execution.checkpointing.mode = EXACTLY_ONCE, got AT_LEAST_ONCE"}},
		{"both, unaligned from the cluster", clusterUnaligned, map[string]string{config.CheckpointMaxConcurrent: "4", config.CheckpointMode: "AT_LEAST_ONCE"},
			[]string{"max-concurrent-checkpoints = 1, got 4", "mode = EXACTLY_ONCE, got AT_LEAST_ONCE"}},
		{"the job turns the cluster's off", clusterUnaligned, map[string]string{config.CheckpointUnaligned: "false", config.CheckpointMaxConcurrent: "4"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := job.Build(job.Request{Spec: []byte(spec), Overrides: tc.overrides}, job.Env{Defaults: tc.cluster})
			if err != nil {
				t.Fatal(err)
			}
			err = validateUnaligned(g)
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("validateUnaligned() = %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, job.ErrInvalidSpec) {
				t.Fatalf("validateUnaligned() = %v, want an invalid-spec error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("validateUnaligned() = %v, want it to say %q", err, w)
				}
			}
		})
	}
	// A negative timeout never gets that far: the key refuses it.
	if _, err := job.Build(job.Request{Spec: []byte(spec), Overrides: map[string]string{config.CheckpointAlignedTimeout: "-1 s"}}, job.Env{}); err == nil ||
		!strings.Contains(err.Error(), config.CheckpointAlignedTimeout) || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("Build(timeout -1 s) = %v, want an error naming %s", err, config.CheckpointAlignedTimeout)
	}
}

// TestCheckpointUnalignedBarrier checks what the barriers carry: with unaligned checkpoints on,
// every checkpoint (periodic and manual) is unaligned with the configured aligned timeout; a
// savepoint never is; with them off, none is.
func TestCheckpointUnalignedBarrier(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unaligned bool
		timeout   time.Duration
		wantMs    int64
	}{
		{"unaligned from the start", true, 0, 0},
		{"aligned first, then unaligned", true, 1500 * time.Millisecond, 1500},
		{"aligned", false, 30 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCkptHarness(t, func(s *checkpointSettings) { s.unaligned, s.alignedTimeout = tc.unaligned, tc.timeout })
			h.c.start()
			h.fire() // periodic checkpoint 1
			h.wantTriggered(1)
			b := h.io.lastBarrier()
			if b.GetUnaligned() != tc.unaligned || b.GetAlignedTimeoutMs() != tc.wantMs {
				t.Fatalf("periodic barrier %v, want unaligned %v, aligned timeout %d ms", b, tc.unaligned, tc.wantMs)
			}
			h.ackAll(1)
			id, _ := h.startManual()
			if b := h.io.lastBarrier(); b.GetUnaligned() != tc.unaligned || b.GetAlignedTimeoutMs() != tc.wantMs {
				t.Fatalf("manual checkpoint %d barrier %v, want unaligned %v, aligned timeout %d ms", id, b, tc.unaligned, tc.wantMs)
			}
			h.ackAll(id)
			for _, sp := range []*savepointRequest{{dir: "/sp/a"}, {dir: "/sp/b", stop: true}} {
				ch := make(chan checkpointResult, 1)
				h.c.triggerManual(ch, sp)
				b := h.io.lastBarrier()
				if b.GetSavepointDir() != sp.dir || b.GetUnaligned() || b.GetAlignedTimeoutMs() != 0 ||
					b.GetMode() != pb.CheckpointingMode_CHECKPOINTING_MODE_EXACTLY_ONCE {
					t.Fatalf("savepoint barrier %v, want an aligned exactly-once one into %s", b, sp.dir)
				}
				h.ackAll(b.GetCheckpointId())
			}
		})
	}
}

// TestCheckpointUnalignedMetrics checks the aggregation of the tasks' metrics: a checkpoint is
// unaligned when any task took it unaligned, its in-flight bytes are the sum of the tasks'
// channel state and count in its state size (as in Flink); both go into the Raft record, and a
// new coordinator (a new leader) shows them in the history from that record.
func TestCheckpointUnalignedMetrics(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.unaligned, s.numRetained = 0, true, 2 })
	ackWith := func(id int64, unaligned []bool, inFlight []int64) {
		t.Helper()
		for i, task := range h.io.tasks.wait {
			snap := &pb.TaskStateSnapshot{Operators: []*pb.OperatorSubtaskState{{Operator: task, Subtask: int32(i)}}}
			m := &pb.CheckpointMetrics{StateSizeBytes: 100, Unaligned: unaligned[i], InFlightBytes: inFlight[i]}
			if !h.c.ack(task, id, snap, m) {
				t.Fatalf("ack(%s, %d) rejected", task, id)
			}
			if i == 0 {
				if info := h.info(id); info.GetUnaligned() != unaligned[0] || info.GetInFlightBytes() != inFlight[0] {
					t.Fatalf("after the first ack %v, want unaligned %v, %d bytes in flight so far", info, unaligned[0], inFlight[0])
				}
			}
		}
	}
	id1, _ := h.startManual()
	ackWith(id1, []bool{false, true, false}, []int64{0, 4096, 0}) // the map task alone took it unaligned
	id2, _ := h.startManual()
	ackWith(id2, []bool{false, false, false}, []int64{0, 0, 0}) // timed out never: aligned

	for _, want := range []struct {
		id        int64
		unaligned bool
		inFlight  int64
		size      int64
	}{{id1, true, 4096, 300 + 4096}, {id2, false, 0, 300}} {
		i := h.info(want.id)
		if i.GetStatus() != ckptStatusDone || i.GetUnaligned() != want.unaligned || i.GetInFlightBytes() != want.inFlight || i.GetStateSizeBytes() != want.size {
			t.Errorf("checkpoint %d: %v, want COMPLETED, unaligned %v, %d bytes in flight, state size %d", want.id, i, want.unaligned, want.inFlight, want.size)
		}
		var rec *pb.CompletedCheckpoint
		for _, cp := range h.io.store {
			if cp.GetId() == want.id {
				rec = cp
			}
		}
		if rec.GetUnaligned() != want.unaligned || rec.GetInFlightBytes() != want.inFlight || rec.GetStateSizeBytes() != want.size {
			t.Errorf("Raft record of checkpoint %d: %v, want unaligned %v, %d bytes in flight, state size %d", want.id, rec, want.unaligned, want.inFlight, want.size)
		}
		if f := h.io.finalized[want.id]; f.size != want.size {
			t.Errorf("finalize(%d) got size %d, want %d", want.id, f.size, want.size)
		}
	}

	// A new leader knows the checkpoints from their Raft records only.
	next := newCheckpointCoordinator(ckptDefaults(), h.io, h.clk.now, h.io.store)
	view := next.historyView()
	if len(view) != 2 || view[0].GetId() != id2 || view[1].GetId() != id1 {
		t.Fatalf("new leader's history %v, want checkpoints %d and %d", view, id2, id1)
	}
	if v := view[1]; !v.GetUnaligned() || v.GetInFlightBytes() != 4096 || v.GetStateSizeBytes() != 300+4096 {
		t.Errorf("new leader's entry of checkpoint %d: %v, want unaligned, 4096 bytes in flight", id1, v)
	}
	if v := view[0]; v.GetUnaligned() || v.GetInFlightBytes() != 0 {
		t.Errorf("new leader's entry of checkpoint %d: %v, want aligned", id2, v)
	}
}

// unalignedMD is the metadata of checkpoint id with the states of operators n and out at
// parallelism p, holding channel state when unaligned.
func unalignedMD(id int64, p int32, unaligned bool) *pb.CheckpointMetadata {
	md := &pb.CheckpointMetadata{JobId: "j0", CheckpointId: id}
	for i := range p {
		for _, op := range []string{"n", "out"} {
			st := &pb.OperatorSubtaskState{Operator: op, Subtask: i, Parallelism: p, MaxParallelism: 128}
			if unaligned && op == "n" {
				st.ChannelState = &pb.ChannelStateHandle{Output: []*pb.ChannelBuffers{{SourceVertex: 0, TargetVertex: 1, Subtask: i, Size: 700, Buffers: 1}}}
			}
			md.States = append(md.States, st)
		}
	}
	return md
}

// unalignedSpec is a job of operators n and out at parallelism p, whose out is not chained to
// n (the two run as separate vertices with a channel between them).
func unalignedSpec(dir string, p int) string {
	return fmt.Sprintf("name: u\nparallelism: %d\nconfig:\n  execution.checkpointing.interval: 1 h\n  execution.checkpointing.dir: %s\n"+
		"operators:\n  - {name: n, type: sequence, from: 1}\n  - {name: k, type: key-by, key: value}\n  - {name: out, type: count}\n  - {name: sink, type: discard}\n", p, dir)
}

// TestCheckUnalignedRestore checks the rule itself: a snapshot with channel state restores at
// the parallelism it was taken at only; one without restores at any.
func TestCheckUnalignedRestore(t *testing.T) {
	for _, tc := range []struct {
		name      string
		snapP     int32
		unaligned bool
		jobP      int
		want      string // "" for accepted
	}{
		{"unaligned, same parallelism", 2, true, 2, ""},
		{"aligned, rescaled", 2, false, 3, ""},
		{"unaligned, scaled up", 2, true, 3, `operator uid "n" was checkpointed at parallelism 2, the job runs "n" at 3`},
		{"unaligned, scaled down", 2, true, 1, `operator uid "out" was checkpointed at parallelism 2, the job runs "out -> sink" at 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := testGraph(t, unalignedSpec(t.TempDir(), tc.jobP))
			err := checkUnalignedRestore(g, 7, unalignedMD(7, tc.snapP, tc.unaligned))
			if tc.want == "" {
				if err != nil {
					t.Errorf("checkUnalignedRestore() = %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidRestore) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "checkpoint 7 is an unaligned checkpoint (it holds in-flight data), which restores only at the parallelism it was taken at") {
				t.Errorf("checkUnalignedRestore() = %v, want an invalid-restore error saying %q", err, tc.want)
			}
		})
	}
}

// TestRunFromUnalignedCheckpoint checks flinkctl run -s: a retained unaligned checkpoint starts
// a job at its parallelism (and the job's first record of it says unaligned, with its
// in-flight bytes), and is refused at another, before anything is recorded.
func TestRunFromUnalignedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	root, err := storage.OpenRoot(dir, storage.S3Settings{})
	if err != nil {
		t.Fatal(err)
	}
	md := unalignedMD(5, 2, true)
	for _, st := range md.GetStates() {
		if cs := st.GetChannelState(); cs != nil {
			// The file the handle names, as a TaskManager writes it (storage verifies it).
			f, err := root.CreateFile(context.Background(), 5, fmt.Sprintf("channels-s%d", st.GetSubtask()))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(make([]byte, cs.GetOutput()[0].GetSize())); err != nil {
				t.Fatal(err)
			}
			if cs.File, err = f.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	path, err := root.WriteMetadata(context.Background(), md)
	if err != nil {
		t.Fatal(err)
	}
	restorePath := filepath.Join(dir, path)

	cp, err := restoreFrom(context.Background(), testGraph(t, unalignedSpec(t.TempDir(), 2)), &pb.SubmitJobRequest{RestorePath: restorePath}, storage.S3Settings{})
	if err != nil {
		t.Fatalf("run -s at the checkpoint's parallelism: %v", err)
	}
	if cp.GetId() != 5 || !cp.GetUnaligned() || cp.GetInFlightBytes() != 1400 || cp.GetStateSizeBytes() != 1400 {
		t.Errorf("restored record %v, want checkpoint 5, unaligned, 1400 bytes in flight (counted in the state size)", cp)
	}
	_, err = restoreFrom(context.Background(), testGraph(t, unalignedSpec(t.TempDir(), 4)), &pb.SubmitJobRequest{RestorePath: restorePath}, storage.S3Settings{})
	if !errors.Is(err, ErrInvalidRestore) || !strings.Contains(err.Error(), "restores only at the parallelism it was taken at") ||
		!strings.Contains(err.Error(), "checkpointed at parallelism 2, the job runs") {
		t.Errorf("run -s -p 4 = %v, want a refusal of the unaligned checkpoint at another parallelism", err)
	}
}

// TestFailoverSkipsUnalignedCheckpointAtOtherParallelism checks a restart's choice: a retained
// unaligned checkpoint taken at another parallelism than the job's (a rescale since) is not
// restored; the restart falls back to an older one, loudly, as from a corrupt one.
func TestFailoverSkipsUnalignedCheckpointAtOtherParallelism(t *testing.T) {
	for _, tc := range []struct {
		name         string
		newestP      int32
		wantRestored int64
		wantCause    string
	}{
		{"same parallelism", 1, 2, ""},
		{"other parallelism", 2, 1, "checkpoint 2 cannot be restored: cannot start the job from this snapshot: checkpoint 2 is an unaligned checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := startRestoringJob(t, func(_, path string) (*pb.CheckpointMetadata, error) {
				if path == "chk-2" {
					return unalignedMD(2, tc.newestP, true), nil
				}
				return unalignedMD(1, 1, false), nil
			})
			var d *pb.JobDetails
			poll.Until(t, 10*time.Second, "the job to restore a checkpoint", func() error {
				if d = m.view().details; d.GetRestoredCheckpointId() == 0 {
					return fmt.Errorf("job is %v, nothing restored", d.GetStatus())
				}
				return nil
			})
			if d.GetRestoredCheckpointId() != tc.wantRestored {
				t.Errorf("restored checkpoint %d, want %d", d.GetRestoredCheckpointId(), tc.wantRestored)
			}
			causes := restoreCauses(d)
			switch {
			case tc.wantCause == "" && len(causes) > 0:
				t.Errorf("exception history says %q, want nothing about the restore", causes)
			case tc.wantCause != "" && (len(causes) != 1 || !strings.HasPrefix(causes[0], tc.wantCause)):
				t.Errorf("exception history says %q, want %q…", causes, tc.wantCause)
			}
		})
	}
}

// TestRescaleNeedsAlignedCheckpoint checks the rescale path: the checkpoint a rescale takes is
// aligned also for a job whose checkpoints are unaligned, and a rescale whose latest
// checkpoint is unaligned anyway (one completed after it) is refused, naming the checkpoint.
func TestRescaleNeedsAlignedCheckpoint(t *testing.T) {
	h := newCkptHarness(t, func(s *checkpointSettings) { s.interval, s.unaligned = 0, true })
	ch := make(chan checkpointResult, 1)
	h.c.triggerAligned(ch)
	if b := h.io.lastBarrier(); b.GetUnaligned() {
		t.Fatalf("a rescale's checkpoint barrier %v is unaligned, want aligned", b)
	}
	h.ackAll(h.io.lastBarrier().GetCheckpointId())
	if r := ckptRecv(t, ch); r.err != nil || r.info.GetUnaligned() {
		t.Fatalf("a rescale's checkpoint = %+v, want a completed aligned one", r)
	}
	h.startManual()
	if !h.io.lastBarrier().GetUnaligned() {
		t.Fatalf("the next manual checkpoint's barrier is aligned, want unaligned again")
	}

	for _, tc := range []struct {
		name      string
		unaligned bool
	}{{"latest aligned", false}, {"latest unaligned", true}} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := startRestoringJobWith(t, func(_, path string) (*pb.CheckpointMetadata, error) {
				return &pb.CheckpointMetadata{}, nil
			}, func(cp *pb.CompletedCheckpoint) { cp.Unaligned = tc.unaligned && cp.GetId() == 2 })
			poll.Until(t, 10*time.Second, "the job to restore checkpoint 2", func() error {
				if d := m.view().details; d.GetRestoredCheckpointId() != 2 || d.GetStatus() != running {
					return fmt.Errorf("job is %v, restored %d", d.GetStatus(), d.GetRestoredCheckpointId())
				}
				return nil
			})
			reply := make(chan error, 1)
			m.send(evRescale{parallelism: 2, reply: reply})
			var err error
			select {
			case err = <-reply:
			case <-time.After(10 * time.Second):
				t.Fatal("no answer to the rescale")
			}
			refused := errors.Is(err, ErrInvalidRestore) && strings.Contains(err.Error(), "its latest checkpoint 2 is unaligned")
			if refused != tc.unaligned {
				t.Errorf("rescale = %v; want refused for an unaligned latest checkpoint: %v", err, tc.unaligned)
			}
		})
	}
}
