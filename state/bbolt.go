package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"go.etcd.io/bbolt"
)

// boltBackend keeps keyed state in a local bbolt file: one bucket per state, keys
// kg (2 bytes big endian) + appendKey(key) [+ user key], so a cursor walks key groups in
// order. The file is only working storage (durability comes from checkpoints): it is opened
// without fsyncs and removed on Close.
//
// Writes go to a write-back cache of dirty entries and deletions, flushed in one write
// transaction when it holds more than CacheEntries entries and at Snapshot; reads look in the
// cache, then in the file through a read transaction that is renewed after every flush.
// Snapshot flushes and opens a read transaction (bbolt MVCC) that WriteSnapshot streams from on
// another goroutine while the task keeps writing.
type boltBackend struct {
	keyContext
	keyBuf []byte // kg + appendKey(current key); valid when kgIdx >= 0

	db       *bbolt.DB
	path     string
	closed   bool
	kinds    map[string]stateKind // every state: registered or restored
	tables   map[string]boltFlusher
	dirty    int // cache entries since the last flush (an upper bound)
	maxDirty int

	iterating int       // MapState.Range calls in progress: flushes wait
	rtx       *bbolt.Tx // reads between flushes; nil after a flush
	gen       uint64    // counts read transactions, to invalidate cached buckets
}

// boltFlusher is a registered state's write-back cache.
type boltFlusher interface {
	flushTo(tx *bbolt.Tx) error
	reset()
}

func newBoltBackend(o KeyedBackendOptions) (*boltBackend, error) {
	f, err := os.CreateTemp(o.Dir, "goflink-state-*.db")
	if err != nil {
		return nil, fmt.Errorf("bbolt state backend: %w", err)
	}
	path := f.Name()
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("bbolt state backend: %w", err)
	}
	mmap := o.MmapSize
	if mmap == 0 {
		mmap = DefaultMmapSize
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		NoSync:          true,
		NoGrowSync:      true,
		NoFreelistSync:  true,
		FreelistType:    bbolt.FreelistMapType,
		InitialMmapSize: mmap,
	})
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("bbolt state backend: open %s: %w", path, err)
	}
	maxDirty := o.CacheEntries
	if maxDirty == 0 {
		maxDirty = DefaultCacheEntries
	}
	return &boltBackend{
		keyContext: newKeyContext(o),
		db:         db,
		path:       path,
		kinds:      make(map[string]stateKind),
		tables:     make(map[string]boltFlusher),
		maxDirty:   maxDirty,
	}, nil
}

// SetCurrentKey sets the key that state accesses refer to.
func (b *boltBackend) SetCurrentKey(k record.Value) {
	b.setKey(k)
	if b.kgIdx >= 0 {
		b.keyBuf = binary.BigEndian.AppendUint16(b.keyBuf[:0], uint16(b.kg))
		b.keyBuf = appendKey(b.keyBuf, k, b.keyType)
	}
}

// curKey returns the database key (prefix) of the current key.
func (b *boltBackend) curKey() ([]byte, error) {
	if b.kgIdx < 0 {
		return nil, b.keyError()
	}
	return b.keyBuf, nil
}

func (b *boltBackend) register(name string, kind stateKind) error {
	if err := checkName(name); err != nil {
		return err
	}
	if b.closed {
		return fmt.Errorf("state %q: %w", name, ErrClosed)
	}
	if _, ok := b.tables[name]; ok {
		return fmt.Errorf("state %q: %w", name, ErrStateExists)
	}
	if k, ok := b.kinds[name]; ok {
		if err := checkKind(name, kind, k); err != nil {
			return err
		}
	}
	b.kinds[name] = kind
	return nil
}

// reader returns the read transaction for cache misses, opening one after a flush.
func (b *boltBackend) reader() (*bbolt.Tx, error) {
	if b.closed {
		return nil, ErrClosed
	}
	if b.rtx == nil {
		tx, err := b.db.Begin(false)
		if err != nil {
			return nil, fmt.Errorf("bbolt state backend: begin read: %w", err)
		}
		b.rtx = tx
		b.gen++
	}
	return b.rtx, nil
}

func (b *boltBackend) closeReader() {
	if b.rtx != nil {
		b.rtx.Rollback() // a read transaction's rollback cannot fail
		b.rtx = nil
	}
}

// maybeFlush flushes the cache when it is full; every write calls it first.
func (b *boltBackend) maybeFlush() error {
	if b.closed {
		return ErrClosed
	}
	if b.dirty >= b.maxDirty && b.iterating == 0 {
		return b.flush()
	}
	return nil
}

// flush writes the cache in one transaction.
func (b *boltBackend) flush() error {
	if b.dirty == 0 {
		return nil
	}
	if b.iterating > 0 {
		return errors.New("bbolt state backend: flush inside MapState.Range")
	}
	// A read transaction open on this goroutine would deadlock a write that re-maps the file.
	b.closeReader()
	err := b.db.Update(func(tx *bbolt.Tx) error {
		for _, t := range b.tables {
			if err := t.flushTo(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bbolt state backend: flush: %w", err)
	}
	for _, t := range b.tables {
		t.reset()
	}
	b.dirty = 0
	return nil
}

// Snapshot flushes the cache and opens the read transaction the snapshot streams from.
func (b *boltBackend) Snapshot() (Snapshot, error) {
	if b.closed {
		return nil, ErrClosed
	}
	if err := b.flush(); err != nil {
		return nil, err
	}
	tx, err := b.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("bbolt state backend: begin snapshot: %w", err)
	}
	s := &boltSnapshot{tx: tx, rng: b.rng}
	for name, kind := range b.kinds {
		s.states = append(s.states, stateMeta{name: name, kind: kind})
	}
	slices.SortFunc(s.states, func(x, y stateMeta) int { return strings.Compare(x.name, y.name) })
	s.header = appendHeader(nil, b.keyType, b.maxP, b.rng, s.states)
	return s, nil
}

// Restore writes the key groups of this backend's range into the file, in transactions of
// at most CacheEntries entries. After an error the backend holds part of the state.
func (b *boltBackend) Restore(handles []*pb.KeyedStateHandle, read func(*pb.FileHandle) ([]byte, error)) error {
	if b.closed {
		return ErrClosed
	}
	if err := b.flush(); err != nil {
		return err
	}
	b.closeReader()
	var (
		tx  *bbolt.Tx
		n   int
		key []byte
	)
	err := restoreHandles(handles, read, b.rng, b.keyType, b.maxP, func(st stateMeta, kg int, entries []byte) error {
		if k, ok := b.kinds[st.name]; ok {
			if err := checkKind(st.name, k, st.kind); err != nil {
				return err
			}
		}
		b.kinds[st.name] = st.kind
		if tx == nil {
			var err error
			if tx, err = b.db.Begin(true); err != nil {
				return err
			}
		}
		bkt, err := tx.CreateBucketIfNotExists([]byte(st.name))
		if err != nil {
			return err
		}
		err = forEachEntry(entries, func(kp, val []byte) error {
			key = binary.BigEndian.AppendUint16(key[:0], uint16(kg))
			key = append(key, kp...)
			n++
			return bkt.Put(key, bytes.Clone(val))
		})
		if err != nil {
			return err
		}
		if n >= b.maxDirty {
			n = 0
			err, tx = tx.Commit(), nil
		}
		return err
	})
	if tx != nil {
		if err == nil {
			err = tx.Commit()
		} else {
			tx.Rollback()
		}
	}
	if err != nil {
		return fmt.Errorf("bbolt state backend: %w", err)
	}
	return nil
}

// Close closes and removes the working file. It waits for snapshots that are not released.
func (b *boltBackend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.closeReader()
	err := b.db.Close()
	if rerr := os.Remove(b.path); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("bbolt state backend: close: %w", err)
	}
	return nil
}

// boltSnapshot streams a read transaction.
type boltSnapshot struct {
	tx     *bbolt.Tx
	rng    KeyGroupRange
	header []byte
	states []stateMeta
}

// WriteSnapshot writes the snapshot from the read transaction; it may run on another goroutine
// while the backend keeps processing.
func (s *boltSnapshot) WriteSnapshot(w io.Writer) ([]int64, error) {
	sw := newSnapWriter(w)
	sw.write(s.header)
	cursors := make([]*bbolt.Cursor, len(s.states))
	for i, st := range s.states {
		if bkt := s.tx.Bucket([]byte(st.name)); bkt != nil {
			cursors[i] = bkt.Cursor()
		}
	}
	offsets := make([]int64, s.rng.Len())
	var prefix [2]byte
	for i := range offsets {
		kg := s.rng.Start + i
		offsets[i] = sw.n
		sw.uvarint(uint64(kg))
		binary.BigEndian.PutUint16(prefix[:], uint16(kg))
		for idx, c := range cursors {
			if c == nil {
				continue
			}
			k, v := c.Seek(prefix[:])
			if !bytes.HasPrefix(k, prefix[:]) {
				continue
			}
			sw.uvarint(uint64(idx + 1))
			for ; bytes.HasPrefix(k, prefix[:]); k, v = c.Next() {
				sw.uvarint(uint64(len(k) - 2))
				sw.write(k[2:])
				sw.uvarint(uint64(len(v)))
				sw.write(v)
			}
			sw.uvarint(0)
		}
		sw.uvarint(0)
		if sw.err != nil {
			break
		}
	}
	if err := sw.finish(); err != nil {
		return nil, fmt.Errorf("write keyed state snapshot: %w", err)
	}
	return offsets, nil
}

// Release ends the read transaction. Safe on any goroutine, once.
func (s *boltSnapshot) Release() {
	s.tx.Rollback() // a read transaction's rollback cannot fail
}

// bucketRef caches a state's bucket in the backend's current read transaction.
type bucketRef struct {
	name []byte
	bkt  *bbolt.Bucket
	gen  uint64
}

// get returns the value of key in the file (valid until the next flush), and whether it
// exists.
func (r *bucketRef) get(b *boltBackend, key []byte) ([]byte, bool, error) {
	bkt, err := r.bucket(b)
	if err != nil || bkt == nil {
		return nil, false, err
	}
	k, v := bkt.Cursor().Seek(key)
	if !bytes.Equal(k, key) {
		return nil, false, nil
	}
	return v, true, nil
}

// bucket returns the state's bucket in the read transaction, or nil when it has none yet.
func (r *bucketRef) bucket(b *boltBackend) (*bbolt.Bucket, error) {
	if b.rtx == nil || r.gen != b.gen {
		tx, err := b.reader()
		if err != nil {
			return nil, err
		}
		r.bkt = tx.Bucket(r.name)
		r.gen = b.gen
	}
	return r.bkt, nil
}

// dirtyVal is a cached value or deletion.
type dirtyVal struct {
	val     []byte
	deleted bool
}

// boltTable is the cache of a value, reducing or list state: database key -> value.
type boltTable struct {
	b     *boltBackend
	ref   bucketRef
	dirty map[string]*dirtyVal
}

func newBoltTable(b *boltBackend, name string, kind stateKind) (*boltTable, error) {
	if err := b.register(name, kind); err != nil {
		return nil, err
	}
	t := &boltTable{b: b, ref: bucketRef{name: []byte(name)}, dirty: make(map[string]*dirtyVal)}
	b.tables[name] = t
	return t, nil
}

// get returns the current value of key (cache, then file); valid until the next write.
func (t *boltTable) get(key []byte) ([]byte, bool, error) {
	if e, ok := t.dirty[string(key)]; ok {
		return e.val, !e.deleted, nil
	}
	return t.ref.get(t.b, key)
}

// entry returns key's cache entry, creating it. Call maybeFlush before.
func (t *boltTable) entry(key []byte) (e *dirtyVal, existed bool) {
	if e, ok := t.dirty[string(key)]; ok {
		return e, true
	}
	e = &dirtyVal{}
	t.dirty[string(key)] = e
	t.b.dirty++
	return e, false
}

func (t *boltTable) del() error {
	key, err := t.b.curKey()
	if err != nil {
		return err
	}
	if err := t.b.maybeFlush(); err != nil {
		return err
	}
	e, _ := t.entry(key)
	e.val = e.val[:0]
	e.deleted = true
	return nil
}

func (t *boltTable) flushTo(tx *bbolt.Tx) error {
	if len(t.dirty) == 0 {
		return nil
	}
	bkt, err := tx.CreateBucketIfNotExists(t.ref.name)
	if err != nil {
		return fmt.Errorf("state %q: %w", t.ref.name, err)
	}
	// In key order: bbolt splits nodes only at commit, so unordered inserts into one node
	// would shift its entries again and again.
	keys := make([]string, 0, len(t.dirty))
	for k := range t.dirty {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if e := t.dirty[k]; e.deleted {
			err = bkt.Delete([]byte(k))
		} else {
			err = bkt.Put([]byte(k), e.val)
		}
		if err != nil {
			return fmt.Errorf("state %q: %w", t.ref.name, err)
		}
	}
	return nil
}

func (t *boltTable) reset() { clear(t.dirty) }

// boltValue is value or reducing state in a bbolt backend.
type boltValue[T any] struct {
	t *boltTable
	c Codec[T]
}

func newBoltValue[T any](b *boltBackend, name string, kind stateKind, c Codec[T]) (*boltValue[T], error) {
	t, err := newBoltTable(b, name, kind)
	if err != nil {
		return nil, err
	}
	return &boltValue[T]{t: t, c: c}, nil
}

func (s *boltValue[T]) get() (T, bool, error) {
	var zero T
	key, err := s.t.b.curKey()
	if err != nil {
		return zero, false, err
	}
	raw, ok, err := s.t.get(key)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.c.Decode(raw)
	if err != nil {
		return zero, false, fmt.Errorf("state %q: %w", s.t.ref.name, err)
	}
	return v, true, nil
}

func (s *boltValue[T]) set(v T) error {
	key, err := s.t.b.curKey()
	if err != nil {
		return err
	}
	if err := s.t.b.maybeFlush(); err != nil {
		return err
	}
	e, _ := s.t.entry(key)
	e.val = s.c.Append(e.val[:0], v)
	e.deleted = false
	return nil
}

func (s *boltValue[T]) clear() error { return s.t.del() }

// boltList is list state in a bbolt backend; a value is the length-prefixed elements.
type boltList[T any] struct {
	t    *boltTable
	c    Codec[T]
	elem []byte
}

func newBoltList[T any](b *boltBackend, name string, c Codec[T]) (*boltList[T], error) {
	t, err := newBoltTable(b, name, kindList)
	if err != nil {
		return nil, err
	}
	return &boltList[T]{t: t, c: c}, nil
}

func (s *boltList[T]) get() ([]T, error) {
	key, err := s.t.b.curKey()
	if err != nil {
		return nil, err
	}
	raw, ok, err := s.t.get(key)
	if err != nil || !ok {
		return nil, err
	}
	vs, err := decodeList(raw, s.c)
	if err != nil {
		return nil, fmt.Errorf("state %q: %w", s.t.ref.name, err)
	}
	return vs, nil
}

func (s *boltList[T]) add(v T) error {
	key, err := s.t.b.curKey()
	if err != nil {
		return err
	}
	if err := s.t.b.maybeFlush(); err != nil {
		return err
	}
	e, existed := s.t.entry(key)
	if !existed {
		raw, _, err := s.t.ref.get(s.t.b, key)
		if err != nil {
			return err
		}
		e.val = append(e.val[:0], raw...)
	} else if e.deleted {
		e.val = e.val[:0]
	}
	e.deleted = false
	s.elem = s.c.Append(s.elem[:0], v)
	e.val = appendElem(e.val, s.elem)
	return nil
}

func (s *boltList[T]) update(vs []T) error {
	if len(vs) == 0 {
		return s.t.del()
	}
	key, err := s.t.b.curKey()
	if err != nil {
		return err
	}
	if err := s.t.b.maybeFlush(); err != nil {
		return err
	}
	e, _ := s.t.entry(key)
	e.val = e.val[:0]
	e.deleted = false
	for _, v := range vs {
		s.elem = s.c.Append(s.elem[:0], v)
		e.val = appendElem(e.val, s.elem)
	}
	return nil
}

func (s *boltList[T]) clear() error { return s.t.del() }

// mapOverlay is the cached changes to one key's map: cleared drops everything in the file.
type mapOverlay struct {
	cleared bool
	puts    map[string]*dirtyVal // user key -> value or deletion
}

// boltMapTable is the cache of a map state: database key prefix -> overlay.
type boltMapTable struct {
	b     *boltBackend
	ref   bucketRef
	dirty map[string]*mapOverlay
}

func (t *boltMapTable) flushTo(tx *bbolt.Tx) error {
	if len(t.dirty) == 0 {
		return nil
	}
	bkt, err := tx.CreateBucketIfNotExists(t.ref.name)
	if err != nil {
		return fmt.Errorf("state %q: %w", t.ref.name, err)
	}
	var full []byte
	for prefix, ov := range t.dirty {
		if ov.cleared {
			var old [][]byte
			c := bkt.Cursor()
			for k, _ := c.Seek([]byte(prefix)); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, _ = c.Next() {
				old = append(old, bytes.Clone(k))
			}
			for _, k := range old {
				if err := bkt.Delete(k); err != nil {
					return fmt.Errorf("state %q: %w", t.ref.name, err)
				}
			}
		}
		for uk, e := range ov.puts {
			full = append(append(full[:0], prefix...), uk...)
			if e.deleted {
				err = bkt.Delete(full)
			} else {
				err = bkt.Put(full, e.val)
			}
			if err != nil {
				return fmt.Errorf("state %q: %w", t.ref.name, err)
			}
		}
	}
	return nil
}

func (t *boltMapTable) reset() { clear(t.dirty) }

// boltMap is map state in a bbolt backend.
type boltMap[K comparable, V any] struct {
	t   *boltMapTable
	kc  Codec[K]
	vc  Codec[V]
	buf []byte
}

func newBoltMap[K comparable, V any](b *boltBackend, name string, kc Codec[K], vc Codec[V]) (*boltMap[K, V], error) {
	if err := b.register(name, kindMap); err != nil {
		return nil, err
	}
	t := &boltMapTable{b: b, ref: bucketRef{name: []byte(name)}, dirty: make(map[string]*mapOverlay)}
	b.tables[name] = t
	return &boltMap[K, V]{t: t, kc: kc, vc: vc}, nil
}

// fullKey returns the current key's prefix, and prefix + the encoding of k in s.buf.
func (s *boltMap[K, V]) fullKey(k K) (prefix, full []byte, err error) {
	prefix, err = s.t.b.curKey()
	if err != nil {
		return nil, nil, err
	}
	s.buf = s.kc.Append(append(s.buf[:0], prefix...), k)
	return prefix, s.buf, nil
}

func (s *boltMap[K, V]) get(k K) (V, bool, error) {
	var zero V
	prefix, full, err := s.fullKey(k)
	if err != nil {
		return zero, false, err
	}
	uk := full[len(prefix):]
	var raw []byte
	ok := false
	if ov := s.t.dirty[string(prefix)]; ov != nil {
		if e, found := ov.puts[string(uk)]; found {
			raw, ok = e.val, !e.deleted
		} else if !ov.cleared {
			raw, ok, err = s.t.ref.get(s.t.b, full)
		}
	} else {
		raw, ok, err = s.t.ref.get(s.t.b, full)
	}
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.vc.Decode(raw)
	if err != nil {
		return zero, false, fmt.Errorf("state %q: %w", s.t.ref.name, err)
	}
	return v, true, nil
}

// overlay returns the current key's overlay, creating it. Call maybeFlush before.
func (s *boltMap[K, V]) overlay(prefix []byte) *mapOverlay {
	ov := s.t.dirty[string(prefix)]
	if ov == nil {
		ov = &mapOverlay{puts: make(map[string]*dirtyVal)}
		s.t.dirty[string(prefix)] = ov
		s.t.b.dirty++
	}
	return ov
}

// entry returns the cache entry of user key k, creating it.
func (s *boltMap[K, V]) entry(k K) (*dirtyVal, error) {
	if err := s.t.b.maybeFlush(); err != nil {
		return nil, err
	}
	prefix, full, err := s.fullKey(k)
	if err != nil {
		return nil, err
	}
	ov := s.overlay(prefix)
	uk := full[len(prefix):]
	e := ov.puts[string(uk)]
	if e == nil {
		e = &dirtyVal{}
		ov.puts[string(uk)] = e
		s.t.b.dirty++
	}
	return e, nil
}

func (s *boltMap[K, V]) put(k K, v V) error {
	e, err := s.entry(k)
	if err != nil {
		return err
	}
	e.val = s.vc.Append(e.val[:0], v)
	e.deleted = false
	return nil
}

func (s *boltMap[K, V]) remove(k K) error {
	e, err := s.entry(k)
	if err != nil {
		return err
	}
	e.val = e.val[:0]
	e.deleted = true
	return nil
}

func (s *boltMap[K, V]) clear() error {
	if err := s.t.b.maybeFlush(); err != nil {
		return err
	}
	prefix, err := s.t.b.curKey()
	if err != nil {
		return err
	}
	ov := s.overlay(prefix)
	ov.cleared = true
	clear(ov.puts)
	return nil
}

func (s *boltMap[K, V]) forEach(fn func(K, V) bool) error {
	key, err := s.t.b.curKey()
	if err != nil {
		return err
	}
	prefix := bytes.Clone(key) // fn may change the current key
	b := s.t.b
	b.iterating++ // keeps the read transaction (and the cursor) valid while fn runs
	defer func() { b.iterating-- }()
	ov := s.t.dirty[string(prefix)]
	if ov == nil || !ov.cleared {
		bkt, err := s.t.ref.bucket(b)
		if err != nil {
			return err
		}
		if bkt != nil {
			c := bkt.Cursor()
			for k, v := c.Seek(prefix); bytes.HasPrefix(k, prefix); k, v = c.Next() {
				uk := k[len(prefix):]
				if ov != nil {
					if _, ok := ov.puts[string(uk)]; ok {
						continue // the overlay has the current value
					}
				}
				more, err := s.call(fn, uk, v)
				if err != nil || !more {
					return err
				}
			}
		}
	}
	if ov == nil {
		return nil
	}
	for uk, e := range ov.puts {
		if e.deleted {
			continue
		}
		more, err := s.call(fn, []byte(uk), e.val)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (s *boltMap[K, V]) call(fn func(K, V) bool, uk, val []byte) (bool, error) {
	k, err := s.kc.Decode(uk)
	if err != nil {
		return false, fmt.Errorf("state %q: user key: %w", s.t.ref.name, err)
	}
	v, err := s.vc.Decode(val)
	if err != nil {
		return false, fmt.Errorf("state %q: %w", s.t.ref.name, err)
	}
	return fn(k, v), nil
}
