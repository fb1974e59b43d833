package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// fakeListState is an in-memory ListState.
type fakeListState struct{ elems [][]byte }

func (l *fakeListState) Get() [][]byte      { return l.elems }
func (l *fakeListState) Update(e [][]byte)  { l.elems = e }
func (l *fakeListState) snapshot() [][]byte { return slices.Clone(l.elems) }

// fakeStateContext is a StateContext for one subtask: restored holds what the subtask gets
// per list state name (already redistributed).
type fakeStateContext struct {
	restoredID int64
	restored   map[string][][]byte
	lists      map[string]*fakeListState
	dists      map[string]pb.ListDistribution
}

func newStateContext(restoredID int64, restored map[string][][]byte) *fakeStateContext {
	return &fakeStateContext{restoredID: restoredID, restored: restored,
		lists: map[string]*fakeListState{}, dists: map[string]pb.ListDistribution{}}
}

func (c *fakeStateContext) ListState(name string, d pb.ListDistribution) (ListState, error) {
	if l, ok := c.lists[name]; ok {
		if c.dists[name] != d {
			return nil, fmt.Errorf("list state %q registered as %v and %v", name, c.dists[name], d)
		}
		return l, nil
	}
	l := &fakeListState{elems: slices.Clone(c.restored[name])}
	c.lists[name], c.dists[name] = l, d
	return l, nil
}

func (c *fakeStateContext) KeyedBackend() state.KeyedBackend { return nil }
func (c *fakeStateContext) RestoredCheckpointID() int64      { return c.restoredID }

// checkpointOf collects one list state of several subtasks' contexts, as a checkpoint holds
// it, and checks it was registered with distribution d.
func checkpointOf(t *testing.T, name string, d pb.ListDistribution, subtasks ...*fakeStateContext) [][]byte {
	t.Helper()
	var all [][]byte
	for i, c := range subtasks {
		if got := c.dists[name]; got != d {
			t.Fatalf("subtask %d registered %q as %v, want %v", i, name, got, d)
		}
		all = append(all, c.lists[name].snapshot()...)
	}
	return all
}

// fakeTxn is a transaction of fakeCommitter.
type fakeTxn struct {
	ID       int     `json:"id"`
	Rows     []int64 `json:"rows"`
	Prepared bool    `json:"prepared"`
}

// fakeCommitter logs every call; committed holds the visible rows per transaction. Commit is
// idempotent.
type fakeCommitter struct {
	nextID    int
	log       []string
	committed map[int][]int64
	commitErr map[int]error
	lingering [][]int // referenced IDs of each AbortLingering call
}

func newFakeCommitter(firstID int) *fakeCommitter {
	return &fakeCommitter{nextID: firstID, committed: map[int][]int64{}, commitErr: map[int]error{}}
}

func (c *fakeCommitter) logf(format string, args ...any) {
	c.log = append(c.log, fmt.Sprintf(format, args...))
}

func (c *fakeCommitter) BeginTransaction() (*fakeTxn, error) {
	t := &fakeTxn{ID: c.nextID}
	c.nextID++
	c.logf("begin %d", t.ID)
	return t, nil
}

func (c *fakeCommitter) Write(t *fakeTxn, row record.Row) error {
	if t.Prepared {
		return fmt.Errorf("write to prepared txn %d", t.ID)
	}
	t.Rows = append(t.Rows, row[0].Int())
	return nil
}

func (c *fakeCommitter) PreCommit(t *fakeTxn) error {
	t.Prepared = true
	c.logf("precommit %d %v", t.ID, t.Rows)
	return nil
}

func (c *fakeCommitter) Commit(t *fakeTxn) error {
	if err := c.commitErr[t.ID]; err != nil {
		c.logf("commit %d failed", t.ID)
		return err
	}
	if !t.Prepared {
		return fmt.Errorf("commit of unprepared txn %d", t.ID)
	}
	if _, ok := c.committed[t.ID]; ok {
		c.logf("commit %d (already)", t.ID)
		return nil
	}
	c.committed[t.ID] = slices.Clone(t.Rows)
	c.logf("commit %d", t.ID)
	return nil
}

func (c *fakeCommitter) Abort(t *fakeTxn) error {
	c.logf("abort %d", t.ID)
	return nil
}

func (c *fakeCommitter) Encode(t *fakeTxn) []byte {
	b, _ := json.Marshal(t)
	return b
}

func (c *fakeCommitter) Decode(b []byte) (*fakeTxn, error) {
	t := &fakeTxn{}
	return t, json.Unmarshal(b, t)
}

func (c *fakeCommitter) AbortLingering(referenced []*fakeTxn) error {
	var ids []int
	for _, t := range referenced {
		ids = append(ids, t.ID)
	}
	slices.Sort(ids)
	c.lingering = append(c.lingering, ids)
	c.logf("lingering %v", ids)
	return nil
}

// visible is every committed row in transaction order.
func (c *fakeCommitter) visible() []int64 {
	var out []int64
	for _, id := range slices.Sorted(maps.Keys(c.committed)) {
		out = append(out, c.committed[id]...)
	}
	return out
}

func (c *fakeCommitter) takeLog() []string {
	l := c.log
	c.log = nil
	return l
}

type fakeSink struct {
	*TwoPhaseSink[*fakeTxn]
	c  *fakeCommitter
	sc *fakeStateContext
}

// openFakeSink creates a two-phase sink on c, initializes it from sc and opens it as subtask
// sub of p.
func openFakeSink(t *testing.T, c *fakeCommitter, sc *fakeStateContext, sub, p int) (*fakeSink, error) {
	t.Helper()
	s := &TwoPhaseSink[*fakeTxn]{name: "fake sink", committer: c}
	if err := s.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	err := s.Open(&Context{OperatorName: "sink", Subtask: sub, Parallelism: p}, &capture{})
	return &fakeSink{s, c, sc}, err
}

func mustOpenFakeSink(t *testing.T, c *fakeCommitter, sc *fakeStateContext, sub, p int) *fakeSink {
	t.Helper()
	s, err := openFakeSink(t, c, sc, sub, p)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func (s *fakeSink) write(t *testing.T, vs ...int64) {
	t.Helper()
	for _, v := range vs {
		if err := s.Process(record.Row{record.IntValue(v)}); err != nil {
			t.Fatalf("Process(%d): %v", v, err)
		}
	}
}

// checkpoint runs the task's synchronous part of checkpoint id: pre-barrier, then snapshot.
func (s *fakeSink) checkpoint(t *testing.T, id int64) {
	t.Helper()
	if err := s.PrepareSnapshotPreBarrier(id); err != nil {
		t.Fatalf("PrepareSnapshotPreBarrier(%d): %v", id, err)
	}
	if err := s.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
}

func (s *fakeSink) complete(t *testing.T, id int64) {
	t.Helper()
	if err := s.NotifyCheckpointComplete(id); err != nil {
		t.Fatalf("NotifyCheckpointComplete(%d): %v", id, err)
	}
}

func wantLog(t *testing.T, step string, c *fakeCommitter, want ...string) {
	t.Helper()
	if got := c.takeLog(); !slices.Equal(got, want) {
		t.Errorf("%s: calls\n  %q\nwant\n  %q", step, got, want)
	}
}

func wantVisible(t *testing.T, step string, c *fakeCommitter, want ...int64) {
	t.Helper()
	if got := c.visible(); !slices.Equal(got, want) {
		t.Errorf("%s: visible %v, want %v", step, got, want)
	}
}

func TestTwoPhaseCommitOrdering(t *testing.T) {
	c := newFakeCommitter(1)
	s := mustOpenFakeSink(t, c, newStateContext(0, nil), 0, 1)
	wantLog(t, "open", c, "lingering []", "begin 1")

	s.write(t, 1, 2)
	s.checkpoint(t, 1)
	wantLog(t, "checkpoint 1", c, "precommit 1 [1 2]", "begin 2")
	wantVisible(t, "before complete(1)", c)

	s.write(t, 3) // after barrier 1: transaction 2
	s.complete(t, 1)
	wantLog(t, "complete(1)", c, "commit 1")
	wantVisible(t, "after complete(1)", c, 1, 2)

	s.checkpoint(t, 2)
	s.write(t, 4)
	s.checkpoint(t, 3)
	s.write(t, 5)
	wantLog(t, "checkpoints 2, 3", c, "precommit 2 [3]", "begin 3", "precommit 3 [4]", "begin 4")
	if err := s.NotifyCheckpointAborted(2); err != nil {
		t.Fatalf("NotifyCheckpointAborted(2): %v", err)
	}
	wantLog(t, "aborted(2) is a no-op", c)
	wantVisible(t, "after aborted(2)", c, 1, 2)

	// complete(2) was lost: complete(3) commits 2 and 3, in order.
	s.complete(t, 3)
	wantLog(t, "complete(3) after a skipped complete(2)", c, "commit 2", "commit 3")
	wantVisible(t, "after complete(3)", c, 1, 2, 3, 4)

	s.complete(t, 3)
	s.complete(t, 2)
	wantLog(t, "repeated and stale notifications", c)

	// Checkpoint 3's state lists what was pending then (2 and 3) and the open transaction.
	var st twoPhaseState
	if err := json.Unmarshal(s.sc.lists[TwoPhaseStateName].elems[0], &st); err != nil {
		t.Fatal(err)
	}
	var pend []int64
	for _, p := range st.Pending {
		pend = append(pend, p.Checkpoint)
	}
	if !slices.Equal(pend, []int64{2, 3}) || st.Current == nil || st.Subtask != 0 || st.Parallelism != 1 {
		t.Errorf("state of checkpoint 3 = %+v, want the open transaction and checkpoints 2, 3 pending", st)
	}

	s.checkpoint(t, 4)
	s.write(t, 6)
	wantLog(t, "checkpoint 4", c, "precommit 4 [5]", "begin 5")
	if err := s.EndInput(); err != nil {
		t.Fatalf("EndInput: %v", err)
	}
	wantLog(t, "EndInput commits everything", c, "precommit 5 [6]", "commit 4", "commit 5")
	wantVisible(t, "after EndInput", c, 1, 2, 3, 4, 5, 6)
	if err := s.Process(record.Row{record.IntValue(7)}); err == nil {
		t.Errorf("Process after EndInput = nil error")
	}
	if err := s.PrepareSnapshotPreBarrier(5); err != nil {
		t.Errorf("PrepareSnapshotPreBarrier after EndInput = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantLog(t, "Close after EndInput", c)
}

func TestTwoPhaseCloseAbortsOnlyCurrent(t *testing.T) {
	c := newFakeCommitter(1)
	s := mustOpenFakeSink(t, c, newStateContext(0, nil), 0, 1)
	s.write(t, 1)
	s.checkpoint(t, 1)
	s.write(t, 2)
	c.takeLog()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantLog(t, "Close", c, "abort 2")
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	wantLog(t, "second Close", c)
	wantVisible(t, "after Close", c)
}

func TestTwoPhaseEndJob(t *testing.T) {
	// Checkpoints 1–4 pre-commit; 1 is notified, 2 completed without its notification, 3 and
	// 4 never complete; the commit of 2 fails once. The job ends with 2 its newest completed
	// checkpoint.
	c := newFakeCommitter(1)
	s := mustOpenFakeSink(t, c, newStateContext(0, nil), 0, 1)
	for id := int64(1); id <= 4; id++ {
		s.write(t, id)
		s.checkpoint(t, id)
	}
	s.complete(t, 1)
	s.write(t, 5)
	boom := errors.New("connection reset")
	c.commitErr[2] = boom
	c.takeLog()
	if err := s.EndJob(2); !errors.Is(err, boom) {
		t.Fatalf("EndJob(2) with a failing commit = %v, want %v", err, boom)
	}
	wantLog(t, "EndJob(2), failing commit", c, "commit 2 failed", "abort 3", "abort 4")
	wantVisible(t, "after a failed EndJob", c, 1)
	if got := s.Pending(); len(got) != 1 || got[0].ID != 2 {
		t.Errorf("pending after EndJob = %v, want the transaction of checkpoint 2 only (never aborted)", got)
	}

	delete(c.commitErr, 2)
	if err := s.EndJob(2); err != nil {
		t.Fatalf("EndJob(2) again: %v", err)
	}
	wantLog(t, "EndJob(2) again", c, "commit 2")
	wantVisible(t, "after EndJob", c, 1, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantLog(t, "Close after EndJob", c, "abort 5")
	if got := s.Pending(); len(got) != 0 {
		t.Errorf("pending after EndJob and Close = %v, want none", got)
	}

	// Without a pending transaction (or before Open) there is nothing to do.
	idle := &TwoPhaseSink[*fakeTxn]{name: "fake sink", committer: c}
	if err := idle.EndJob(7); err != nil {
		t.Errorf("EndJob on an unopened sink = %v", err)
	}
	wantLog(t, "EndJob on an unopened sink", c)
}

func TestTwoPhaseWithoutCheckpointing(t *testing.T) {
	// No InitializeState, no checkpoint hooks: one transaction, committed at EndInput.
	c := newFakeCommitter(1)
	s := &TwoPhaseSink[*fakeTxn]{name: "fake sink", committer: c}
	if err := s.Open(&Context{Parallelism: 1}, &capture{}); err != nil {
		t.Fatal(err)
	}
	(&fakeSink{TwoPhaseSink: s}).write(t, 1, 2, 3)
	wantVisible(t, "before EndInput", c)
	if err := s.EndInput(); err != nil {
		t.Fatal(err)
	}
	wantVisible(t, "after EndInput", c, 1, 2, 3)
	if err := s.SnapshotState(1); err == nil {
		t.Errorf("SnapshotState without InitializeState = nil error")
	}
}

func TestTwoPhaseRestore(t *testing.T) {
	// Attempt 1 pre-commits checkpoints 1 and 2; checkpoint 2 completes but the notification
	// is lost; the task fails after writing more.
	c := newFakeCommitter(1)
	s := mustOpenFakeSink(t, c, newStateContext(0, nil), 0, 1)
	s.write(t, 1)
	s.checkpoint(t, 1)
	s.write(t, 2)
	s.checkpoint(t, 2)
	s.write(t, 3)
	chk2 := checkpointOf(t, TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION, s.sc)
	s.checkpoint(t, 3) // pre-committed, never completed
	s.write(t, 4)
	c.takeLog()

	// Attempt 2 restores checkpoint 2 (no Close of attempt 1: it crashed).
	c.nextID = 100
	s2 := mustOpenFakeSink(t, c, newStateContext(2, map[string][][]byte{TwoPhaseStateName: chk2}), 0, 1)
	wantLog(t, "restore", c, "commit 1", "commit 2", "abort 3", "lingering [1 2 3]", "begin 100")
	wantVisible(t, "after restore", c, 1, 2)

	// A second failure before any checkpoint: the restore re-commits idempotently.
	s3 := mustOpenFakeSink(t, c, newStateContext(2, map[string][][]byte{TwoPhaseStateName: chk2}), 0, 1)
	wantLog(t, "second restore", c, "commit 1 (already)", "commit 2 (already)", "abort 3", "lingering [1 2 3]", "begin 101")
	_ = s2

	// The replayed records go into the new transaction.
	s3.write(t, 3, 4)
	s3.checkpoint(t, 3)
	s3.complete(t, 3)
	wantVisible(t, "after replay", c, 1, 2, 3, 4)
	// The restored transactions are not part of the new state.
	var st twoPhaseState
	if err := json.Unmarshal(s3.sc.lists[TwoPhaseStateName].elems[0], &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 1 || st.Pending[0].Checkpoint != 3 {
		t.Errorf("state after checkpoint 3 = %+v, want only transaction 101 pending", st)
	}
}

func TestTwoPhaseRestoreRescaled(t *testing.T) {
	// Four subtasks each pre-commit one transaction and leave one open.
	var chk [][]byte
	for sub := range 4 {
		c := newFakeCommitter(10 * (sub + 1))
		s := mustOpenFakeSink(t, c, newStateContext(0, nil), sub, 4)
		s.write(t, int64(sub))
		s.checkpoint(t, 1)
		chk = append(chk, checkpointOf(t, TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION, s.sc)...)
	}
	tests := []struct {
		name      string
		p         int
		committed [][]int // per new subtask
		aborted   [][]int
	}{
		{"down to 2", 2, [][]int{{10, 30}, {20, 40}}, [][]int{{11, 31}, {21, 41}}},
		{"down to 3", 3, [][]int{{10, 40}, {20}, {30}}, [][]int{{11, 41}, {21}, {31}}},
		{"up to 6", 6, [][]int{{10}, {20}, {30}, {40}, nil, nil}, [][]int{{11}, {21}, {31}, {41}, nil, nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			all := map[int]int{}
			for sub := range tc.p {
				c := newFakeCommitter(1000)
				mustOpenFakeSink(t, c, newStateContext(1, map[string][][]byte{TwoPhaseStateName: chk}), sub, tc.p)
				var committed, aborted []int
				for _, l := range c.log {
					var id int
					if _, err := fmt.Sscanf(l, "commit %d", &id); err == nil {
						committed = append(committed, id)
						all[id]++
					} else if _, err := fmt.Sscanf(l, "abort %d", &id); err == nil {
						aborted = append(aborted, id)
					}
				}
				if !slices.Equal(committed, tc.committed[sub]) || !slices.Equal(aborted, tc.aborted[sub]) {
					t.Errorf("subtask %d of %d committed %v, aborted %v, want %v, %v", sub, tc.p, committed, aborted, tc.committed[sub], tc.aborted[sub])
				}
				if got, want := c.lingering, [][]int{{10, 11, 20, 21, 30, 31, 40, 41}}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("subtask %d: AbortLingering got %v, want every restored transaction %v", sub, got, want)
				}
			}
			for _, id := range []int{10, 20, 30, 40} {
				if all[id] != 1 {
					t.Errorf("transaction %d committed by %d subtasks, want 1", id, all[id])
				}
			}
		})
	}
}

func TestTwoPhaseCommitErrors(t *testing.T) {
	c := newFakeCommitter(1)
	s := mustOpenFakeSink(t, c, newStateContext(0, nil), 0, 1)
	s.write(t, 1)
	s.checkpoint(t, 1)
	s.write(t, 2)
	s.checkpoint(t, 2)
	boom := errors.New("disk on fire")
	c.commitErr[1] = boom
	c.takeLog()
	err := s.NotifyCheckpointComplete(2)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "checkpoint 1") {
		t.Fatalf("NotifyCheckpointComplete(2) = %v, want the commit error of checkpoint 1", err)
	}
	wantLog(t, "complete(2) with a failing commit", c, "commit 1 failed", "commit 2")
	wantVisible(t, "after the failed commit", c, 2)
	wantCommitMetrics(t, "after the failed commit", s, 1, 1, 1)

	// The failed transaction stays pending: in the next snapshot and retried by the next
	// notification.
	if err := s.SnapshotState(3); err != nil {
		t.Fatal(err)
	}
	var st twoPhaseState
	if err := json.Unmarshal(s.sc.lists[TwoPhaseStateName].elems[0], &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 1 || st.Pending[0].Checkpoint != 1 {
		t.Errorf("state after a failed commit = %+v, want checkpoint 1 still pending", st)
	}
	chk := checkpointOf(t, TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION, s.sc)

	// A restore that cannot re-commit fails: data loss is never silent.
	_, err = openFakeSink(t, c, newStateContext(3, map[string][][]byte{TwoPhaseStateName: chk}), 0, 1)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "lost") {
		t.Errorf("Open restoring an uncommittable transaction = %v, want a data loss error wrapping %v", err, boom)
	}

	delete(c.commitErr, 1)
	c.takeLog()
	s.complete(t, 2)
	wantLog(t, "retry on the next notification", c, "commit 1")
	wantVisible(t, "after the retry", c, 1, 2)
	wantCommitMetrics(t, "after the retry", s, 2, 1, 0)

	// EndInput reports commit errors too.
	s.write(t, 3)
	c.commitErr[3] = boom
	if err := s.EndInput(); !errors.Is(err, boom) {
		t.Errorf("EndInput with a failing commit = %v, want %v", err, boom)
	}
}

func TestTwoPhaseRestoreRejectsBadState(t *testing.T) {
	for _, elem := range []string{`{`, `{"v":2,"subtask":0,"parallelism":1}`, `{"v":1,"subtask":0,"parallelism":0}`,
		`{"v":1,"subtask":0,"parallelism":1,"current":"bm90IGpzb24="}`} {
		c := newFakeCommitter(1)
		if _, err := openFakeSink(t, c, newStateContext(1, map[string][][]byte{TwoPhaseStateName: {[]byte(elem)}}), 0, 1); err == nil {
			t.Errorf("restoring %s = nil error", elem)
		}
	}
}

func TestTwoPhasePrepareOutOfOrder(t *testing.T) {
	s := mustOpenFakeSink(t, newFakeCommitter(1), newStateContext(0, nil), 0, 1)
	s.checkpoint(t, 5)
	if err := s.PrepareSnapshotPreBarrier(5); err == nil {
		t.Errorf("PrepareSnapshotPreBarrier(5) twice = nil error")
	}
}

// With checkpointing, EndInput commits nothing: the records after the last barrier (an
// upstream operator may emit them at its own end of input) wait for the final checkpoint.
func TestTwoPhaseEndInputWaitsForFinalCheckpoint(t *testing.T) {
	c := newFakeCommitter(1)
	s := mustOpenFakeSink(t, c, newStateContext(0, nil), 0, 1)
	s.ctx.Checkpointing = true
	s.write(t, 1)
	s.checkpoint(t, 1)
	s.write(t, 2) // after the last barrier
	c.takeLog()
	if err := s.EndInput(); err != nil {
		t.Fatalf("EndInput: %v", err)
	}
	wantLog(t, "EndInput with checkpointing", c)
	wantVisible(t, "after EndInput", c)
	s.checkpoint(t, 2) // the final checkpoint
	s.complete(t, 2)
	wantLog(t, "final checkpoint", c, "precommit 2 [2]", "begin 3", "commit 1", "commit 2")
	wantVisible(t, "after the final checkpoint", c, 1, 2)
}

// wantCommitMetrics checks the sink's committer metrics (numCommittablesSuccess,
// numCommittablesFailure, pendingCommittables).
func wantCommitMetrics(t *testing.T, when string, s *fakeSink, ok, failed, pending float64) {
	t.Helper()
	if got := []float64{s.committedOK.Value(), s.committedFailed.Value(), s.pendingCount.Value()}; !slices.Equal(got, []float64{ok, failed, pending}) {
		t.Errorf("%s: committed, failed, pending = %v, want %v", when, got, []float64{ok, failed, pending})
	}
}
