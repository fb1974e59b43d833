package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// takenSnapshot is a snapshot and the model of the state at Snapshot().
type takenSnapshot struct {
	snap     Snapshot
	md       *model
	g        *gateWriter
	res      chan snapResult
	released bool
}

type snapResult struct {
	offsets []int64
	err     error
}

// onceSnapshot is a snapshot that a test cleanup releases unless the test did, so that a
// failed test does not hang in the backend's Close (which waits for snapshots).
type onceSnapshot struct {
	Snapshot
	once sync.Once
}

func (s *onceSnapshot) Release() { s.once.Do(s.Snapshot.Release) }

// takeSnapshot takes a snapshot of b, created by newBackend, and releases it at the latest
// before b's Close.
func takeSnapshot(t *testing.T, b KeyedBackend) *onceSnapshot {
	t.Helper()
	snap, err := b.Snapshot()
	must(t, err)
	s := &onceSnapshot{Snapshot: snap}
	t.Cleanup(s.Release)
	return s
}

// checkSnapshot restores a written snapshot into a backend of each kind of dsts and compares
// it with the model.
func checkSnapshot(t *testing.T, data []byte, offsets []int64, md *model, keys int, dsts ...string) {
	t.Helper()
	fs := files{"chk": data}
	h := &pb.KeyedStateHandle{File: &pb.FileHandle{Path: "chk", Size: int64(len(data))}, KeyGroupStart: 0, KeyGroupEnd: testMaxP - 1, Offsets: offsets}
	for _, dst := range dsts {
		r := newBackend(t, dst, record.Int64, fullRange, 0)
		must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
		md.checkRange(t, r, register(t, r), keys)
	}
}

// The bbolt backend's Snapshot does not flush its write-back cache: it freezes it, and
// WriteSnapshot merges the file with the frozen layers. Every snapshot must hold the state at
// its Snapshot(), for every state kind, whatever was written, overwritten, deleted or
// cleared, flushed or not, after it, including while WriteSnapshot runs.
func TestBBoltSnapshotOfUnflushedCache(t *testing.T) {
	const (
		keys   = 5000
		rounds = maxFrozenLayers + 2 // enough snapshots for the layer bound to force a flush
	)
	// Restoring into bbolt is slower: only every third snapshot is.
	dsts := func(i int) []string {
		if i%3 == 0 {
			return kinds
		}
		return []string{BackendHashMap}
	}
	for _, cache := range []int{500, 3000, 1 << 20} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			b := newBackend(t, BackendBBolt, record.Int64, fullRange, cache)
			bb := b.(*boltBackend)
			bs := register(t, b)
			md := populate(t, []KeyedBackend{b}, []bundle{bs}, keys, 4*keys, 41)
			rng := rand.New(rand.NewPCG(41, 3))
			var snaps []*takenSnapshot
			t.Cleanup(func() { // before Close, which waits for them, when the test fails
				for _, s := range snaps {
					if s.g != nil {
						select {
						case <-s.g.release:
						default:
							close(s.g.release)
						}
					}
					if s.res != nil {
						<-s.res
					}
					if !s.released {
						s.snap.Release()
					}
				}
			})
			take := func() {
				t.Helper()
				dirty := bb.dirty
				snap, err := b.Snapshot()
				must(t, err)
				if bb.dirty != dirty {
					t.Fatalf("Snapshot() changed the cache's entry count %d to %d: it flushed", dirty, bb.dirty)
				}
				snaps = append(snaps, &takenSnapshot{snap: snap, md: md.clone()})
			}
			// change runs n random operations and overwrites the value of every third key.
			change := func(n int, check bool) {
				t.Helper()
				for i := range n {
					k := rng.Int64N(keys)
					set(b, k)
					md.step(t, rng, bs, k)
					if check && i%50 == 0 {
						md.check(t, b, bs, k) // reads through the frozen layers
					}
				}
				for k := rng.Int64N(3); k < keys; k += 3 {
					set(b, k)
					x := rng.Int64N(1000)
					must(t, bs.v.Update(x))
					md.v[k] = x
				}
			}
			for range rounds {
				take()
				change(keys, true)
			}
			md.checkRange(t, b, bs, keys)

			// Write every snapshot while the task keeps writing, flushing and snapshotting.
			for _, s := range snaps {
				s.g = &gateWriter{started: make(chan struct{}), release: make(chan struct{})}
				s.res = make(chan snapResult, 1)
				go func() {
					offsets, err := s.snap.WriteSnapshot(s.g)
					s.res <- snapResult{offsets, err}
				}()
			}
			change(keys, false) // while the snapshots merge their layers
			for _, s := range snaps {
				<-s.g.started // blocked mid-stream
			}
			written := len(snaps)
			for _, s := range snaps {
				close(s.g.release)
			}
			for range maxFrozenLayers {
				change(keys/8, false) // while the snapshots stream
				take()
			}
			for i, s := range snaps[:written] {
				r := <-s.res
				s.res <- r // for the cleanup
				s.snap.Release()
				s.released = true
				must(t, r.err)
				if n := s.g.buf.Len(); n < 2*64<<10 { // WriteSnapshot buffers 64 KiB
					t.Fatalf("snapshot of %d bytes is too small to be interrupted mid-stream", n)
				}
				checkSnapshot(t, s.g.buf.Bytes(), r.offsets, s.md, keys, dsts(i)...)
			}
			// The snapshots taken while others streamed, written after more changes.
			change(keys, false)
			for i, s := range snaps[written:] {
				var buf bytes.Buffer
				offsets, err := s.snap.WriteSnapshot(&buf)
				s.snap.Release()
				s.released = true
				must(t, err)
				if n := buf.Len(); n < 2*64<<10 {
					t.Fatalf("snapshot of %d bytes", n)
				}
				checkSnapshot(t, buf.Bytes(), offsets, s.md, keys, dsts(i)...)
			}
			md.checkRange(t, b, bs, keys)
		})
	}
}

// A snapshot written after its backend moved on keeps what it froze: its layers are not
// modified by later writes to the same keys, nor dropped by the flush that writes them.
func TestBBoltSnapshotLayersAreImmutable(t *testing.T) {
	b := newBackend(t, BackendBBolt, record.Int64, fullRange, 1<<20)
	bb := b.(*boltBackend)
	bs := register(t, b)
	const keys = 50
	md := newModel()
	for k := range int64(keys) {
		set(b, k)
		must(t, bs.v.Update(k))
		must(t, bs.l.Add("a"))
		must(t, bs.m.Put("x", k))
		must(t, bs.r.Add(k))
		md.v[k], md.l[k], md.m[k], md.r[k] = k, []string{"a"}, map[string]int64{"x": k}, k
	}
	s1 := takeSnapshot(t, b)
	md1 := md.clone()
	// The same keys again: the new entries must not share the frozen ones' buffers.
	for k := range int64(keys) {
		set(b, k)
		must(t, bs.v.Update(-k))
		must(t, bs.l.Add("b"))
		must(t, bs.m.Put("x", -k))
		must(t, bs.m.Put("y", k))
		must(t, bs.r.Add(1))
		md.v[k], md.l[k], md.m[k], md.r[k] = -k, []string{"a", "b"}, map[string]int64{"x": -k, "y": k}, k+1
	}
	s2 := takeSnapshot(t, b)
	md2 := md.clone()
	if bb.layers != 2 {
		t.Fatalf("layers = %d after two snapshots of dirty caches, want 2", bb.layers)
	}
	for k := range int64(keys) {
		set(b, k)
		if k%2 == 0 {
			must(t, bs.v.Clear())
			must(t, bs.l.Clear())
			must(t, bs.m.Clear())
			must(t, bs.r.Clear())
			delete(md.v, k)
			delete(md.l, k)
			delete(md.m, k)
			delete(md.r, k)
		} else {
			must(t, bs.l.Update([]string{"c"}))
			must(t, bs.m.Remove("y"))
			md.l[k] = []string{"c"}
			delete(md.m[k], "y")
		}
	}
	// Force a flush of every layer, then overwrite again.
	bb.flushAt = 0
	set(b, 0)
	must(t, bs.v.Update(100))
	md.v[0] = 100
	if bb.layers != 0 || len(bb.tables["count"].(*boltTable).frozen) != 0 {
		t.Fatalf("no flush: layers = %d", bb.layers)
	}
	md.checkRange(t, b, bs, keys)
	for _, c := range []struct {
		s  Snapshot
		md *model
	}{{s1, md1}, {s2, md2}} {
		var buf bytes.Buffer
		offsets, err := c.s.WriteSnapshot(&buf)
		c.s.Release()
		must(t, err)
		checkSnapshot(t, buf.Bytes(), offsets, c.md, keys, kinds...)
	}
}

// MapState reads merge the layers: an older layer's entries show through a newer layer that
// did not clear the map, and a clear in a newer layer hides older layers and the file.
func TestBBoltMapStateThroughLayers(t *testing.T) {
	b := newBackend(t, BackendBBolt, record.Int64, fullRange, 1<<20)
	bs := register(t, b)
	md := newModel()
	var snaps []*onceSnapshot
	rng := rand.New(rand.NewPCG(8, 8))
	const keys = 20
	for range maxFrozenLayers - 1 {
		for range 200 {
			k := rng.Int64N(keys)
			set(b, k)
			md.step(t, rng, bs, k)
		}
		snaps = append(snaps, takeSnapshot(t, b))
		md.checkRange(t, b, bs, keys)
	}
	if n := len(b.(*boltBackend).tables["totals"].(*boltMapTable).frozen); n < maxFrozenLayers-2 {
		t.Fatalf("%d frozen map layers, want several", n)
	}
	for _, s := range snaps {
		s.Release()
	}
}

// Close waits for a snapshot that is not released, which can still be written meanwhile.
func TestBBoltCloseWaitsForSnapshot(t *testing.T) {
	b := newBackend(t, BackendBBolt, record.Int64, fullRange, 1<<20)
	bs := register(t, b)
	const keys = 300
	md := populate(t, []KeyedBackend{b}, []bundle{bs}, keys, 2000, 17)
	snap := takeSnapshot(t, b)
	for k := range int64(keys) {
		set(b, k)
		must(t, bs.v.Update(-1)) // not in the snapshot
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close() = %v before the snapshot was released", err)
	case <-time.After(50 * time.Millisecond):
	}
	var buf bytes.Buffer
	offsets, err := snap.WriteSnapshot(&buf)
	snap.Release()
	must(t, err)
	must(t, <-closed)
	checkSnapshot(t, buf.Bytes(), offsets, md, keys, kinds...)
}
