package state

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// BenchmarkValueStateUpdate measures the hot path of a keyed operator: set the key, read the
// value, write it back, over 10k existing keys (int64 keys, and string keys under /string).
func BenchmarkValueStateUpdate(b *testing.B) {
	const keys = 10_000
	ints, strs := make([]record.Value, keys), make([]record.Value, keys)
	for i := range keys {
		ints[i] = record.IntValue(int64(i) * 7919)
		strs[i] = record.StringValue(fmt.Sprintf("user-%d", i*7919))
	}
	for _, kind := range []string{BackendHashMap, BackendBBolt, BackendHashMap + "/string"} {
		keyType, ks := record.Int64, ints
		if strings.HasSuffix(kind, "/string") {
			keyType, ks = record.String, strs
		}
		b.Run(kind, func(b *testing.B) {
			be := newBackend(b, strings.TrimSuffix(kind, "/string"), keyType, fullRange, 0)
			vs, err := NewValueState(be, "v", Int64Codec{})
			must(b, err)
			for _, k := range ks {
				be.SetCurrentKey(k)
				must(b, vs.Update(1))
			}
			b.Run("update", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					be.SetCurrentKey(ks[i%keys])
					if err := vs.Update(int64(i)); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run("get-update", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					be.SetCurrentKey(ks[i%keys])
					v, _, err := vs.Value()
					if err == nil {
						err = vs.Update(v + 1)
					}
					if err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkSnapshot takes full snapshots of int64 ValueState entries to a file with fsync.
// Before each snapshot (untimed) it updates min(keys, 50k) keys, as a task does between
// checkpoints: the bbolt backend's snapshot freezes them in its write-back cache and merges
// them with the file in WriteSnapshot (they are flushed later, by the untimed updates). sync-ns/op
// is the synchronous part (on the task goroutine); ns/op is the whole snapshot.
func BenchmarkSnapshot(b *testing.B) {
	for _, kind := range kinds {
		for _, keys := range []int{10_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/%dk", kind, keys/1000), func(b *testing.B) {
				be, vs := filledValueState(b, kind, keys)
				dir := b.TempDir()
				var sync time.Duration
				var size int64
				dirty := min(keys, 50_000)
				next := 0
				for b.Loop() {
					b.StopTimer()
					for range dirty {
						be.SetCurrentKey(record.IntValue(int64(next % keys)))
						must(b, vs.Update(int64(next)))
						next++
					}
					b.StartTimer()
					f, err := os.Create(dir + "/snap")
					must(b, err)
					start := time.Now()
					snap, err := be.Snapshot()
					must(b, err)
					sync += time.Since(start)
					_, err = snap.WriteSnapshot(f)
					must(b, err)
					snap.Release()
					must(b, f.Sync())
					st, err := f.Stat()
					must(b, err)
					size = st.Size()
					must(b, f.Close())
				}
				b.ReportMetric(float64(sync.Nanoseconds())/float64(b.N), "sync-ns/op")
				b.ReportMetric(float64(size), "bytes")
			})
		}
	}
}

func TestMeasureSnapshot(t *testing.T) {
	for _, kind := range kinds {
		sync, total, size, err := MeasureSnapshot(kind, 1000, t.TempDir())
		if err != nil || sync <= 0 || total < sync || size <= 0 {
			t.Errorf("MeasureSnapshot(%s) = %v, %v, %d, %v", kind, sync, total, size, err)
		}
	}
	if _, _, _, err := MeasureSnapshot("nope", 1, t.TempDir()); err == nil {
		t.Errorf("MeasureSnapshot(nope) = nil error")
	}
}

// BenchmarkValueStateUpdateLarge updates 1M keys round robin: for bbolt most updates miss the
// write-back cache and every CacheEntries new dirty entries cost a flush.
func BenchmarkValueStateUpdateLarge(b *testing.B) {
	const keys = 1_000_000
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			be := newBackend(b, kind, record.Int64, fullRange, 0)
			vs, err := NewValueState(be, "v", Int64Codec{})
			must(b, err)
			for i := range keys {
				be.SetCurrentKey(record.IntValue(int64(i)))
				must(b, vs.Update(1))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				be.SetCurrentKey(record.IntValue(int64(i % keys)))
				v, _, err := vs.Value()
				if err == nil {
					err = vs.Update(v + 1)
				}
				if err != nil {
					b.Fatal(err)
				}
				i += 7919
			}
		})
	}
}

// BenchmarkSnapshotListOfRows snapshots list state of many keys with one row each (a join's
// buffered records): the encoding speed of large state.
func BenchmarkSnapshotListOfRows(b *testing.B) {
	schema := record.MustSchema(record.Field{Name: "a", Type: record.Int64}, record.Field{Name: "b", Type: record.Int64},
		record.Field{Name: "extra", Type: record.String})
	extra := strings.Repeat("x", 100)
	for _, kind := range kinds {
		b.Run(kind+"/500k", func(b *testing.B) {
			be := newBackend(b, kind, record.Int64, fullRange, 0)
			ls, err := NewListState(be, "l", RowCodec(schema))
			must(b, err)
			for i := range 500_000 {
				be.SetCurrentKey(record.IntValue(int64(i)))
				must(b, ls.Add(record.Row{record.IntValue(int64(i)), record.IntValue(7), record.StringValue(extra)}))
			}
			for b.Loop() {
				snap, err := be.Snapshot()
				must(b, err)
				_, err = snap.WriteSnapshot(io.Discard)
				must(b, err)
				snap.Release()
			}
		})
	}
}

// BenchmarkRestore restores a full snapshot of int64 ValueState entries (from memory) into a
// new backend, as a task restores its key groups after a rescale.
func BenchmarkRestore(b *testing.B) {
	for _, kind := range kinds {
		for _, keys := range []int{10_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/%dk", kind, keys/1000), func(b *testing.B) {
				be, _ := filledValueState(b, kind, keys)
				snap, err := be.Snapshot()
				must(b, err)
				var buf bytes.Buffer
				offsets, err := snap.WriteSnapshot(&buf)
				must(b, err)
				snap.Release()
				fs := files{"chk": buf.Bytes()}
				h := &pb.KeyedStateHandle{File: &pb.FileHandle{Path: "chk", Size: int64(buf.Len())}, KeyGroupStart: 0, KeyGroupEnd: testMaxP - 1, Offsets: offsets}
				for b.Loop() {
					b.StopTimer()
					r := newBackend(b, kind, record.Int64, fullRange, 0)
					b.StartTimer()
					must(b, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
				}
			})
		}
	}
}

// filledValueState is a backend of kind with an int64 ValueState "v" holding keys keys 0..keys-1
// (value = key).
func filledValueState(b *testing.B, kind string, keys int) (KeyedBackend, *ValueState[int64]) {
	be := newBackend(b, kind, record.Int64, fullRange, 0)
	vs, err := NewValueState(be, "v", Int64Codec{})
	must(b, err)
	for i := range keys {
		be.SetCurrentKey(record.IntValue(int64(i)))
		must(b, vs.Update(int64(i)))
	}
	return be, vs
}
