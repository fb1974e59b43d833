package state

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goflink/goflink/record"
)

// MeasureSnapshot builds a backend of the given kind holding keys int64 ValueState entries
// (int64 keys 0..keys-1, max parallelism 128, all key groups), takes one snapshot to a file
// in dir and fsyncs it. It returns the synchronous part's duration, the total (synchronous
// part, WriteSnapshot and fsync) and the snapshot's size. For bbolt the entries still in the
// write-back cache (up to CacheEntries of them) are not flushed: WriteSnapshot merges them with
// the file. The file and the backend's working files are removed.
func MeasureSnapshot(kind string, keys int, dir string) (sync, total time.Duration, size int64, err error) {
	const maxP = 128
	b, err := NewKeyedBackend(KeyedBackendOptions{
		Kind:           kind,
		KeyType:        record.Int64,
		MaxParallelism: maxP,
		Range:          KeyGroupRange{Start: 0, End: maxP - 1},
		Dir:            dir,
	})
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	vs, err := NewValueState(b, "value", Int64Codec{})
	if err != nil {
		return 0, 0, 0, err
	}
	for i := range keys {
		b.SetCurrentKey(record.IntValue(int64(i)))
		if err := vs.Update(int64(i)); err != nil {
			return 0, 0, 0, err
		}
	}
	f, err := os.CreateTemp(dir, "goflink-snapshot-*")
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, os.Remove(f.Name())) }()
	defer f.Close()

	start := time.Now()
	snap, err := b.Snapshot()
	if err != nil {
		return 0, 0, 0, err
	}
	sync = time.Since(start)
	_, err = snap.WriteSnapshot(f)
	snap.Release()
	if err != nil {
		return 0, 0, 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, 0, 0, fmt.Errorf("fsync snapshot: %w", err)
	}
	total = time.Since(start)
	st, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	return sync, total, st.Size(), nil
}
