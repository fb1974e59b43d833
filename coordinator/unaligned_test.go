package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/job"
	pb "github.com/goflink/goflink/proto/goflink/v1"
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
