package state

import (
	"context"
	"fmt"
	"io"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/storage"
)

// BenchmarkRestoreFile restores a full snapshot of int64 ValueState entries from a state file
// of a local checkpoint directory, through storage.Root as a task does.
func BenchmarkRestoreFile(b *testing.B) {
	for _, kind := range kinds {
		for _, keys := range []int{10_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/%dk", kind, keys/1000), func(b *testing.B) {
				be, _ := filledValueState(b, kind, keys)
				snap, err := be.Snapshot()
				must(b, err)
				ctx := context.Background()
				root := storage.NewRoot(storage.NewLocal(b.TempDir()))
				w, err := root.CreateFile(ctx, 1, "keyed")
				must(b, err)
				offsets, err := snap.WriteSnapshot(w)
				must(b, err)
				snap.Release()
				fh, err := w.Commit()
				must(b, err)
				h := &pb.KeyedStateHandle{File: fh, KeyGroupStart: 0, KeyGroupEnd: testMaxP - 1, Offsets: offsets}
				open := func(h *pb.FileHandle) (io.ReadCloser, error) { return root.OpenFile(ctx, h) }
				b.ReportMetric(float64(fh.Size), "file-bytes")
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					r := newBackend(b, kind, record.Int64, fullRange, 0)
					b.StartTimer()
					must(b, r.Restore([]*pb.KeyedStateHandle{h}, open))
				}
			})
		}
	}
}
