package state

import (
	"io"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// Backend kinds (state.backend.type).
const (
	BackendHashMap = "hashmap"
	BackendBBolt   = "bbolt"
)

// KeyedBackend holds the keyed state of one task, partitioned by key groups. It is owned by
// the task's goroutine; only a Snapshot's WriteSnapshot may run on another goroutine.
type KeyedBackend interface {
	// SetCurrentKey sets the key that keyed state accesses refer to.
	SetCurrentKey(k record.Value)
	// CurrentKey returns the current key.
	CurrentKey() record.Value
	// KeyGroupRange is the range of key groups this backend owns.
	KeyGroupRange() KeyGroupRange
	// Snapshot takes the synchronous part of a snapshot. The returned Snapshot writes it,
	// possibly on another goroutine while the backend keeps processing.
	Snapshot() (Snapshot, error)
	// Restore loads the key groups of this backend's range from keyed state handles of any
	// parallelism. It streams each file that holds some of them from open (as
	// storage.Root.OpenFile opens it), in bounded memory, reads it to its end and closes it:
	// an error of the reader, also one at the end of the file after entries were loaded,
	// fails the restore. After an error the backend holds part of the state and is to be
	// discarded.
	Restore(handles []*pb.KeyedStateHandle, open FileOpener) error
	// Close releases the backend (a bbolt backend removes its working file).
	Close() error
}

// Snapshot is the asynchronous part of a keyed state snapshot.
type Snapshot interface {
	// WriteSnapshot writes the snapshot and returns the offset of every key group of the range.
	WriteSnapshot(w io.Writer) (offsets []int64, err error)
	// Release frees what the snapshot holds; it is called once, after WriteSnapshot or instead of it.
	Release()
}
