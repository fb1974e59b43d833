package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/storage"
)

// writeStateFile writes a snapshot of b as chk-1/<name> in root and returns its handle.
func writeStateFile(t testing.TB, b KeyedBackend, root storage.Root, name string) *pb.KeyedStateHandle {
	t.Helper()
	snap, err := b.Snapshot()
	must(t, err)
	defer snap.Release()
	w, err := root.CreateFile(context.Background(), 1, name)
	must(t, err)
	offsets, err := snap.WriteSnapshot(w)
	must(t, err)
	fh, err := w.Commit()
	must(t, err)
	r := b.KeyGroupRange()
	return &pb.KeyedStateHandle{File: fh, KeyGroupStart: int32(r.Start), KeyGroupEnd: int32(r.End), Offsets: offsets}
}

// filledBundle is a backend of kind holding random state of keys 0..keys-1 in every kind of
// state, with its model.
func filledBundle(t testing.TB, kind string, keys int) (KeyedBackend, *model) {
	b := newBackend(t, kind, record.Int64, fullRange, 0)
	bs := register(t, b)
	md := newModel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 * keys {
		k := rng.Int64N(int64(keys))
		set(b, k)
		md.step(t, rng, bs, k)
	}
	return b, md
}

func openerOf(root storage.Root) FileOpener {
	return func(h *pb.FileHandle) (io.ReadCloser, error) { return root.OpenFile(context.Background(), h) }
}

// TestRestoreCorruptByteFailsWithTheFile flips one byte at positions all over a state file:
// whether the flip breaks the format or only a value, the restore fails with storage's
// ErrCorrupt naming the file, also when the flipped byte lies in key groups the backend does
// not own, or in a value that was loaded before the end of the file showed the mismatch.
func TestRestoreCorruptByteFailsWithTheFile(t *testing.T) {
	dir := t.TempDir()
	root := storage.NewRoot(storage.NewLocal(dir))
	src, _ := filledBundle(t, BackendHashMap, 300)
	h := writeStateFile(t, src, root, "op-0")
	p := filepath.Join(dir, filepath.FromSlash(h.File.Path))
	good, err := os.ReadFile(p)
	must(t, err)
	positions := []int{0, 5, len(good) / 3, len(good) / 2, len(good) - 2, len(good) - 1}
	for i := 7; i < len(good); i += len(good) / 40 {
		positions = append(positions, i)
	}
	for _, kind := range kinds {
		for n, pos := range positions {
			if kind == BackendBBolt && n%4 != 0 {
				continue // a bbolt backend costs a file each
			}
			bad := bytes.Clone(good)
			bad[pos] ^= 0x5a
			must(t, os.WriteFile(p, bad, 0o644))
			for _, rng := range []KeyGroupRange{fullRange, {Start: 0, End: 9}} {
				b := newBackend(t, kind, record.Int64, rng, 64)
				_ = register(t, b)
				err := b.Restore([]*pb.KeyedStateHandle{h}, openerOf(root))
				if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), h.File.Path) {
					t.Fatalf("%s: byte %d of %d flipped, range %v: Restore = %v, want storage.ErrCorrupt naming %s", kind, pos, len(good), rng, err, h.File.Path)
				}
			}
		}
		if _, err := CountEntries(h, openerOf(root)); !errors.Is(err, storage.ErrCorrupt) {
			t.Errorf("CountEntries of a corrupt file = %v, want storage.ErrCorrupt", err)
		}
	}
	// A value's byte: everything parses, the mismatch shows only at the end of the file.
	must(t, os.WriteFile(p, good, 0o644))
	if _, err := CountEntries(h, openerOf(root)); err != nil {
		t.Fatalf("CountEntries of the good file = %v", err)
	}
}

// TestRestoreTruncatedFile: a state file cut short fails the restore, through storage (its
// size is wrong) and from a reader that does not verify (the format ends too early).
func TestRestoreTruncatedFile(t *testing.T) {
	dir := t.TempDir()
	root := storage.NewRoot(storage.NewLocal(dir))
	src, _ := filledBundle(t, BackendHashMap, 200)
	h := writeStateFile(t, src, root, "op-0")
	p := filepath.Join(dir, filepath.FromSlash(h.File.Path))
	good, err := os.ReadFile(p)
	must(t, err)
	for _, kind := range kinds {
		for _, n := range []int{0, 3, 10, len(good) / 2, len(good) - 1} {
			must(t, os.WriteFile(p, good[:n], 0o644))
			b := newBackend(t, kind, record.Int64, fullRange, 0)
			err := b.Restore([]*pb.KeyedStateHandle{h}, openerOf(root))
			if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), h.File.Path) {
				t.Errorf("%s: first %d of %d bytes through storage: Restore = %v, want storage.ErrCorrupt naming the file", kind, n, len(good), err)
			}
			b = newBackend(t, kind, record.Int64, fullRange, 0)
			err = b.Restore([]*pb.KeyedStateHandle{h}, openBytes(good[:n]))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("%s: first %d of %d bytes: Restore = %v, want ErrCorrupt saying truncated", kind, n, len(good), err)
			}
		}
		// A longer file than the handle says is corrupt too.
		b := newBackend(t, kind, record.Int64, fullRange, 0)
		if err := b.Restore([]*pb.KeyedStateHandle{h}, openBytes(append(bytes.Clone(good), 0))); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: a byte more than the handle says: Restore = %v, want ErrCorrupt", kind, err)
		}
	}
}

// countingReader counts the bytes read, and whether it got to the end and was closed.
type countingReader struct {
	r      io.ReadCloser
	n      int64
	closed bool
	atEOF  bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err == io.EOF {
		c.atEOF = true
	}
	return n, err
}

func (c *countingReader) Close() error {
	c.closed = true
	return c.r.Close()
}

// TestRestoreRangeInTheMiddle restores, from one full-range state file, the key groups of
// each of three subtasks (a rescale from 1 to 3): each gets exactly its keys, and each read
// the file to its end and closed it.
func TestRestoreRangeInTheMiddle(t *testing.T) {
	dir := t.TempDir()
	root := storage.NewRoot(storage.NewLocal(dir))
	for _, srcKind := range kinds {
		src, md := filledBundle(t, srcKind, 400)
		h := writeStateFile(t, src, root, "from-"+srcKind)
		for i := range 3 {
			rng := RangeForOperator(i, testMaxP, 3)
			dst := kinds[i%2]
			b := newBackend(t, dst, record.Int64, rng, 50)
			var readers []*countingReader
			open := func(fh *pb.FileHandle) (io.ReadCloser, error) {
				f, err := root.OpenFile(context.Background(), fh)
				if err != nil {
					return nil, err
				}
				c := &countingReader{r: f}
				readers = append(readers, c)
				return c, nil
			}
			must(t, b.Restore([]*pb.KeyedStateHandle{h}, open))
			if len(readers) != 1 || !readers[0].atEOF || !readers[0].closed || readers[0].n != h.File.Size {
				t.Fatalf("%s into %s %v: read %d of %d bytes (at EOF %v, closed %v)", srcKind, dst, rng, readers[0].n, h.File.Size, readers[0].atEOF, readers[0].closed)
			}
			bs := register(t, b)
			for k := range int64(400) {
				if kg := KeyGroup(record.IntValue(k), record.Int64, testMaxP); rng.Contains(kg) {
					md.check(t, b, bs, k)
				}
			}
			want := map[string]int{}
			for k := range md.v {
				if rng.Contains(KeyGroup(record.IntValue(k), record.Int64, testMaxP)) {
					want["count"]++
				}
			}
			got, err := CountEntries(writeStateFile(t, b, root, fmt.Sprintf("%s-%d", srcKind, i)), openerOf(root))
			must(t, err)
			if got["count"] != want["count"] {
				t.Errorf("%s into %s %v: %d value entries, want %d", srcKind, dst, rng, got["count"], want["count"])
			}
		}
	}
}

// TestRestoreOffsetsOutOfOrder: offsets that go backwards or leave the file fail, whichever
// key group they start.
func TestRestoreOffsetsOutOfOrder(t *testing.T) {
	src, _ := filledBundle(t, BackendHashMap, 100)
	fs := files{}
	h := fs.snapshot(t, src, "chk")
	for _, mutate := range []func(o []int64){
		func(o []int64) { o[10], o[11] = o[11], o[10] },
		func(o []int64) { o[11] = o[10] - 1 },
		func(o []int64) { o[0] = -1 },
		func(o []int64) { o[5] = 1 << 40 },
	} {
		bad := &pb.KeyedStateHandle{File: h.File, KeyGroupStart: h.KeyGroupStart, KeyGroupEnd: h.KeyGroupEnd, Offsets: append([]int64(nil), h.Offsets...)}
		mutate(bad.Offsets)
		for _, rng := range []KeyGroupRange{fullRange, {Start: 5, End: 20}} {
			b := newBackend(t, BackendHashMap, record.Int64, rng, 0)
			if err := b.Restore([]*pb.KeyedStateHandle{bad}, fs.open); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Restore with offsets %v… into %v = %v, want ErrCorrupt", bad.Offsets[:12], rng, err)
			}
		}
	}
}

// heapPeak samples the bytes of live and unswept heap objects every millisecond while fn
// runs, and returns the largest increase over the heap before fn (after a GC).
func heapPeak(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > base {
				peak = max(peak, v-base)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	fn()
	close(done)
	wg.Wait()
	return peak
}

// TestRestoreMemoryIsBounded restores a 64 MiB state file (1024 keys of 64 KiB values): the
// heap must not grow by anything near the file's size while CountEntries and a bbolt
// restore (which keeps its state on disk) read it. Reading the file whole would.
func TestRestoreMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 64 MiB state file")
	}
	const keys, valueSize = 1024, 64 << 10
	dir := t.TempDir()
	root := storage.NewRoot(storage.NewLocal(dir))
	var h *pb.KeyedStateHandle
	func() {
		src := newBackend(t, BackendBBolt, record.Int64, fullRange, 64)
		vs, err := NewValueState(src, "blob", BytesCodec{})
		must(t, err)
		val := bytes.Repeat([]byte("0123456789abcdef"), valueSize/16)
		for k := range int64(keys) {
			set(src, k)
			val[0] = byte(k)
			must(t, vs.Update(val))
		}
		h = writeStateFile(t, src, root, "big")
	}()
	if h.File.Size < keys*valueSize {
		t.Fatalf("state file of %d bytes, want at least %d", h.File.Size, keys*valueSize)
	}
	const limit = 24 << 20
	var counts map[string]int
	var err error
	peak := heapPeak(func() { counts, err = CountEntries(h, openerOf(root)) })
	t.Logf("CountEntries of a %d MiB file: heap peak +%.1f MiB", h.File.Size>>20, float64(peak)/(1<<20))
	if peak > limit {
		t.Errorf("CountEntries of a %d MiB file grew the heap by %d MiB, want at most %d", h.File.Size>>20, peak>>20, limit>>20)
	}
	if err != nil || counts["blob"] != keys {
		t.Fatalf("CountEntries = %v, %v; want %d blobs", counts, err, keys)
	}
	b := newBackend(t, BackendBBolt, record.Int64, fullRange, 32)
	var maxAsk int
	open := func(fh *pb.FileHandle) (io.ReadCloser, error) {
		f, err := root.OpenFile(context.Background(), fh)
		if err != nil {
			return nil, err
		}
		return &maxAskReader{f, &maxAsk}, nil
	}
	peak = heapPeak(func() { err = b.Restore([]*pb.KeyedStateHandle{h}, open) })
	t.Logf("bbolt Restore of a %d MiB file: heap peak +%.1f MiB", h.File.Size>>20, float64(peak)/(1<<20))
	if peak > limit {
		t.Errorf("bbolt Restore of a %d MiB file grew the heap by %d MiB, want at most %d", h.File.Size>>20, peak>>20, limit>>20)
	}
	must(t, err)
	if maxAsk > 1<<20 {
		t.Errorf("Restore asked the file for %d bytes at once, want at most 1 MiB", maxAsk)
	}
	vs, err := NewValueState(b, "blob", BytesCodec{})
	must(t, err)
	set(b, 1000)
	v, ok, err := vs.Value()
	if err != nil || !ok || len(v) != valueSize || v[0] != byte(1000%256) {
		t.Fatalf("restored blob of key 1000: %d bytes, %v, %v", len(v), ok, err)
	}
}

// maxAskReader records the largest Read asked for in *max.
type maxAskReader struct {
	io.ReadCloser
	max *int
}

func (m *maxAskReader) Read(p []byte) (int, error) {
	*m.max = max(*m.max, len(p))
	return m.ReadCloser.Read(p)
}
