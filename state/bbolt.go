package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/bbolt"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// boltBackend keeps keyed state in a local bbolt file: one bucket per state, keys
// kg (2 bytes big endian) + appendKey(key) [+ user key], so a cursor walks key groups in
// order. The file is only working storage (durability comes from checkpoints): it is opened
// without fsyncs and removed on Close.
//
// Writes go to a write-back cache of dirty entries and deletions, flushed in one write
// transaction when it holds more than CacheEntries entries; reads look in the cache, then in
// the file through a read transaction that is renewed after every flush.
//
// Snapshot does not flush (a flush costs B-tree inserts on the task goroutine, on every
// checkpoint's critical path). It freezes each state's cache as a read-only layer, starts a new
// empty one and opens a read transaction (bbolt MVCC) on the file as of the last flush: O(states).
// Until the next flush, reads look in the current cache, then in the frozen layers newest first,
// then in the file; the next flush writes all layers, the newest value of each key winning.
// WriteSnapshot, on another goroutine while the task keeps writing and flushing, merges the
// snapshot's file entries with its layers, which the task never modifies. Frozen entries count
// against CacheEntries until they are flushed, and at most maxFrozenLayers snapshots freeze
// layers between two flushes.
type boltBackend struct {
	keyContext
	keyBuf []byte // kg + appendKey(current key); valid when kgIdx >= 0

	db       *bbolt.DB
	path     string
	closed   bool
	kinds    map[string]stateKind // every state: registered or restored
	tables   map[string]boltFlusher
	dirty    int // cache entries since the last flush, frozen ones included (an upper bound)
	maxDirty int
	layers   int // snapshots that froze a cache layer since the last flush
	flushAt  int // dirty count that makes the next write flush: maxDirty, or 0 after maxFrozenLayers layers

	iterating int       // MapState.Range calls in progress: flushes wait
	rtx       *bbolt.Tx // reads between flushes; nil after a flush
	gen       uint64    // counts read transactions, to invalidate cached buckets
}

// maxFrozenLayers bounds the snapshots that freeze cache layers between two flushes: reads that
// miss the current cache look in every frozen layer before the file.
const maxFrozenLayers = 8

// boltFlusher is a registered state's write-back cache.
type boltFlusher interface {
	// freeze makes the current cache layer read-only when it is not empty (froze), starting an
	// empty one, and returns the layers not flushed yet, or nil when there is none.
	freeze() (pending dirtyLayers, froze bool)
	// flushTo writes every layer.
	flushTo(tx *bbolt.Tx) error
	// reset drops the layers after a flush.
	reset()
}

// dirtyLayers is a state's cache layers that no write changes any more.
type dirtyLayers interface {
	// view merges the layers. It only reads them: it may run on any goroutine. The view is
	// shared: it must not be modified.
	view() dirtyView
}

// cacheLayers is a state's write-back cache: the current layer, which writes change, over the
// layers that snapshots froze since the last flush. E is a cache entry (value or map overlay).
type cacheLayers[E any] struct {
	dirty  map[string]E      // the current layer
	frozen []*frozenLayer[E] // oldest first
	build  func(map[string]E) dirtyView
}

func newCacheLayers[E any](build func(map[string]E) dirtyView) cacheLayers[E] {
	return cacheLayers[E]{dirty: make(map[string]E), build: build}
}

// frozenLayer is a cache layer that a snapshot froze: nothing modifies it any more, so any
// goroutine may read it. The layers below it stay the same until a flush drops them all, so
// its view, merged over theirs, is computed once (by a snapshot's WriteSnapshot or the flush)
// and shared. Each view holds at most the cache entries since the last flush (about
// CacheEntries).
type frozenLayer[E any] struct {
	m     map[string]E
	below *frozenLayer[E] // nil for the oldest
	build func(map[string]E) dirtyView
	once  sync.Once
	v     dirtyView
}

func (l *frozenLayer[E]) view() dirtyView {
	l.once.Do(func() {
		l.v = l.build(l.m)
		if l.below != nil {
			l.v = mergeViews(l.below.view(), l.v)
		}
	})
	return l.v
}

// freeze makes the current layer read-only when it is not empty (froze), starting an empty
// one, and returns the newest frozen layer (with the ones below it), or nil when there is none.
func (c *cacheLayers[E]) freeze() (pending dirtyLayers, froze bool) {
	if froze = len(c.dirty) > 0; froze {
		var below *frozenLayer[E]
		if len(c.frozen) > 0 {
			below = c.frozen[len(c.frozen)-1]
		}
		c.frozen = append(c.frozen, &frozenLayer[E]{m: c.dirty, below: below, build: c.build})
		c.dirty = make(map[string]E)
	}
	if len(c.frozen) == 0 {
		return nil, froze
	}
	return c.frozen[len(c.frozen)-1], froze
}

// pending merges every layer, for a flush.
func (c *cacheLayers[E]) pending() dirtyView {
	v := c.build(c.dirty)
	if len(c.frozen) > 0 {
		v = mergeViews(c.frozen[len(c.frozen)-1].view(), v)
	}
	return v
}

// reset empties the current layer (no snapshot holds it) and drops the frozen ones (snapshots
// may still be reading them).
func (c *cacheLayers[E]) reset() {
	clear(c.dirty)
	c.frozen = nil
}

// mergeViews merges newer over older: newer's entries replace older's, and its cleared maps
// hide older's entries under them. It returns one of them when the other is empty.
func mergeViews(older, newer dirtyView) dirtyView {
	switch {
	case len(older.entries) == 0 && len(older.cleared) == 0:
		return newer
	case len(newer.entries) == 0 && len(newer.cleared) == 0:
		return older
	}
	v := dirtyView{entries: make([]viewEntry, 0, max(len(older.entries), len(newer.entries)))}
	hide := clearedCursor{prefixes: newer.cleared}
	i, j := 0, 0
	for i < len(older.entries) || j < len(newer.entries) {
		if j == len(newer.entries) || i < len(older.entries) && older.entries[i].key < newer.entries[j].key {
			if e := older.entries[i]; !hide.covers(e.key) {
				v.entries = append(v.entries, e)
			}
			i++
			continue
		}
		if i < len(older.entries) && older.entries[i].key == newer.entries[j].key {
			i++
		}
		v.entries = append(v.entries, newer.entries[j])
		j++
	}
	if len(older.cleared)+len(newer.cleared) > 0 {
		v.cleared = slices.Compact(slices.Sorted(slices.Values(slices.Concat(older.cleared, newer.cleared))))
	}
	return v
}

// clearedCursor tells whether keys, asked in ascending order, are under one of the sorted
// prefixes of cleared maps. The prefixes are prefix-free, and the keys under one are
// contiguous in key order.
type clearedCursor struct {
	prefixes []string
	i        int
}

func (c *clearedCursor) covers(k string) bool {
	for c.i < len(c.prefixes) && c.prefixes[c.i] < k && !strings.HasPrefix(k, c.prefixes[c.i]) {
		c.i++
	}
	return c.i < len(c.prefixes) && strings.HasPrefix(k, c.prefixes[c.i])
}

// coversBytes is covers without converting k.
func (c *clearedCursor) coversBytes(k []byte) bool {
	for c.i < len(c.prefixes) && c.prefixes[c.i] < string(k) && !hasPrefix(k, c.prefixes[c.i]) {
		c.i++
	}
	return c.i < len(c.prefixes) && hasPrefix(k, c.prefixes[c.i])
}

// dirtyView is a state's unflushed changes merged over its cache layers: each database key's
// newest value or deletion, in key order, and for map state the sorted prefixes (database key
// of a state key) whose map was cleared, which hides every older entry under them.
type dirtyView struct {
	entries []viewEntry
	cleared []string
}

type viewEntry struct {
	key string
	*dirtyVal
}

func (v *dirtyView) sort() {
	slices.SortFunc(v.entries, func(x, y viewEntry) int { return strings.Compare(x.key, y.key) })
	slices.Sort(v.cleared)
}

// writeView applies v to the state's bucket: the cleared maps, then the entries.
func writeView(tx *bbolt.Tx, name []byte, v dirtyView) error {
	if len(v.entries) == 0 && len(v.cleared) == 0 {
		return nil
	}
	bkt, err := tx.CreateBucketIfNotExists(name)
	if err != nil {
		return fmt.Errorf("state %q: %w", name, err)
	}
	var old [][]byte
	for _, p := range v.cleared {
		old = old[:0]
		c := bkt.Cursor()
		for k, _ := c.Seek([]byte(p)); k != nil && hasPrefix(k, p); k, _ = c.Next() {
			old = append(old, bytes.Clone(k))
		}
		for _, k := range old {
			if err := bkt.Delete(k); err != nil {
				return fmt.Errorf("state %q: %w", name, err)
			}
		}
	}
	// In key order: bbolt splits nodes only at commit, so unordered inserts into one node
	// would shift its entries again and again.
	for _, e := range v.entries {
		if e.deleted {
			err = bkt.Delete([]byte(e.key))
		} else {
			err = bkt.Put([]byte(e.key), e.val)
		}
		if err != nil {
			return fmt.Errorf("state %q: %w", name, err)
		}
	}
	return nil
}

// hasPrefix reports whether k starts with p, without allocating.
func hasPrefix(k []byte, p string) bool {
	return len(k) >= len(p) && string(k[:len(p)]) == p
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
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		NoSync:          true,
		NoGrowSync:      true,
		NoFreelistSync:  true,
		FreelistType:    bbolt.FreelistMapType,
		InitialMmapSize: cmp.Or(o.MmapSize, DefaultMmapSize),
	})
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("bbolt state backend: open %s: %w", path, err)
	}
	maxDirty := cmp.Or(o.CacheEntries, DefaultCacheEntries)
	return &boltBackend{
		keyContext: newKeyContext(o),
		db:         db,
		path:       path,
		kinds:      make(map[string]stateKind),
		tables:     make(map[string]boltFlusher),
		maxDirty:   maxDirty,
		flushAt:    maxDirty,
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

// register adds t as state name of kind.
func (b *boltBackend) register(name string, kind stateKind, t boltFlusher) error {
	if err := checkRegister(name, b.closed, b.tables[name] != nil); err != nil {
		return err
	}
	if k, ok := b.kinds[name]; ok {
		if err := checkKind(name, kind, k); err != nil {
			return err
		}
	}
	b.kinds[name] = kind
	b.tables[name] = t
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
		_ = b.rtx.Rollback() // a read transaction's rollback cannot fail
		b.rtx = nil
	}
}

// maybeFlush flushes the cache when it is full; every write calls it first.
func (b *boltBackend) maybeFlush() error {
	if b.closed {
		return ErrClosed
	}
	if b.dirty >= b.flushAt && b.iterating == 0 {
		return b.flush()
	}
	return nil
}

// flush writes the cache, every layer, in one transaction.
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
	b.dirty, b.layers, b.flushAt = 0, 0, b.maxDirty
	return nil
}

// Snapshot opens a read transaction on the file as of the last flush and freezes the cache
// layers on top of it, without flushing: O(states).
func (b *boltBackend) Snapshot() (Snapshot, error) {
	if b.closed {
		return nil, ErrClosed
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
	s.pending = make([]dirtyLayers, len(s.states))
	froze := false
	for i, st := range s.states {
		if t, ok := b.tables[st.name]; ok {
			var f bool
			s.pending[i], f = t.freeze()
			froze = froze || f
		}
	}
	if froze {
		if b.layers++; b.layers >= maxFrozenLayers {
			b.flushAt = 0 // flush at the next write
		}
	}
	s.header = appendHeader(nil, b.keyType, b.maxP, b.rng, s.states)
	return s, nil
}

// Restore writes the key groups of this backend's range into the file, one entry at a time,
// in transactions of at most CacheEntries entries and about maxRestoreTxBytes of values. A
// transaction refers to the values it was given until it commits, so Restore copies them into
// an arena that it reuses after each commit: restoring needs the memory of one transaction's
// values (and bbolt's of its dirty pages). After an error the backend holds part of the state.
func (b *boltBackend) Restore(handles []*pb.KeyedStateHandle, open FileOpener) error {
	if b.closed {
		return ErrClosed
	}
	if err := b.flush(); err != nil {
		return err
	}
	b.closeReader()
	var (
		tx    *bbolt.Tx
		n     int
		key   []byte
		vals  arena
		begin = func(name string) (*bbolt.Bucket, error) {
			if tx == nil {
				var err error
				if tx, err = b.db.Begin(true); err != nil {
					return nil, err
				}
			}
			bkt, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return nil, err
			}
			bkt.FillPercent = 1 // a restore writes each key group in one pass: full pages, not half-split ones
			return bkt, nil
		}
	)
	err := restoreHandles(handles, open, b.rng, b.keyType, b.maxP, func(st stateMeta, kg int, _ int64) (func(*entry) error, error) {
		if k, ok := b.kinds[st.name]; ok {
			if err := checkKind(st.name, k, st.kind); err != nil {
				return nil, err
			}
		}
		b.kinds[st.name] = st.kind
		bkt, err := begin(st.name)
		if err != nil {
			return nil, err
		}
		return func(e *entry) error {
			if e == nil {
				return nil
			}
			if bkt == nil {
				var err error
				if bkt, err = begin(st.name); err != nil {
					return err
				}
			}
			key = binary.BigEndian.AppendUint16(key[:0], uint16(kg))
			key = append(key, e.keyPart...)
			if err := bkt.Put(key, vals.copy(e.value)); err != nil { // Put copies the key, not the value
				return err
			}
			if n++; n >= b.maxDirty || vals.held >= maxRestoreTxBytes {
				n, bkt = 0, nil
				err, tx = tx.Commit(), nil
				vals.reset()
				return err
			}
			return nil
		}, nil
	})
	if tx != nil {
		if err == nil {
			err = tx.Commit()
		} else {
			err = errors.Join(err, tx.Rollback())
		}
	}
	if err != nil {
		return fmt.Errorf("bbolt state backend: %w", err)
	}
	return nil
}

// maxRestoreTxBytes bounds the values of one of Restore's transactions (but not a single
// value).
const maxRestoreTxBytes = 16 << 20

// arena holds copies of byte slices in chunks, until reset makes its chunks reusable.
type arena struct {
	chunks [][]byte // chunks[:used] hold copies; the last of them has room left
	used   int
	held   int // bytes of the copies handed out since reset
}

const arenaChunk = 1 << 20

// copy returns a copy of b that stays valid until reset.
func (a *arena) copy(b []byte) []byte {
	a.held += len(b)
	if a.used == 0 || cap(a.chunks[a.used-1])-len(a.chunks[a.used-1]) < len(b) {
		if len(b) > arenaChunk/4 {
			return bytes.Clone(b) // too large to share a chunk
		}
		if a.used == len(a.chunks) {
			a.chunks = append(a.chunks, make([]byte, 0, arenaChunk))
		}
		a.used++
	}
	c := &a.chunks[a.used-1]
	start := len(*c)
	*c = append(*c, b...)
	return (*c)[start:len(*c):len(*c)]
}

// reset makes every chunk reusable: the copies handed out are no longer referred to.
func (a *arena) reset() {
	for i := range a.chunks[:a.used] {
		a.chunks[i] = a.chunks[i][:0]
	}
	a.used, a.held = 0, 0
}

// Close closes and removes the working file. It waits for snapshots that are not released.
func (b *boltBackend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.closeReader()
	if err := errors.Join(b.db.Close(), os.Remove(b.path)); err != nil {
		return fmt.Errorf("bbolt state backend: close: %w", err)
	}
	return nil
}

// boltSnapshot is a read transaction on the file as of the last flush before Snapshot, and
// the cache layers on top of it at Snapshot.
type boltSnapshot struct {
	tx      *bbolt.Tx
	rng     KeyGroupRange
	header  []byte
	states  []stateMeta
	pending []dirtyLayers // per state, its unflushed layers or nil
}

// WriteSnapshot writes the snapshot, merging the read transaction's entries with the cache
// layers'; it may run on another goroutine while the backend keeps processing.
func (s *boltSnapshot) WriteSnapshot(w io.Writer) ([]int64, error) {
	sw := newSnapWriter(w)
	sw.write(s.header)
	states := make([]snapState, len(s.states))
	for i, st := range s.states {
		if bkt := s.tx.Bucket([]byte(st.name)); bkt != nil {
			states[i].c = bkt.Cursor()
		}
		if s.pending[i] != nil {
			v := s.pending[i].view()
			states[i].entries, states[i].hide.prefixes = v.entries, v.cleared
		}
	}
	offsets := make([]int64, s.rng.Len())
	var prefix [2]byte
	for i := range offsets {
		kg := s.rng.Start + i
		offsets[i] = sw.n
		sw.uvarint(uint64(kg))
		binary.BigEndian.PutUint16(prefix[:], uint16(kg))
		p := string(prefix[:])
		for idx := range states {
			states[idx].writeGroup(sw, idx, p)
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

// Release ends the read transaction and drops the layers. Safe on any goroutine, once.
func (s *boltSnapshot) Release() {
	_ = s.tx.Rollback() // a read transaction's rollback cannot fail
	s.pending = nil
}

// snapState merges one state's file entries with its cache layers, key group after key group.
type snapState struct {
	c       *bbolt.Cursor // nil when the file has no bucket for the state
	entries []viewEntry   // the layers' entries
	next    int           // first entry not written yet
	hide    clearedCursor // the layers' cleared maps
}

// writeGroup writes the state's block of the key group whose 2-byte prefix is p, if the
// group has entries.
func (st *snapState) writeGroup(sw *snapWriter, idx int, p string) {
	var k, v []byte
	if st.c != nil {
		if k, v = st.c.Seek([]byte(p)); !hasPrefix(k, p) {
			k = nil
		}
	}
	for st.next < len(st.entries) && st.entries[st.next].key < p {
		st.next++ // not reached: every key is in the range
	}
	started := false
	start := func() {
		if !started {
			started = true
			sw.uvarint(uint64(idx + 1))
		}
	}
	for {
		var e *viewEntry
		if st.next < len(st.entries) && strings.HasPrefix(st.entries[st.next].key, p) {
			e = &st.entries[st.next]
		}
		if k == nil && e == nil {
			break
		}
		if k != nil && (e == nil || string(k) < e.key) {
			if !st.hide.coversBytes(k) {
				start()
				sw.uvarint(uint64(len(k) - 2))
				sw.write(k[2:])
				sw.uvarint(uint64(len(v)))
				sw.write(v)
			}
		} else {
			// The layers' entry replaces or deletes the file's.
			if !e.deleted {
				start()
				sw.uvarint(uint64(len(e.key) - 2))
				sw.writeString(e.key[2:])
				sw.uvarint(uint64(len(e.val)))
				sw.write(e.val)
			}
			st.next++
			if k == nil || string(k) != e.key {
				continue
			}
		}
		if k, v = st.c.Next(); !hasPrefix(k, p) {
			k = nil
		}
	}
	if started {
		sw.uvarint(0)
	}
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

// boltCache is a registered state's bucket and write-back cache of entries E.
type boltCache[E any] struct {
	b   *boltBackend
	ref bucketRef
	cacheLayers[E]
}

func newBoltCache[E any](b *boltBackend, name string, build func(map[string]E) dirtyView) boltCache[E] {
	return boltCache[E]{b: b, ref: bucketRef{name: []byte(name)}, cacheLayers: newCacheLayers(build)}
}

func (c *boltCache[E]) flushTo(tx *bbolt.Tx) error {
	return writeView(tx, c.ref.name, c.pending())
}

// boltTable is the cache of a value, reducing or list state: database key -> value.
type boltTable struct{ boltCache[*dirtyVal] }

// tableView is the view of one layer of a boltTable.
func tableView(m map[string]*dirtyVal) dirtyView {
	v := dirtyView{entries: make([]viewEntry, 0, len(m))}
	for k, e := range m {
		v.entries = append(v.entries, viewEntry{k, e})
	}
	v.sort()
	return v
}

func newBoltTable(b *boltBackend, name string, kind stateKind) (*boltTable, error) {
	t := &boltTable{newBoltCache(b, name, tableView)}
	if err := b.register(name, kind, t); err != nil {
		return nil, err
	}
	return t, nil
}

// get returns the current key's value (cache, then file); valid until the next write.
func (t *boltTable) get() ([]byte, bool, error) {
	key, err := t.b.curKey()
	if err != nil {
		return nil, false, err
	}
	if e, ok := t.dirty[string(key)]; ok {
		return e.val, !e.deleted, nil
	}
	return t.below(key)
}

// below returns the value of key under the current layer: in the frozen layers (never
// modified), else in the file (valid until the next flush).
func (t *boltTable) below(key []byte) ([]byte, bool, error) {
	for i := len(t.frozen) - 1; i >= 0; i-- {
		if e, ok := t.frozen[i].m[string(key)]; ok {
			return e.val, !e.deleted, nil
		}
	}
	return t.ref.get(t.b, key)
}

// write returns the cache entry of the current key for a write, creating it, and whether it
// existed. It flushes the cache first when it is full.
func (t *boltTable) write() (key []byte, e *dirtyVal, existed bool, err error) {
	if key, err = t.b.curKey(); err != nil {
		return nil, nil, false, err
	}
	if err := t.b.maybeFlush(); err != nil {
		return nil, nil, false, err
	}
	if e, existed = t.dirty[string(key)]; !existed {
		e = &dirtyVal{}
		t.dirty[string(key)] = e
		t.b.dirty++
	}
	return key, e, existed, nil
}

func (t *boltTable) del() error {
	_, e, _, err := t.write()
	if err != nil {
		return err
	}
	e.val = e.val[:0]
	e.deleted = true
	return nil
}

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
	raw, ok, err := s.t.get()
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
	_, e, _, err := s.t.write()
	if err != nil {
		return err
	}
	e.val = s.c.Append(e.val[:0], v)
	e.deleted = false
	return nil
}

func (s *boltValue[T]) clear() error { return s.t.del() }

func (s *boltValue[T]) keys() ([]record.Value, error) { return bucketKeys(s.t.b, s.t.ref) }

// bucketKeys flushes the caches and scans a state's bucket for its keys: a database key is
// the key group (2 bytes), the encoded key and, for a map state, the user key; a key's
// entries are adjacent.
func bucketKeys(b *boltBackend, ref bucketRef) ([]record.Value, error) {
	if err := b.flush(); err != nil {
		return nil, err
	}
	bkt, err := ref.bucket(b)
	if err != nil || bkt == nil {
		return nil, err
	}
	var ks []record.Value
	var last []byte // the key part of the previous entry
	c := bkt.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 2 {
			return nil, fmt.Errorf("state %q: %w: key of %d bytes", ref.name, ErrCorrupt, len(k))
		}
		v, n, err := decodeKey(k[2:], b.keyType)
		if err != nil {
			return nil, fmt.Errorf("state %q: %w", ref.name, err)
		}
		if kp := k[:2+n]; last == nil || !bytes.Equal(kp, last) {
			last = append(last[:0], kp...)
			ks = append(ks, v.Clone())
		}
	}
	return ks, nil
}

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
	raw, ok, err := s.t.get()
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
	key, e, existed, err := s.t.write()
	if err != nil {
		return err
	}
	if !existed {
		raw, _, err := s.t.below(key)
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
	_, e, _, err := s.t.write()
	if err != nil {
		return err
	}
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

// lookup returns the value of user key uk in the overlay, or found false when the overlay
// leaves it to older layers.
func (ov *mapOverlay) lookup(uk []byte) (val []byte, ok, found bool) {
	if e, f := ov.puts[string(uk)]; f {
		return e.val, !e.deleted, true
	}
	return nil, false, ov.cleared
}

// boltMapTable is the cache of a map state: database key prefix -> overlay.
type boltMapTable struct{ boltCache[*mapOverlay] }

// mapView is the view of one layer of a boltMapTable: an entry per user key of each overlay.
func mapView(m map[string]*mapOverlay) dirtyView {
	var v dirtyView
	for prefix, ov := range m {
		for uk, e := range ov.puts {
			v.entries = append(v.entries, viewEntry{prefix + uk, e})
		}
		if ov.cleared {
			v.cleared = append(v.cleared, prefix)
		}
	}
	v.sort()
	return v
}

// lookup returns the value of full key prefix+uk in the layers, newest first, or found false
// when it is left to the file.
func (t *boltMapTable) lookup(prefix, uk []byte) (val []byte, ok, found bool) {
	var buf [maxFrozenLayers + 1]*mapOverlay
	for _, ov := range t.overlays(buf[:0], prefix) {
		if val, ok, found = ov.lookup(uk); found {
			return val, ok, true
		}
	}
	return nil, false, false
}

// overlays appends the overlays of prefix to buf, newest first, down to the first that clears
// the map.
func (t *boltMapTable) overlays(buf []*mapOverlay, prefix []byte) []*mapOverlay {
	if ov := t.dirty[string(prefix)]; ov != nil {
		buf = append(buf, ov)
		if ov.cleared {
			return buf
		}
	}
	for i := len(t.frozen) - 1; i >= 0; i-- {
		if ov := t.frozen[i].m[string(prefix)]; ov != nil {
			buf = append(buf, ov)
			if ov.cleared {
				break
			}
		}
	}
	return buf
}

// boltMap is map state in a bbolt backend.
type boltMap[K comparable, V any] struct {
	t   *boltMapTable
	kc  Codec[K]
	vc  Codec[V]
	buf []byte
}

func newBoltMap[K comparable, V any](b *boltBackend, name string, kc Codec[K], vc Codec[V]) (*boltMap[K, V], error) {
	t := &boltMapTable{newBoltCache(b, name, mapView)}
	if err := b.register(name, kindMap, t); err != nil {
		return nil, err
	}
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

func (s *boltMap[K, V]) keys() ([]record.Value, error) { return bucketKeys(s.t.b, s.t.ref) }

func (s *boltMap[K, V]) getForUpdate(k K) (V, bool, error) { return s.get(k) }

func (s *boltMap[K, V]) get(k K) (V, bool, error) {
	var zero V
	prefix, full, err := s.fullKey(k)
	if err != nil {
		return zero, false, err
	}
	raw, ok, found := s.t.lookup(prefix, full[len(prefix):])
	if !found {
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
	var buf [maxFrozenLayers + 1]*mapOverlay
	ovs := s.t.overlays(buf[:0], prefix) // fn does not modify them: it must not modify this state
	if len(ovs) == 0 || !ovs[len(ovs)-1].cleared {
		bkt, err := s.t.ref.bucket(b)
		if err != nil {
			return err
		}
		if bkt != nil {
			c := bkt.Cursor()
		file:
			for k, v := c.Seek(prefix); bytes.HasPrefix(k, prefix); k, v = c.Next() {
				uk := k[len(prefix):]
				for _, ov := range ovs {
					if _, ok := ov.puts[string(uk)]; ok {
						continue file // an overlay has the current value
					}
				}
				more, err := s.call(fn, uk, v)
				if err != nil || !more {
					return err
				}
			}
		}
	}
	for i, ov := range ovs {
	puts:
		for uk, e := range ov.puts {
			if e.deleted {
				continue
			}
			for _, newer := range ovs[:i] {
				if _, ok := newer.puts[uk]; ok {
					continue puts // a newer overlay has the current value
				}
			}
			more, err := s.call(fn, []byte(uk), e.val)
			if err != nil || !more {
				return err
			}
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
