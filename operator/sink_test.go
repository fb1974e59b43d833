package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/goflink/goflink/internal/dirowner"
	"github.com/goflink/goflink/internal/dirsync"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

func fileSinkOp(dir string) *pb.Operator {
	return &pb.Operator{Name: "file", InputSchema: kvSchema.Proto(), Type: "file", Config: cfg(fileConfig{Path: dir})}
}

// dirNames lists a directory: visible (committed) and hidden file names, sorted, without the
// files that record the directory's owner.
func dirNames(t *testing.T, dir string) (visible, hidden []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == dirowner.OwnerFile || e.Name() == dirowner.LockFile {
			continue
		}
		if strings.HasPrefix(e.Name(), ".") {
			hidden = append(hidden, e.Name())
		} else {
			visible = append(visible, e.Name())
		}
	}
	return visible, hidden
}

// committedLines is what a reader of dir sees: the lines of the visible files in name order.
func committedLines(t *testing.T, dir string) []string {
	t.Helper()
	visible, _ := dirNames(t, dir)
	var lines []string
	for _, name := range visible {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Errorf("committed file %s is empty", name)
		}
		lines = append(lines, strings.SplitAfter(string(b), "\n")...)
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
	}
	return lines
}

func jsonLines(rows ...record.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, string(record.AppendJSON(nil, kvSchema, r))+"\n")
	}
	return out
}

func TestFileSinkBounded(t *testing.T) {
	// Without checkpointing (here: without any state hooks, as before a task wires them) the
	// output of a bounded job is committed at EndInput.
	tests := []struct {
		name    string
		subtask int
		attempt int
		rows    []record.Row
		file    string
	}{
		{"subtask 0 attempt 0", 0, 0, []record.Row{kv("a", 1), kv("b", 2)}, "part-0-0000-00000000.jsonl"},
		{"subtask 2 attempt 3", 2, 3, []record.Row{kv("line\nbreak", -1)}, "part-2-0003-00000000.jsonl"},
		{"no records", 1, 0, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "nested", "out")
			ctx := &Context{OperatorName: "file", Subtask: tc.subtask, Parallelism: 4, Attempt: tc.attempt}
			op, _ := build(t, fileSinkOp(dir), ctx)
			for _, r := range tc.rows {
				if err := op.Process(r); err != nil {
					t.Fatal(err)
				}
			}
			if err := op.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := committedLines(t, dir); len(got) != 0 {
				t.Errorf("visible before EndInput: %q", got)
			}
			if err := op.EndInput(); err != nil {
				t.Fatalf("EndInput: %v", err)
			}
			check := func(when string) {
				visible, hidden := dirNames(t, dir)
				var want []string
				if tc.file != "" {
					want = []string{tc.file}
				}
				if !slices.Equal(visible, want) || len(hidden) != 0 {
					t.Errorf("%s: %s holds %v and hidden %v, want %v", when, dir, visible, hidden, want)
				}
				if got, want := committedLines(t, dir), jsonLines(tc.rows...); !slices.Equal(got, want) {
					t.Errorf("%s: committed %q, want %q", when, got, want)
				}
			}
			check("after EndInput")
			if err := op.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := op.Close(); err != nil {
				t.Errorf("second Close = %v, want nil", err)
			}
			check("after Close")
		})
	}
}

func TestFileSinkRerunAndCancel(t *testing.T) {
	dir := t.TempDir()
	run := func(endInput bool, rows ...record.Row) {
		t.Helper()
		op, _ := build(t, fileSinkOp(dir), &Context{OperatorName: "file", Parallelism: 1})
		for _, r := range rows {
			if err := op.Process(r); err != nil {
				t.Fatal(err)
			}
		}
		if endInput {
			if err := op.EndInput(); err != nil {
				t.Fatal(err)
			}
		}
		if err := op.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run(true, kv("old", 1), kv("old", 2))
	// A rerun into the same directory with the same subtask and attempt adds a file instead
	// of overwriting the first one.
	run(true, kv("new", 3))
	// A cancelled (or failed) run without checkpoints leaves nothing: Close aborts.
	run(false, kv("cancelled", 4))
	visible, hidden := dirNames(t, dir)
	if want := []string{"part-0-0000-00000000.jsonl", "part-0-0000-00000001.jsonl"}; !slices.Equal(visible, want) || len(hidden) != 0 {
		t.Errorf("after two runs and a cancelled one: %v, hidden %v, want %v", visible, hidden, want)
	}
	if got, want := committedLines(t, dir), jsonLines(kv("old", 1), kv("old", 2), kv("new", 3)); !slices.Equal(got, want) {
		t.Errorf("committed %q, want %q", got, want)
	}
}

// fileRun is one attempt of a file sink subtask driven through the checkpoint hooks.
type fileRun struct {
	*fileSink
	sc *fakeStateContext
}

func openFileRun(t *testing.T, dir string, sub, p, attempt int, restoredID int64, restored [][]byte) (*fileRun, error) {
	t.Helper()
	o, err := testRegistry.New(fileSinkOp(dir))
	if err != nil {
		t.Fatal(err)
	}
	s := o.(*fileSink)
	sc := newStateContext(restoredID, map[string][][]byte{TwoPhaseStateName: restored})
	if err := s.InitializeState(sc); err != nil {
		t.Fatalf("InitializeState: %v", err)
	}
	err = s.Open(&Context{OperatorName: "file", Subtask: sub, Parallelism: p, Attempt: attempt}, &capture{})
	return &fileRun{s, sc}, err
}

func mustOpenFileRun(t *testing.T, dir string, sub, p, attempt int, restoredID int64, restored [][]byte) *fileRun {
	t.Helper()
	r, err := openFileRun(t, dir, sub, p, attempt, restoredID, restored)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

func (r *fileRun) write(t *testing.T, rows ...record.Row) {
	t.Helper()
	for _, row := range rows {
		if err := r.Process(row); err != nil {
			t.Fatalf("Process: %v", err)
		}
	}
}

func (r *fileRun) checkpoint(t *testing.T, id int64) [][]byte {
	t.Helper()
	if err := r.PrepareSnapshotPreBarrier(id); err != nil {
		t.Fatalf("PrepareSnapshotPreBarrier(%d): %v", id, err)
	}
	if err := r.SnapshotState(id); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return checkpointOf(t, TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION, r.sc)
}

func (r *fileRun) complete(t *testing.T, id int64) {
	t.Helper()
	if err := r.NotifyCheckpointComplete(id); err != nil {
		t.Fatalf("NotifyCheckpointComplete(%d): %v", id, err)
	}
}

func wantCommitted(t *testing.T, step, dir string, rows ...record.Row) {
	t.Helper()
	if got, want := committedLines(t, dir), jsonLines(rows...); !slices.Equal(got, want) {
		t.Errorf("%s: committed %q, want %q", step, got, want)
	}
}

func TestFileSinkExactlyOnce(t *testing.T) {
	for _, notified := range []bool{true, false} {
		t.Run(fmt.Sprintf("complete(1) delivered %v", notified), func(t *testing.T) {
			dir := t.TempDir()
			a := mustOpenFileRun(t, dir, 0, 1, 0, 0, nil)
			a.write(t, kv("a", 1), kv("a", 2))
			chk1 := a.checkpoint(t, 1)
			a.write(t, kv("b", 1)) // after barrier 1
			wantCommitted(t, "before complete(1)", dir)
			if notified {
				a.complete(t, 1)
				wantCommitted(t, "after complete(1)", dir, kv("a", 1), kv("a", 2))
			}
			a.write(t, kv("b", 2))
			a.checkpoint(t, 2)
			a.write(t, kv("c", 1)) // after barrier 2
			if notified {
				wantCommitted(t, "after barrier 2", dir, kv("a", 1), kv("a", 2))
			} else {
				wantCommitted(t, "after barrier 2", dir)
			}
			wantHidden := []string{".part-0-0000-00000001.pending", ".part-0-0000-00000002.inprogress"}
			if !notified {
				wantHidden = slices.Insert(wantHidden, 0, ".part-0-0000-00000000.pending")
			}
			if _, hidden := dirNames(t, dir); !slices.Equal(hidden, wantHidden) {
				t.Errorf("hidden files before the crash: %v, want %v", hidden, wantHidden)
			}

			// Crash (no Close, no complete(2)); attempt 1 restores checkpoint 1.
			mustOpenFileRun(t, dir, 0, 1, 1, 1, chk1)
			wantCommitted(t, "after restoring checkpoint 1", dir, kv("a", 1), kv("a", 2))
			if _, hidden := dirNames(t, dir); len(hidden) != 0 {
				t.Errorf("hidden files after the restore: %v, want the newer transactions removed", hidden)
			}

			// A second crash before any checkpoint: the restore re-commits idempotently.
			b := mustOpenFileRun(t, dir, 0, 1, 2, 1, chk1)
			wantCommitted(t, "after restoring checkpoint 1 again", dir, kv("a", 1), kv("a", 2))

			// The source replays everything after barrier 1.
			b.write(t, kv("b", 1), kv("b", 2))
			b.checkpoint(t, 2)
			b.write(t, kv("c", 1))
			wantCommitted(t, "replayed, before complete(2)", dir, kv("a", 1), kv("a", 2))
			b.complete(t, 2)
			wantCommitted(t, "after complete(2)", dir, kv("a", 1), kv("a", 2), kv("b", 1), kv("b", 2))
			b.checkpoint(t, 3)
			b.write(t, kv("d", 1))
			// A lost complete(3); the job ends.
			if err := b.EndInput(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			wantCommitted(t, "after EndInput", dir,
				kv("a", 1), kv("a", 2), kv("b", 1), kv("b", 2), kv("c", 1), kv("d", 1))
			visible, hidden := dirNames(t, dir)
			if want := []string{"part-0-0000-00000000.jsonl", "part-0-0002-00000000.jsonl", "part-0-0002-00000001.jsonl", "part-0-0002-00000002.jsonl"}; !slices.Equal(visible, want) || len(hidden) != 0 {
				t.Errorf("final directory: %v, hidden %v, want %v", visible, hidden, want)
			}
		})
	}
}

func TestFileSinkEmptyTransactions(t *testing.T) {
	dir := t.TempDir()
	r := mustOpenFileRun(t, dir, 0, 1, 0, 0, nil)
	chk1 := r.checkpoint(t, 1) // no records
	r.complete(t, 1)
	r.checkpoint(t, 2)
	if visible, hidden := dirNames(t, dir); len(visible)+len(hidden) != 0 {
		t.Errorf("empty transactions left files: %v %v", visible, hidden)
	}
	// Re-committing an empty transaction on restore is a no-op too.
	mustOpenFileRun(t, dir, 0, 1, 1, 1, chk1)
	if visible, hidden := dirNames(t, dir); len(visible)+len(hidden) != 0 {
		t.Errorf("restored empty transactions left files: %v %v", visible, hidden)
	}
}

func TestFileSinkRestoreDetectsDataLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(pending string) error
		want   string
	}{
		{"pending file deleted", os.Remove, "data loss: committed file missing"},
		{"pending file truncated", func(p string) error { return os.Truncate(p, 3) }, "pre-committed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := mustOpenFileRun(t, dir, 0, 1, 0, 0, nil)
			a.write(t, kv("a", 1))
			chk1 := a.checkpoint(t, 1)
			_, hidden := dirNames(t, dir)
			if len(hidden) != 1 || !strings.HasSuffix(hidden[0], ".pending") {
				t.Fatalf("after checkpoint 1: hidden %v, want one pending file", hidden)
			}
			if err := tc.damage(filepath.Join(dir, hidden[0])); err != nil {
				t.Fatal(err)
			}
			_, err := openFileRun(t, dir, 0, 1, 1, 1, chk1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("restore = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestFileSinkRestoreRescaled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		from  int
		to    int
		order []int // in which the new subtasks open
	}{
		{"4 to 2", 4, 2, []int{1, 0}},
		{"2 to 1", 2, 1, []int{0}},
		{"2 to 3", 2, 3, []int{2, 1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var chk1 [][]byte
			var want []record.Row
			for sub := range tc.from {
				r := mustOpenFileRun(t, dir, sub, tc.from, 0, 0, nil)
				row := kv(fmt.Sprintf("before-%d", sub), int64(sub))
				want = append(want, row)
				r.write(t, row)
				chk1 = append(chk1, r.checkpoint(t, 1)...) // complete(1) is never delivered
				r.write(t, kv("after barrier 1", int64(sub)))
				r.checkpoint(t, 2)
				r.write(t, kv("after barrier 2", int64(sub)))
			}
			for _, sub := range tc.order {
				mustOpenFileRun(t, dir, sub, tc.to, 1, 1, chk1)
			}
			wantCommitted(t, "after the rescaled restore", dir, want...)
			if _, hidden := dirNames(t, dir); len(hidden) != 0 {
				t.Errorf("hidden files after the restore: %v", hidden)
			}
		})
	}
}

func TestFileSinkDecodeRejectsBadNames(t *testing.T) {
	s := &fileSink{parts: &localParts{dir: t.TempDir()}}
	for _, b := range []string{`{"name":"../part-0-x"}`, `{"name":"part-0-0/../../x"}`, `{"name":"other"}`, `{"name":"part-x-1"}`, `{`} {
		if _, err := s.Decode([]byte(b)); err == nil {
			t.Errorf("Decode(%s) = nil error", b)
		}
	}
	if txn, err := s.Decode([]byte(`{"name":"part-3-0001-00000002","size":5,"prepared":true}`)); err != nil || txn.Name != "part-3-0001-00000002" || txn.Size != 5 || !txn.Prepared {
		t.Errorf("Decode of a valid transaction = %+v, %v", txn, err)
	}
}

// TestFileSinkDirectoryIsDurable: the sink creates its directory (and missing parents) with
// the parent of each fsynced, so committed files cannot vanish with their directory's entry in
// a crash; renames in the directory are fsynced too.
func TestFileSinkDirectoryIsDurable(t *testing.T) {
	var mu sync.Mutex
	var synced []string
	t.Cleanup(dirsync.SetSyncHook(func(dir string) { mu.Lock(); synced = append(synced, dir); mu.Unlock() }))
	base := t.TempDir()
	dir := filepath.Join(base, "nested", "out")
	op, _ := build(t, fileSinkOp(dir), &Context{OperatorName: "file", Parallelism: 1})
	if err := op.Process(kv("a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := op.EndInput(); err != nil {
		t.Fatal(err)
	}
	if err := op.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range []string{base, filepath.Join(base, "nested"), dir} {
		if !slices.Contains(synced, d) {
			t.Errorf("%s was not fsynced after an entry was created in it; fsynced: %q", d, synced)
		}
	}
}
