package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// hashMapBackend keeps keyed state in Go maps: per state, per key group, a map from the key
// to the entry. Value and reducing state store *T so that updating an existing key writes in
// place without allocating.
//
// Snapshots are copy-on-write per key group. Snapshot only records which states exist and
// marks every key group; the key groups are encoded later, each exactly once, by whichever
// comes first: the snapshot's WriteSnapshot (on the upload goroutine), or the task's first write
// into that key group (before it writes). A per-group mutex in the snapshot decides the race;
// after a group is encoded the task writes into it freely. So the synchronous part costs
// O(key groups), and the task pays for encoding only the groups it writes into before the
// upload reaches them.
type hashMapBackend struct {
	keyContext

	tables  map[string]hmTable
	pending map[string]*rawState // restored, not yet registered
	closed  bool
	// strKeys: the keys are strings or bytes (the states' maps are keyed by string, not by
	// the value's word).
	strKeys bool
	// epoch changes with the current key and on Restore: a state's cached entry of the
	// current key is valid while its epoch matches.
	epoch uint64

	// cow[i] means a snapshot may still need key group i as it was: the task must call
	// capture before writing into it; cowLeft counts them. Owned by the task goroutine.
	cow     []bool
	cowLeft int

	mu    sync.Mutex // guards snaps
	snaps []*hmSnapshot

	// encoded[i] is the size key group index i had in the last snapshot, so that the next
	// one encodes it into a buffer of about the right size instead of growing one. Written
	// by whichever goroutine encodes the group.
	encoded []atomic.Int64
}

// hmTable is one registered state of a hashmap backend.
type hmTable interface {
	meta() stateMeta
	// appendGroup appends the snapshot entries of key group index i.
	appendGroup(b []byte, i int, sc *scratch) []byte
	// load adds a restored entry of key group index i.
	load(i int, e *entry) error
}

// rawState is restored state not yet registered: per key-group index, its encoded entries,
// in chunks.
type rawState struct {
	kind   stateKind
	groups [][][]byte
}

// scratch is reusable encoding space.
type scratch struct{ a, b []byte }

func newHashMapBackend(o KeyedBackendOptions) *hashMapBackend {
	return &hashMapBackend{
		keyContext: newKeyContext(o),
		strKeys:    o.KeyType == record.String || o.KeyType == record.Bytes,
		tables:     make(map[string]hmTable),
		pending:    make(map[string]*rawState),
		cow:        make([]bool, o.Range.Len()),
		encoded:    make([]atomic.Int64, o.Range.Len()),
	}
}

// SetCurrentKey sets the key that state accesses refer to. The key is cloned only when an
// entry for it is created.
func (b *hashMapBackend) SetCurrentKey(k record.Value) {
	b.setKeyLazy(k)
	b.epoch++
}

// beforeWrite must precede every write into key group index i.
func (b *hashMapBackend) beforeWrite(i int) {
	if b.cow[i] {
		b.capture(i)
	}
}

func (b *hashMapBackend) capture(i int) {
	b.cow[i] = false
	b.cowLeft--
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.snaps {
		s.capture(i)
	}
}

// Snapshot takes the synchronous part of a snapshot: O(states + key groups).
func (b *hashMapBackend) Snapshot() (Snapshot, error) {
	if b.closed {
		return nil, ErrClosed
	}
	s := &hmSnapshot{b: b, rng: b.rng}
	for name, t := range b.tables {
		s.states = append(s.states, hmSnapState{meta: stateMeta{name: name, kind: t.meta().kind}, table: t})
	}
	for name, raw := range b.pending {
		s.states = append(s.states, hmSnapState{meta: stateMeta{name: name, kind: raw.kind}, raw: raw})
	}
	slices.SortFunc(s.states, func(x, y hmSnapState) int { return strings.Compare(x.meta.name, y.meta.name) })
	metas := make([]stateMeta, len(s.states))
	for i, st := range s.states {
		metas[i] = st.meta
	}
	s.header = appendHeader(nil, b.keyType, b.maxP, b.rng, metas)
	s.groups = make([]hmGroup, b.rng.Len())
	for i := range b.cow {
		b.cow[i] = true
	}
	b.cowLeft = len(b.cow)
	b.mu.Lock()
	b.snaps = append(b.snaps, s)
	b.mu.Unlock()
	return s, nil
}

// Restore loads the key groups of this backend's range, one entry at a time. Entries of
// registered states are decoded at once; others are kept encoded until the state is
// registered (and are included in snapshots meanwhile). After an error the backend holds
// part of the state.
func (b *hashMapBackend) Restore(handles []*pb.KeyedStateHandle, open FileOpener) error {
	if b.closed {
		return ErrClosed
	}
	b.epoch++
	return restoreHandles(handles, open, b.rng, b.keyType, b.maxP, func(st stateMeta, kg int, size int64) (func(*entry) error, error) {
		i := kg - b.rng.Start
		b.beforeWrite(i)
		if t, ok := b.tables[st.name]; ok {
			if err := checkKind(st.name, t.meta().kind, st.kind); err != nil {
				return nil, err
			}
			return func(e *entry) error {
				if e == nil {
					return nil
				}
				if err := t.load(i, e); err != nil {
					return fmt.Errorf("state %q: %w", st.name, err)
				}
				return nil
			}, nil
		}
		raw := b.pending[st.name]
		if raw == nil {
			raw = &rawState{kind: st.kind, groups: make([][][]byte, b.rng.Len())}
			b.pending[st.name] = raw
		} else if err := checkKind(st.name, raw.kind, st.kind); err != nil {
			return nil, err
		}
		if len(raw.groups[i]) == 0 && size > 0 {
			// The block is at most size bytes (all of them if it is the section's only one).
			raw.groups[i] = [][]byte{make([]byte, 0, min(size, maxRawChunk))}
		}
		return func(e *entry) error {
			if e == nil {
				raw.groups[i] = trimChunks(raw.groups[i])
			} else {
				raw.groups[i] = appendRaw(raw.groups[i], e)
			}
			return nil
		}, nil
	})
}

// Chunks of a raw state's entries grow from minRawChunk to maxRawChunk bytes.
const (
	minRawChunk = 4 << 10
	maxRawChunk = 256 << 10
)

// appendRaw appends an entry, in the snapshot's encoding, to the chunks of a raw state's key
// group. An entry lies in one chunk; one larger than maxRawChunk has a chunk of its own.
func appendRaw(chunks [][]byte, e *entry) [][]byte {
	keyPart, val := e.keyPart, e.value
	n := len(e.raw)
	if e.raw == nil {
		n = record.UvarintLen(uint64(len(keyPart))) + len(keyPart) + record.UvarintLen(uint64(len(val))) + len(val)
	}
	if len(chunks) == 0 || cap(chunks[len(chunks)-1])-len(chunks[len(chunks)-1]) < n {
		size := minRawChunk
		if len(chunks) > 0 {
			size = min(2*cap(chunks[len(chunks)-1]), maxRawChunk)
		}
		chunks = append(chunks, make([]byte, 0, max(size, n)))
	}
	b := chunks[len(chunks)-1]
	if e.raw != nil {
		chunks[len(chunks)-1] = append(b, e.raw...)
		return chunks
	}
	b = binary.AppendUvarint(b, uint64(len(keyPart)))
	b = append(b, keyPart...)
	b = binary.AppendUvarint(b, uint64(len(val)))
	chunks[len(chunks)-1] = append(b, val...)
	return chunks
}

// trimChunks gives the last chunk back its room when a restored block ends, unless that is
// little: the chunks are kept as long as the state is not registered.
func trimChunks(chunks [][]byte) [][]byte {
	if len(chunks) > 0 {
		last := chunks[len(chunks)-1]
		if cap(last)-len(last) > len(last)/8 {
			chunks[len(chunks)-1] = bytes.Clone(last)
		}
	}
	return chunks
}

// Close drops the state. Snapshots taken before remain writable.
func (b *hashMapBackend) Close() error {
	b.closed = true
	b.tables = nil
	b.pending = nil
	return nil
}

// hmSnapshot is a copy-on-write snapshot of a hashmap backend.
type hmSnapshot struct {
	b      *hashMapBackend
	rng    KeyGroupRange
	header []byte
	states []hmSnapState
	groups []hmGroup
}

type hmSnapState struct {
	meta  stateMeta
	table hmTable   // registered state, or
	raw   *rawState // restored state not registered
}

// hmGroup is the encoded section of one key group, once someone encoded it.
type hmGroup struct {
	mu   sync.Mutex
	done bool
	data []byte
}

// capture encodes key group index i unless already done. Called by the task, under b.mu.
func (s *hmSnapshot) capture(i int) {
	g := &s.groups[i]
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		g.data = s.encodeGroup(i)
		g.done = true
	}
}

// take returns the encoded section of key group index i, encoding it from the live maps when
// the task has not written into it yet (the task waits on g.mu meanwhile).
func (s *hmSnapshot) take(i int) []byte {
	g := &s.groups[i]
	g.mu.Lock()
	defer g.mu.Unlock()
	data := g.data
	if !g.done {
		data = s.encodeGroup(i)
		g.done = true
	}
	g.data = nil
	return data
}

func (s *hmSnapshot) encodeGroup(i int) []byte {
	var sc scratch
	hint := s.b.encoded[i].Load()
	b := binary.AppendUvarint(make([]byte, 0, hint+hint/8+64), uint64(s.rng.Start+i))
	defer func() { s.b.encoded[i].Store(int64(len(b))) }()
	for idx, st := range s.states {
		mark := len(b)
		b = binary.AppendUvarint(b, uint64(idx+1))
		body := len(b)
		if st.table != nil {
			b = st.table.appendGroup(b, i, &sc)
		} else {
			for _, entries := range st.raw.groups[i] {
				b = append(b, entries...)
			}
		}
		if len(b) == body {
			b = b[:mark]
			continue
		}
		b = append(b, 0)
	}
	return append(b, 0)
}

// WriteSnapshot writes the snapshot; it may run on another goroutine than the task.
func (s *hmSnapshot) WriteSnapshot(w io.Writer) ([]int64, error) {
	sw := newSnapWriter(w)
	sw.write(s.header)
	offsets := make([]int64, len(s.groups))
	for i := range s.groups {
		offsets[i] = sw.n
		sw.write(s.take(i))
	}
	if err := sw.finish(); err != nil {
		return nil, fmt.Errorf("write keyed state snapshot: %w", err)
	}
	return offsets, nil
}

// Release stops the copy-on-write for this snapshot. Safe on any goroutine.
func (s *hmSnapshot) Release() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.snaps = slices.DeleteFunc(s.b.snaps, func(x *hmSnapshot) bool { return x == s })
	s.groups = nil
}

// hmState is what the states of a hashmap backend share: per key-group index, a map from the
// key to the state's entry E. The maps are typed by the key's kind, so that a lookup hashes
// and compares a word or a string instead of a record.Value struct: nums for keys of the
// types that live in the value's word (int64, float64, bool, timestamp: their bits, so keys
// are told apart exactly as record.Value equality does), strs for string and bytes keys. Only
// one of the two is used, by the backend's key type.
type hmState[E any] struct {
	b    *hashMapBackend
	m    stateMeta
	nums []map[uint64]E
	strs []map[string]E
}

// entry returns the entry of key k in key group index i.
func (s *hmState[E]) entry(i int, k record.Value) (E, bool) {
	if s.b.strKeys {
		e, ok := s.strs[i][k.Str()]
		return e, ok
	}
	e, ok := s.nums[i][uint64(k.Int())]
	return e, ok
}

// setEntry sets the entry of key k in key group index i; k must own its memory (Clone).
func (s *hmState[E]) setEntry(i int, k record.Value, e E) {
	if s.b.strKeys {
		if s.strs[i] == nil {
			s.strs[i] = make(map[string]E)
		}
		s.strs[i][k.Str()] = e
		return
	}
	if s.nums[i] == nil {
		s.nums[i] = make(map[uint64]E)
	}
	s.nums[i][uint64(k.Int())] = e
}

// deleteEntry deletes the entry of key k in key group index i.
func (s *hmState[E]) deleteEntry(i int, k record.Value) {
	if s.b.strKeys {
		delete(s.strs[i], k.Str())
		return
	}
	delete(s.nums[i], uint64(k.Int()))
}

// group iterates over the keys and entries of key group index i, in no particular order.
func (s *hmState[E]) group(i int) iter.Seq2[record.Value, E] {
	return func(yield func(record.Value, E) bool) {
		if s.b.strKeys {
			for k, e := range s.strs[i] {
				if !yield(record.StringValue(k), e) {
					return
				}
			}
			return
		}
		for k, e := range s.nums[i] {
			if !yield(record.IntValue(int64(k)), e) {
				return
			}
		}
	}
}

// keys returns every key that has an entry.
func (s *hmState[E]) keys() ([]record.Value, error) {
	var ks []record.Value
	for i := range s.b.rng.Len() {
		for k := range s.group(i) {
			ks = append(ks, k)
		}
	}
	return ks, nil
}

// newHMState registers state name as kind on b, built with mk around its shared part, and
// loads its restored entries.
func newHMState[E any, S hmTable](b *hashMapBackend, name string, kind stateKind, mk func(hmState[E]) S) (S, error) {
	var zero S
	if err := checkRegister(name, b.closed, b.tables[name] != nil); err != nil {
		return zero, err
	}
	st := hmState[E]{b: b, m: stateMeta{name: name, kind: kind}}
	if b.strKeys {
		st.strs = make([]map[string]E, b.rng.Len())
	} else {
		st.nums = make([]map[uint64]E, b.rng.Len())
	}
	s := mk(st)
	if raw := b.pending[name]; raw != nil {
		if err := checkKind(name, kind, raw.kind); err != nil {
			return zero, err
		}
		for i, chunks := range raw.groups {
			for _, entries := range chunks {
				err := forEachEntry(entries, func(kp, val []byte) error {
					k, n, err := decodeKey(kp, b.keyType)
					if err != nil {
						return err
					}
					return s.load(i, &entry{key: k, keyPart: kp, userKey: kp[n:], value: val})
				})
				if err != nil {
					return zero, fmt.Errorf("state %q: restore: %w", name, err)
				}
			}
		}
	}
	delete(b.pending, name)
	b.tables[name] = s
	return s, nil
}

func (s *hmState[E]) meta() stateMeta { return s.m }

// clear deletes the current key's entry, copying the group first if a snapshot shares it.
func (s *hmState[E]) clear() error {
	i, err := s.b.group()
	if err != nil {
		return err
	}
	if _, ok := s.entry(i, s.b.key); ok {
		s.b.beforeWrite(i)
		s.deleteEntry(i, s.b.key)
	}
	return nil
}

// hmValue is value or reducing state in a hashmap backend.
type hmValue[T any] struct {
	hmState[*T]
	c Codec[T]

	// The entries of all key groups by key (the same *T as in the group maps): a read, and a
	// write while no snapshot needs a copy, finds the current key's entry without computing
	// its key group. One of the two is used, as in hmState; number keys in a numIndex, whose
	// lookup costs a third of a Go map's.
	numIdx *numIndex[*T]
	strIdx map[string]*T

	// last is the current key's entry (nil: none) while lastEpoch == b.epoch, so that a
	// read-modify-write of one key looks the map up once.
	last      *T
	lastEpoch uint64
}

func newHMValue[T any](b *hashMapBackend, name string, kind stateKind, c Codec[T]) (*hmValue[T], error) {
	return newHMState(b, name, kind, func(st hmState[*T]) *hmValue[T] {
		s := &hmValue[T]{hmState: st, c: c, lastEpoch: b.epoch - 1}
		if b.strKeys {
			s.strIdx = map[string]*T{}
		} else {
			s.numIdx = newNumIndex[*T]()
		}
		return s
	})
}

// lookup returns the current key's entry, or nil. An entry's key is in the backend's range
// (it was checked when the entry was made, or restored from the range).
func (s *hmValue[T]) lookup() *T {
	if s.lastEpoch != s.b.epoch {
		if s.b.strKeys {
			s.last = s.strIdx[s.b.key.Str()]
		} else {
			s.last, _ = s.numIdx.get(uint64(s.b.key.Int()))
		}
		s.lastEpoch = s.b.epoch
	}
	return s.last
}

// index adds an entry made for key k to the index.
func (s *hmValue[T]) index(k record.Value, p *T) {
	if s.b.strKeys {
		s.strIdx[k.Str()] = p
	} else {
		s.numIdx.put(uint64(k.Int()), p)
	}
}

func (s *hmValue[T]) get() (T, bool, error) {
	var zero T
	if s.b.hasKey {
		if p := s.lookup(); p != nil {
			return *p, true, nil
		}
	}
	if _, err := s.b.group(); err != nil {
		return zero, false, err
	}
	return zero, false, nil
}

func (s *hmValue[T]) set(v T) error {
	if s.b.hasKey && s.b.cowLeft == 0 {
		if p := s.lookup(); p != nil {
			*p = v // no snapshot needs the group as it was
			return nil
		}
	}
	i, err := s.b.group()
	if err != nil {
		return err
	}
	s.b.beforeWrite(i)
	if p := s.lookup(); p != nil {
		*p = v
		return nil
	}
	p := new(T)
	*p = v
	k := s.b.key.Clone()
	s.setEntry(i, k, p)
	s.index(k, p)
	s.last = p
	return nil
}

func (s *hmValue[T]) clear() error {
	if err := s.hmState.clear(); err != nil {
		return err
	}
	if s.b.strKeys {
		delete(s.strIdx, s.b.key.Str())
	} else {
		s.numIdx.delete(uint64(s.b.key.Int()))
	}
	s.last, s.lastEpoch = nil, s.b.epoch // the current key has no entry now
	return nil
}

func (s *hmValue[T]) appendGroup(b []byte, i int, sc *scratch) []byte {
	for k, p := range s.group(i) {
		sc.a = s.c.Append(sc.a[:0], *p)
		b = appendEntry(b, k, s.b.keyType, nil, sc.a)
	}
	return b
}

func (s *hmValue[T]) load(i int, e *entry) error {
	v, err := s.c.Decode(e.value)
	if err != nil {
		return err
	}
	s.setEntry(i, e.key, &v)
	s.index(e.key, &v)
	return nil
}

// hmList is list state in a hashmap backend.
type hmList[T any] struct {
	hmState[*[]T]
	c Codec[T]
}

func newHMList[T any](b *hashMapBackend, name string, c Codec[T]) (*hmList[T], error) {
	return newHMState(b, name, kindList, func(st hmState[*[]T]) *hmList[T] { return &hmList[T]{hmState: st, c: c} })
}

func (s *hmList[T]) get() ([]T, error) {
	i, err := s.b.group()
	if err != nil {
		return nil, err
	}
	if p, ok := s.entry(i, s.b.key); ok {
		return slices.Clone(*p), nil
	}
	return nil, nil
}

func (s *hmList[T]) add(v T) error {
	i, err := s.b.group()
	if err != nil {
		return err
	}
	s.b.beforeWrite(i)
	if p, ok := s.entry(i, s.b.key); ok {
		*p = append(*p, v)
		return nil
	}
	vs := []T{v}
	s.setEntry(i, s.b.key.Clone(), &vs)
	return nil
}

func (s *hmList[T]) update(vs []T) error {
	if len(vs) == 0 {
		return s.clear()
	}
	i, err := s.b.group()
	if err != nil {
		return err
	}
	s.b.beforeWrite(i)
	if p, ok := s.entry(i, s.b.key); ok {
		*p = append((*p)[:0], vs...)
		return nil
	}
	vs = slices.Clone(vs)
	s.setEntry(i, s.b.key.Clone(), &vs)
	return nil
}

func (s *hmList[T]) appendGroup(b []byte, i int, sc *scratch) []byte {
	for k, p := range s.group(i) {
		sc.a = sc.a[:0]
		for _, v := range *p {
			sc.b = s.c.Append(sc.b[:0], v)
			sc.a = appendElem(sc.a, sc.b)
		}
		b = appendEntry(b, k, s.b.keyType, nil, sc.a)
	}
	return b
}

func (s *hmList[T]) load(i int, e *entry) error {
	vs, err := decodeList(e.value, s.c)
	if err != nil || len(vs) == 0 {
		return err
	}
	s.setEntry(i, e.key, &vs)
	return nil
}

// decodeList decodes a list value: length-prefixed elements.
func decodeList[T any](b []byte, c Codec[T]) ([]T, error) {
	var vs []T
	for len(b) > 0 {
		elem, rest, err := nextElem(b)
		if err != nil {
			return nil, err
		}
		v, err := c.Decode(elem)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
		b = rest
	}
	return vs, nil
}

// hmMap is map state in a hashmap backend.
type hmMap[K comparable, V any] struct {
	hmState[*userMap[K, V]]
	kc Codec[K]
	vc Codec[V]

	// cur is the current key's map (nil: none) while curEpoch == b.epoch, so that the
	// accesses of one key look the key up once.
	cur      *userMap[K, V]
	curEpoch uint64
}

// userMap is the map of one key: its entries in slices, in the order they were added, and
// a Go map once it has more than smallMap. Most keys of a map state hold a few entries, added
// in time order and used newest first (a window's panes, a join's time buckets): searched
// from the newest, the entry wanted is found in the first cache line, where a Go map costs
// hundreds of bytes and a miss or two per lookup.
type userMap[K comparable, V any] struct {
	keys []K
	vals []V
	big  map[K]V
}

const smallMap = 64

// find returns the index of k in the slices, or -1.
func (m *userMap[K, V]) find(k K) int {
	for i := len(m.keys) - 1; i >= 0; i-- {
		if m.keys[i] == k {
			return i
		}
	}
	return -1
}

func (m *userMap[K, V]) get(k K) (V, bool) {
	if m.big != nil {
		v, ok := m.big[k]
		return v, ok
	}
	if i := m.find(k); i >= 0 {
		return m.vals[i], true
	}
	var zero V
	return zero, false
}

func (m *userMap[K, V]) put(k K, v V) {
	if m.big != nil {
		m.big[k] = v
		return
	}
	if i := m.find(k); i >= 0 {
		m.vals[i] = v
		return
	}
	if len(m.keys) < smallMap {
		m.keys, m.vals = append(m.keys, k), append(m.vals, v)
		return
	}
	m.big = make(map[K]V, 2*smallMap)
	for i, k := range m.keys {
		m.big[k] = m.vals[i]
	}
	m.big[k] = v
	m.keys, m.vals = nil, nil
}

// remove deletes k, keeping the order of the others.
func (m *userMap[K, V]) remove(k K) {
	if m.big != nil {
		delete(m.big, k)
		return
	}
	if i := m.find(k); i >= 0 {
		m.keys = slices.Delete(m.keys, i, i+1)
		m.vals = slices.Delete(m.vals, i, i+1) // clears the freed element
	}
}

func (m *userMap[K, V]) len() int {
	if m.big != nil {
		return len(m.big)
	}
	return len(m.keys)
}

// each calls fn on every entry until it returns false; fn must not modify the map.
func (m *userMap[K, V]) each(fn func(K, V) bool) {
	if m.big != nil {
		for k, v := range m.big {
			if !fn(k, v) {
				return
			}
		}
		return
	}
	for i, k := range m.keys {
		if !fn(k, m.vals[i]) {
			return
		}
	}
}

func newHMMap[K comparable, V any](b *hashMapBackend, name string, kc Codec[K], vc Codec[V]) (*hmMap[K, V], error) {
	return newHMState(b, name, kindMap, func(st hmState[*userMap[K, V]]) *hmMap[K, V] {
		return &hmMap[K, V]{hmState: st, kc: kc, vc: vc, curEpoch: b.epoch - 1}
	})
}

// lookup returns the current key's map in key group index i, or nil.
func (s *hmMap[K, V]) lookup(i int) *userMap[K, V] {
	if s.curEpoch != s.b.epoch {
		s.cur, _ = s.entry(i, s.b.key)
		s.curEpoch = s.b.epoch
	}
	return s.cur
}

func (s *hmMap[K, V]) get(k K) (V, bool, error) {
	i, err := s.b.group()
	if err != nil {
		var zero V
		return zero, false, err
	}
	um := s.lookup(i)
	if um == nil {
		var zero V
		return zero, false, nil
	}
	v, ok := um.get(k)
	return v, ok, nil
}

func (s *hmMap[K, V]) getForUpdate(k K) (V, bool, error) {
	i, err := s.b.group()
	if err != nil {
		var zero V
		return zero, false, err
	}
	s.b.beforeWrite(i)
	return s.get(k)
}

func (s *hmMap[K, V]) put(k K, v V) error {
	i, err := s.b.group()
	if err != nil {
		return err
	}
	s.b.beforeWrite(i)
	um := s.lookup(i)
	if um == nil {
		um = &userMap[K, V]{}
		s.setEntry(i, s.b.key.Clone(), um)
		s.cur = um
	}
	um.put(k, v)
	return nil
}

func (s *hmMap[K, V]) remove(k K) error {
	i, err := s.b.group()
	if err != nil {
		return err
	}
	um := s.lookup(i)
	if um == nil {
		return nil
	}
	if _, ok := um.get(k); !ok {
		return nil
	}
	s.b.beforeWrite(i)
	um.remove(k)
	if um.len() == 0 {
		s.deleteEntry(i, s.b.key)
		s.cur = nil
	}
	return nil
}

func (s *hmMap[K, V]) clear() error {
	s.cur = nil // whether it was the entry or stale, the current key has none afterwards
	return s.hmState.clear()
}

func (s *hmMap[K, V]) forEach(fn func(K, V) bool) error {
	i, err := s.b.group()
	if err != nil {
		return err
	}
	if um := s.lookup(i); um != nil {
		um.each(fn)
	}
	return nil
}

func (s *hmMap[K, V]) appendGroup(b []byte, i int, sc *scratch) []byte {
	for k, um := range s.group(i) {
		um.each(func(uk K, v V) bool {
			sc.a = s.kc.Append(sc.a[:0], uk)
			sc.b = s.vc.Append(sc.b[:0], v)
			b = appendEntry(b, k, s.b.keyType, sc.a, sc.b)
			return true
		})
	}
	return b
}

func (s *hmMap[K, V]) load(i int, e *entry) error {
	uk, err := s.kc.Decode(e.userKey)
	if err != nil {
		return err
	}
	v, err := s.vc.Decode(e.value)
	if err != nil {
		return err
	}
	um, _ := s.entry(i, e.key)
	if um == nil {
		um = &userMap[K, V]{}
		s.setEntry(i, e.key, um)
	}
	um.put(uk, v)
	return nil
}
