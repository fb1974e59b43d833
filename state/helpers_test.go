package state

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"go.uber.org/goleak"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var kinds = []string{BackendHashMap, BackendBBolt}

const testMaxP = 128

// newBackend creates a backend closed at the end of the test.
func newBackend(t testing.TB, kind string, keyType record.Type, rng KeyGroupRange, cache int) KeyedBackend {
	t.Helper()
	b, err := NewKeyedBackend(KeyedBackendOptions{
		Kind:           kind,
		KeyType:        keyType,
		MaxParallelism: testMaxP,
		Range:          rng,
		Dir:            t.TempDir(),
		CacheEntries:   cache,
	})
	if err != nil {
		t.Fatalf("NewKeyedBackend(%s) = %v", kind, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return b
}

var fullRange = KeyGroupRange{Start: 0, End: testMaxP - 1}

// files is an in-memory checkpoint directory.
type files map[string][]byte

func (fs files) open(h *pb.FileHandle) (io.ReadCloser, error) {
	data, ok := fs[h.Path]
	if !ok {
		return nil, fmt.Errorf("no file %q", h.Path)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// openBytes is a FileOpener of data, whatever the handle.
func openBytes(data []byte) FileOpener {
	return func(*pb.FileHandle) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
}

// snapshot takes a snapshot of b into fs[path] and returns its handle.
func (fs files) snapshot(t testing.TB, b KeyedBackend, path string) *pb.KeyedStateHandle {
	t.Helper()
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	defer snap.Release()
	var buf bytes.Buffer
	offsets, err := snap.WriteSnapshot(&buf)
	if err != nil {
		t.Fatalf("WriteSnapshot() = %v", err)
	}
	fs[path] = buf.Bytes()
	r := b.KeyGroupRange()
	return &pb.KeyedStateHandle{
		File:          &pb.FileHandle{Path: path, Size: int64(buf.Len())},
		KeyGroupStart: int32(r.Start),
		KeyGroupEnd:   int32(r.End),
		Offsets:       offsets,
	}
}

// set makes k the current key.
func set(b KeyedBackend, k int64) { b.SetCurrentKey(record.IntValue(k)) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
