package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// populate runs random operations on keys 0..keys-1 of the backends (each key on the backend
// that owns it) and returns the model.
func populate(t testing.TB, bes []KeyedBackend, bss []bundle, keys, ops int, seed uint64) *model {
	t.Helper()
	md := newModel()
	rng := rand.New(rand.NewPCG(seed, 7))
	for range ops {
		k := rng.Int64N(int64(keys))
		kg := KeyGroup(record.IntValue(k), record.Int64, testMaxP)
		i := OperatorIndexForKeyGroup(kg, testMaxP, len(bes))
		set(bes[i], k)
		md.step(t, rng, bss[i], k)
	}
	return md
}

func TestSnapshotRoundTrip(t *testing.T) {
	const keys = 200
	for _, src := range kinds {
		for _, dst := range kinds {
			for _, registerFirst := range []bool{false, true} {
				name := fmt.Sprintf("%s->%s/register-first=%v", src, dst, registerFirst)
				t.Run(name, func(t *testing.T) {
					b := newBackend(t, src, record.Int64, fullRange, 16)
					bs := register(t, b)
					md := populate(t, []KeyedBackend{b}, []bundle{bs}, keys, 3000, 3)
					fs := files{}
					h := fs.snapshot(t, b, "chk-1/op-0")

					r := newBackend(t, dst, record.Int64, fullRange, 16)
					var rs bundle
					if registerFirst {
						rs = register(t, r)
					}
					reads := 0
					read := func(fh *pb.FileHandle) (io.ReadCloser, error) { reads++; return fs.open(fh) }
					must(t, r.Restore([]*pb.KeyedStateHandle{h, h}, read)) // listed twice, read once
					if reads != 1 {
						t.Errorf("Restore read the file %d times, want 1", reads)
					}
					if !registerFirst {
						rs = register(t, r)
					}
					md.checkRange(t, r, rs, keys)
				})
			}
		}
	}
}

// State restored but not registered again must survive the next snapshot.
func TestUnregisteredStateSurvivesSnapshot(t *testing.T) {
	const keys = 100
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, fullRange, 0)
			bs := register(t, b)
			md := populate(t, []KeyedBackend{b}, []bundle{bs}, keys, 1000, 5)
			fs := files{}
			h1 := fs.snapshot(t, b, "chk-1")

			mid := newBackend(t, kind, record.Int64, fullRange, 0)
			must(t, mid.Restore([]*pb.KeyedStateHandle{h1}, fs.open))
			h2 := fs.snapshot(t, mid, "chk-2") // no state registered

			last := newBackend(t, kind, record.Int64, fullRange, 0)
			must(t, last.Restore([]*pb.KeyedStateHandle{h2}, fs.open))
			md.checkRange(t, last, register(t, last), keys)
		})
	}
}

func TestRestoreKindMismatch(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, fullRange, 0)
			vs, err := NewValueState(b, "s", Int64Codec{})
			must(t, err)
			set(b, 1)
			must(t, vs.Update(1))
			fs := files{}
			h := fs.snapshot(t, b, "chk-1")

			r := newBackend(t, kind, record.Int64, fullRange, 0)
			must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
			if _, err := NewListState(r, "s", Int64Codec{}); err == nil || !strings.Contains(err.Error(), `"s"`) {
				t.Errorf("NewListState over a restored value state = %v, want an error naming it", err)
			}
			r2 := newBackend(t, kind, record.Int64, fullRange, 0)
			_, err = NewReducingState(r2, "s", Int64Codec{}, func(a, b int64) int64 { return a + b })
			must(t, err)
			if err := r2.Restore([]*pb.KeyedStateHandle{h}, fs.open); err == nil {
				t.Errorf("Restore of a value state into a registered reducing state = nil, want an error")
			}
		})
	}
}

func TestRescaleKeyed(t *testing.T) {
	const keys = 500
	for _, tc := range []struct{ from, to int }{{2, 3}, {2, 1}, {3, 2}, {1, 4}} {
		t.Run(fmt.Sprintf("%d->%d", tc.from, tc.to), func(t *testing.T) {
			fs := files{}
			var (
				old     []KeyedBackend
				bundles []bundle
			)
			for i := range tc.from {
				b := newBackend(t, kinds[i%2], record.Int64, RangeForOperator(i, testMaxP, tc.from), 32)
				old = append(old, b)
				bundles = append(bundles, register(t, b))
			}
			md := populate(t, old, bundles, keys, 5000, 11)
			var handles []*pb.KeyedStateHandle
			for i, b := range old {
				handles = append(handles, fs.snapshot(t, b, fmt.Sprintf("chk-1/op-%d", i)))
			}
			for i := range tc.to {
				rng := RangeForOperator(i, testMaxP, tc.to)
				b := newBackend(t, kinds[(i+1)%2], record.Int64, rng, 32)
				var reads []string
				read := func(h *pb.FileHandle) (io.ReadCloser, error) {
					reads = append(reads, h.Path)
					return fs.open(h)
				}
				must(t, b.Restore(handles, read))
				for _, h := range handles {
					intersects := max(int(h.KeyGroupStart), rng.Start) <= min(int(h.KeyGroupEnd), rng.End)
					if read := strings.Contains(strings.Join(reads, ","), h.File.Path); read != intersects {
						t.Errorf("subtask %d read %s = %v, want %v", i, h.File.Path, read, intersects)
					}
				}
				md.checkRange(t, b, register(t, b), keys)
			}
		})
	}
}

// gateWriter blocks its first Write until released, so that the test can write to the
// backend while a snapshot is being written.
type gateWriter struct {
	buf     bytes.Buffer
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.started)
		<-g.release
	})
	return g.buf.Write(p)
}

func TestWritesContinueDuringSnapshot(t *testing.T) {
	const keys = 8000
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			// A small cache makes the writes below flush (commit) while the snapshot streams.
			b := newBackend(t, kind, record.Int64, fullRange, 1000)
			bs := register(t, b)
			md := populate(t, []KeyedBackend{b}, []bundle{bs}, keys, 4*keys, 13)
			snap, err := b.Snapshot()
			must(t, err)

			g := &gateWriter{started: make(chan struct{}), release: make(chan struct{})}
			type result struct {
				offsets []int64
				err     error
			}
			done := make(chan result)
			go func() {
				offsets, err := snap.WriteSnapshot(g)
				done <- result{offsets, err}
			}()
			<-g.started
			// WriteSnapshot is blocked in the middle of the snapshot: change every key.
			rng := rand.New(rand.NewPCG(99, 1))
			after := newModel()
			for k := range int64(keys) {
				set(b, k)
				after.step(t, rng, bs, k)
				must(t, bs.v.Update(-k))
				must(t, bs.m.Clear())
			}
			close(g.release)
			res := <-done
			snap.Release()
			must(t, res.err)

			if n := g.buf.Len(); n < 3*64<<10 { // WriteSnapshot buffers 64 KiB
				t.Fatalf("snapshot of %d bytes is too small to be interrupted mid-stream", n)
			}
			fs := files{"chk": g.buf.Bytes()}
			h := &pb.KeyedStateHandle{File: &pb.FileHandle{Path: "chk", Size: int64(g.buf.Len())}, KeyGroupStart: 0, KeyGroupEnd: testMaxP - 1, Offsets: res.offsets}
			for _, dst := range kinds {
				r := newBackend(t, dst, record.Int64, fullRange, 0)
				must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
				md.checkRange(t, r, register(t, r), keys)
			}
			// The live backend has the new values.
			set(b, 5)
			if v, ok, err := bs.v.Value(); v != -5 || !ok || err != nil {
				t.Fatalf("live Value() = %d, %v, %v, want -5", v, ok, err)
			}
		})
	}
}

// Two snapshots outstanding at once each capture their own point in time.
func TestConcurrentSnapshots(t *testing.T) {
	const keys = 300
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, fullRange, 50)
			bs := register(t, b)
			md1 := populate(t, []KeyedBackend{b}, []bundle{bs}, keys, 3000, 21)
			s1, err := b.Snapshot()
			must(t, err)
			md2 := md1.clone()
			for k := range int64(keys) {
				set(b, k)
				must(t, bs.v.Update(k*10))
				md2.v[k] = k * 10
			}
			s2, err := b.Snapshot()
			must(t, err)
			for k := range int64(keys) {
				set(b, k)
				must(t, bs.v.Clear())
				must(t, bs.l.Add("later"))
			}
			var w1, w2 bytes.Buffer
			var wg sync.WaitGroup
			var o1, o2 []int64
			var e1, e2 error
			wg.Go(func() { o1, e1 = s1.WriteSnapshot(&w1) })
			wg.Go(func() { o2, e2 = s2.WriteSnapshot(&w2) })
			wg.Wait()
			s1.Release()
			s2.Release()
			must(t, errors.Join(e1, e2))

			fs := files{"s1": w1.Bytes(), "s2": w2.Bytes()}
			for _, c := range []struct {
				path    string
				offsets []int64
				md      *model
			}{{"s1", o1, md1}, {"s2", o2, md2}} {
				r := newBackend(t, kind, record.Int64, fullRange, 0)
				h := &pb.KeyedStateHandle{File: &pb.FileHandle{Path: c.path, Size: int64(len(fs[c.path]))}, KeyGroupEnd: testMaxP - 1, Offsets: c.offsets}
				must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
				c.md.checkRange(t, r, register(t, r), keys)
			}
		})
	}
}

func TestRestoreRejectsCorruptInput(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.String, fullRange, 0)
			bs, err := NewMapState(b, "m", StringCodec{}, Int64Codec{})
			must(t, err)
			ls, err := NewListState(b, "l", Int64Codec{})
			must(t, err)
			for i := range 20 {
				b.SetCurrentKey(record.StringValue(fmt.Sprint("key-", i)))
				must(t, bs.Put("x", int64(i)))
				must(t, ls.Add(int64(i)))
			}
			fs := files{}
			h := fs.snapshot(t, b, "good")
			good := fs["good"]

			// A failed restore leaves partial state behind, which does not matter here.
			r := newBackend(t, kind, record.String, fullRange, 0)
			_, err = NewMapState(r, "m", StringCodec{}, Int64Codec{})
			must(t, err)
			restore := func(data []byte, h *pb.KeyedStateHandle) error {
				return r.Restore([]*pb.KeyedStateHandle{h}, openBytes(data))
			}
			must(t, restore(good, h))

			for n := 0; n < len(good); n++ {
				if err := restore(good[:n], h); err == nil {
					t.Fatalf("Restore of the first %d of %d bytes = nil, want an error", n, len(good))
				}
			}
			rng := rand.New(rand.NewPCG(5, 5))
			for range 300 {
				bad := bytes.Clone(good)
				bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
				_ = restore(bad, h) // must not panic
			}

			for _, tc := range []struct {
				name   string
				mutate func(h *pb.KeyedStateHandle)
			}{
				{"too few offsets", func(h *pb.KeyedStateHandle) { h.Offsets = h.Offsets[1:] }},
				{"offset past the end", func(h *pb.KeyedStateHandle) { h.Offsets[3] = int64(len(good)) + 10 }},
				{"offset into the header", func(h *pb.KeyedStateHandle) { h.Offsets[0] = 2 }},
				{"offsets swapped", func(h *pb.KeyedStateHandle) { h.Offsets[0], h.Offsets[1] = h.Offsets[1], h.Offsets[0] }},
				{"range differs from the file", func(h *pb.KeyedStateHandle) { h.KeyGroupStart = 1; h.Offsets = h.Offsets[1:] }},
			} {
				bad := &pb.KeyedStateHandle{File: h.File, KeyGroupStart: h.KeyGroupStart, KeyGroupEnd: h.KeyGroupEnd, Offsets: append([]int64(nil), h.Offsets...)}
				tc.mutate(bad)
				if err := restore(good, bad); err == nil {
					t.Errorf("Restore with %s = nil, want an error", tc.name)
				}
			}
		})
	}
}

func TestRestoreRejectsOtherMaxParallelismOrKeyType(t *testing.T) {
	b := newBackend(t, BackendHashMap, record.Int64, fullRange, 0)
	_ = register(t, b)
	fs := files{}
	h := fs.snapshot(t, b, "chk")
	for _, o := range []KeyedBackendOptions{
		{KeyType: record.String, MaxParallelism: testMaxP, Range: fullRange},
		{KeyType: record.Int64, MaxParallelism: 256, Range: KeyGroupRange{Start: 0, End: 255}},
	} {
		r, err := NewKeyedBackend(o)
		must(t, err)
		if err := r.Restore([]*pb.KeyedStateHandle{h}, fs.open); err == nil {
			t.Errorf("Restore into %+v = nil, want an error", o)
		}
		must(t, r.Close())
	}
}

func TestRestoreReadError(t *testing.T) {
	for _, kind := range kinds {
		b := newBackend(t, kind, record.Int64, fullRange, 0)
		h := &pb.KeyedStateHandle{File: &pb.FileHandle{Path: "gone"}, KeyGroupEnd: testMaxP - 1, Offsets: make([]int64, testMaxP)}
		err := b.Restore([]*pb.KeyedStateHandle{h}, func(*pb.FileHandle) (io.ReadCloser, error) { return nil, io.ErrUnexpectedEOF })
		if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "gone") {
			t.Errorf("%s: Restore with a failing read = %v, want it wrapped with the path", kind, err)
		}
	}
}

// Both backends produce the same format: a snapshot of one is byte-for-byte a valid snapshot
// that decodes to the same entries in the other, and the header is identical.
func TestSnapshotHeadersMatchAcrossBackends(t *testing.T) {
	var headers [][]byte
	for _, kind := range kinds {
		b := newBackend(t, kind, record.Int64, RangeForOperator(1, testMaxP, 3), 0)
		_ = register(t, b)
		fs := files{}
		h := fs.snapshot(t, b, "x")
		hdr, err := parseHeader(fs["x"])
		must(t, err)
		headers = append(headers, fs["x"][:hdr.size])
		if want := RangeForOperator(1, testMaxP, 3); hdr.rng != want || len(h.Offsets) != want.Len() {
			t.Errorf("%s: header range %v with %d offsets, want %v", kind, hdr.rng, len(h.Offsets), want)
		}
	}
	if !bytes.Equal(headers[0], headers[1]) {
		t.Errorf("headers differ:\n%x\n%x", headers[0], headers[1])
	}
}
