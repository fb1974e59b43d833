package state

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// Keyed state snapshot format, version 1, shared by every backend (a snapshot of one kind
// restores into the other). Integers are uvarints unless noted.
//
//	header:     "GFKS" version:u8 keyType:u8 maxParallelism start end
//	            nstates { len(name) name kind:u8 }*        states sorted by name
//	key groups: for kg := start..end (offsets[kg-start] is where its section begins)
//	              kg
//	              { stateIndex+1 { len(keyPart)>0 keyPart len(value) value }* 0 }*  0
//
// keyPart is the prefix-free key encoding (appendKey) followed, for map state, by the
// user-key bytes; it is exactly a bbolt key without its 2-byte key-group prefix. value is the
// codec encoding (value and reducing state), the concatenation of length-prefixed elements
// (list state) or the map value (map state, one entry per user key). Blocks of states without
// entries in a key group are omitted. Each section is self-terminating, so a reader needs only
// the header and the offsets of the key groups it owns.
const (
	snapshotMagic   = "GFKS"
	snapshotVersion = 1
)

// stateKind is the kind of a registered state; it travels in snapshots so that a state
// cannot be restored as another kind.
type stateKind uint8

const (
	kindValue stateKind = 1 + iota
	kindList
	kindMap
	kindReducing
)

func (k stateKind) String() string {
	switch k {
	case kindValue:
		return "value"
	case kindList:
		return "list"
	case kindMap:
		return "map"
	case kindReducing:
		return "reducing"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// stateMeta names one state of a snapshot.
type stateMeta struct {
	name string
	kind stateKind
}

// checkKind returns an error when a state is registered or restored as another kind.
func checkKind(name string, registered, restored stateKind) error {
	if registered != restored {
		return fmt.Errorf("state %q: registered as %s state but restored as %s state", name, registered, restored)
	}
	return nil
}

func appendHeader(b []byte, keyType record.Type, maxP int, rng KeyGroupRange, states []stateMeta) []byte {
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion, byte(keyType))
	b = binary.AppendUvarint(b, uint64(maxP))
	b = binary.AppendUvarint(b, uint64(rng.Start))
	b = binary.AppendUvarint(b, uint64(rng.End))
	b = binary.AppendUvarint(b, uint64(len(states)))
	for _, s := range states {
		b = binary.AppendUvarint(b, uint64(len(s.name)))
		b = append(b, s.name...)
		b = append(b, byte(s.kind))
	}
	return b
}

// appendEntry appends one entry: key (and, for map state, the user key) and value.
func appendEntry(b []byte, key record.Value, keyType record.Type, userKey, val []byte) []byte {
	kl := keyLen(key, keyType) + len(userKey)
	b = grow(b, record.UvarintLen(uint64(kl))+kl+record.UvarintLen(uint64(len(val)))+len(val))
	b = binary.AppendUvarint(b, uint64(kl))
	b = appendKey(b, key, keyType)
	b = append(b, userKey...)
	b = binary.AppendUvarint(b, uint64(len(val)))
	return append(b, val...)
}

// grow makes room for n more bytes in b, doubling its capacity when it must grow: a key
// group's section of a snapshot is megabytes, and append's growth of large slices (by a
// quarter) would copy it over and over.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), max(2*cap(b), len(b)+n))
	copy(nb, b)
	return nb
}

// keyLen is the length appendKey produces.
func keyLen(v record.Value, t record.Type) int {
	switch t {
	case record.Int64, record.Float64, record.Timestamp:
		return 8
	case record.Bool:
		return 1
	default:
		l := len(v.Str())
		return record.UvarintLen(uint64(l)) + l
	}
}

// snapshotHeader is a parsed header.
type snapshotHeader struct {
	keyType record.Type
	maxP    int
	rng     KeyGroupRange
	states  []stateMeta
	size    int // bytes of the header
}

// reader decodes uvarints from a byte slice, remembering the first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	x, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("%w: %s at offset %d truncated", ErrCorrupt, what, r.off)
		return 0
	}
	r.off += n
	return x
}

// int reads a uvarint that must not exceed limit.
func (r *reader) int(what string, limit int) int {
	x := r.uvarint(what)
	if r.err == nil && x > uint64(limit) {
		r.err = fmt.Errorf("%w: %s %d at offset %d exceeds %d", ErrCorrupt, what, x, r.off, limit)
		return 0
	}
	return int(x)
}

// bytes reads n bytes.
func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b)-r.off {
		r.err = fmt.Errorf("%w: %s at offset %d truncated", ErrCorrupt, what, r.off)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func parseHeader(data []byte) (*snapshotHeader, error) {
	r := &reader{b: data}
	if string(r.bytes(len(snapshotMagic), "magic")) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	vt := r.bytes(2, "version")
	if r.err != nil {
		return nil, r.err
	}
	if vt[0] != snapshotVersion {
		return nil, fmt.Errorf("%w: unsupported snapshot version %d", ErrCorrupt, vt[0])
	}
	h := &snapshotHeader{keyType: record.Type(vt[1])}
	h.maxP = r.int("max parallelism", UpperBoundMaxParallelism)
	h.rng.Start = r.int("range start", UpperBoundMaxParallelism)
	h.rng.End = r.int("range end", UpperBoundMaxParallelism)
	n := r.int("state count", len(data))
	seen := make(map[string]bool)
	for i := 0; i < n && r.err == nil; i++ {
		name := string(r.bytes(r.int("name length", len(data)), "state name"))
		kind := r.bytes(1, "state kind")
		if r.err != nil {
			break
		}
		k := stateKind(kind[0])
		if k < kindValue || k > kindReducing || name == "" || seen[name] {
			return nil, fmt.Errorf("%w: bad state %d (%q, kind %d)", ErrCorrupt, i, name, k)
		}
		seen[name] = true
		h.states = append(h.states, stateMeta{name: name, kind: k})
	}
	if r.err != nil {
		return nil, r.err
	}
	if h.maxP == 0 || h.rng.End >= h.maxP || h.rng.Start > h.rng.End {
		return nil, fmt.Errorf("%w: bad key-group range %d..%d of max parallelism %d", ErrCorrupt, h.rng.Start, h.rng.End, h.maxP)
	}
	h.size = r.off
	return h, nil
}

// readGroup parses the section of key group kg starting at off. It validates every entry
// (the key decodes and falls in kg) and calls fn with each state's entries.
func (h *snapshotHeader) readGroup(data []byte, off int64, kg int, fn func(st stateMeta, entries []byte) error) error {
	if off < int64(h.size) || off >= int64(len(data)) {
		return fmt.Errorf("%w: key group %d offset %d outside the file (%d bytes)", ErrCorrupt, kg, off, len(data))
	}
	r := &reader{b: data, off: int(off)}
	if got := r.int("key group", UpperBoundMaxParallelism); r.err == nil && got != kg {
		return fmt.Errorf("%w: section at offset %d is key group %d, want %d", ErrCorrupt, off, got, kg)
	}
	for r.err == nil {
		idx := r.int("state index", len(h.states))
		if r.err != nil || idx == 0 {
			break
		}
		st := h.states[idx-1]
		start := r.off
		end := start
		for r.err == nil {
			kp := r.bytes(r.int("key length", len(data)), "key")
			if r.err != nil || len(kp) == 0 {
				break
			}
			r.bytes(r.int("value length", len(data)), "value")
			if r.err != nil {
				break
			}
			key, n, err := decodeKey(kp, h.keyType)
			if err != nil {
				return fmt.Errorf("state %q key group %d: %w", st.name, kg, err)
			}
			if st.kind != kindMap && n != len(kp) {
				return fmt.Errorf("%w: state %q key group %d: key has %d trailing bytes", ErrCorrupt, st.name, kg, len(kp)-n)
			}
			if got := KeyGroup(key, h.keyType, h.maxP); got != kg {
				return fmt.Errorf("%w: state %q: key %s in the section of key group %d belongs to key group %d", ErrCorrupt, st.name, key.Format(h.keyType), kg, got)
			}
			end = r.off
		}
		if r.err != nil {
			break
		}
		if err := fn(st, data[start:end]); err != nil {
			return err
		}
	}
	return r.err
}

// forEachEntry calls fn for every entry of a block that readGroup validated.
func forEachEntry(entries []byte, fn func(keyPart, val []byte) error) error {
	r := &reader{b: entries}
	for r.off < len(entries) {
		kp := r.bytes(r.int("key length", len(entries)), "key")
		val := r.bytes(r.int("value length", len(entries)), "value")
		if r.err != nil {
			return r.err
		}
		if err := fn(kp, val); err != nil {
			return err
		}
	}
	return nil
}

// restoreHandles reads, from every handle that intersects rng, the key groups of the
// intersection and calls fn with each state's entries of each key group, in key-group order
// per handle. A handle listed twice is read once.
func restoreHandles(handles []*pb.KeyedStateHandle, read func(*pb.FileHandle) ([]byte, error),
	rng KeyGroupRange, keyType record.Type, maxP int, fn func(st stateMeta, kg int, entries []byte) error,
) error {
	type handleID struct {
		path       string
		start, end int32
	}
	seen := make(map[handleID]bool)
	for _, h := range handles {
		if h == nil || h.File == nil {
			return fmt.Errorf("restore keyed state: handle without a file")
		}
		id := handleID{h.File.Path, h.KeyGroupStart, h.KeyGroupEnd}
		if seen[id] {
			continue // the same handle listed twice (e.g. once per chained operator)
		}
		seen[id] = true
		hr := KeyGroupRange{Start: int(h.KeyGroupStart), End: int(h.KeyGroupEnd)}
		lo, hi := max(hr.Start, rng.Start), min(hr.End, rng.End)
		if lo > hi {
			continue
		}
		if err := restoreHandle(h, hr, lo, hi, read, keyType, maxP, fn); err != nil {
			return fmt.Errorf("restore keyed state from %s: %w", h.File.Path, err)
		}
	}
	return nil
}

func restoreHandle(h *pb.KeyedStateHandle, hr KeyGroupRange, lo, hi int, read func(*pb.FileHandle) ([]byte, error),
	keyType record.Type, maxP int, fn func(st stateMeta, kg int, entries []byte) error,
) error {
	if len(h.Offsets) != hr.Len() {
		return fmt.Errorf("handle has %d offsets for key groups %d..%d", len(h.Offsets), hr.Start, hr.End)
	}
	data, err := read(h.File)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	hdr, err := parseHeader(data)
	if err != nil {
		return err
	}
	switch {
	case hdr.maxP != maxP:
		return fmt.Errorf("snapshot has max parallelism %d, backend %d", hdr.maxP, maxP)
	case hdr.keyType != keyType:
		return fmt.Errorf("snapshot has key type %s, backend %s", hdr.keyType, keyType)
	case hdr.rng != hr:
		return fmt.Errorf("snapshot holds key groups %d..%d, handle says %d..%d", hdr.rng.Start, hdr.rng.End, hr.Start, hr.End)
	}
	for kg := lo; kg <= hi; kg++ {
		err := hdr.readGroup(data, h.Offsets[kg-hr.Start], kg, func(st stateMeta, entries []byte) error {
			return fn(st, kg, entries)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// snapWriter buffers a snapshot's output, counts its bytes and keeps the first error.
type snapWriter struct {
	w   *bufio.Writer
	n   int64
	err error
	tmp [binary.MaxVarintLen64]byte
}

func newSnapWriter(w io.Writer) *snapWriter {
	return &snapWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

func (sw *snapWriter) write(b []byte) {
	if sw.err == nil {
		sw.count(sw.w.Write(b))
	}
}

func (sw *snapWriter) writeString(s string) {
	if sw.err == nil {
		sw.count(sw.w.WriteString(s))
	}
}

func (sw *snapWriter) count(n int, err error) {
	sw.n += int64(n)
	sw.err = err
}

func (sw *snapWriter) uvarint(x uint64) {
	sw.write(binary.AppendUvarint(sw.tmp[:0], x))
}

func (sw *snapWriter) finish() error {
	if sw.err != nil {
		return sw.err
	}
	return sw.w.Flush()
}

// CountEntries returns how many entries each state holds in a keyed state snapshot (h, with
// read as for KeyedBackend.Restore): one per key of a value, list or reducing state, one per
// user key of a map state. States without entries are left out, so a snapshot of a backend
// whose states are all empty gives an empty map. It reads every key group of the handle and
// validates it as a restore does; it is meant for tests and tools that inspect what an
// operator left in its state (that a window cleaned up its expired panes and timers).
func CountEntries(h *pb.KeyedStateHandle, read func(*pb.FileHandle) ([]byte, error)) (map[string]int, error) {
	if h == nil || h.File == nil {
		return nil, fmt.Errorf("count entries: handle without a file")
	}
	hr := KeyGroupRange{Start: int(h.KeyGroupStart), End: int(h.KeyGroupEnd)}
	if len(h.Offsets) != hr.Len() {
		return nil, fmt.Errorf("count entries: handle has %d offsets for key groups %d..%d", len(h.Offsets), hr.Start, hr.End)
	}
	data, err := read(h.File)
	if err != nil {
		return nil, fmt.Errorf("count entries: read: %w", err)
	}
	hdr, err := parseHeader(data)
	if err != nil {
		return nil, fmt.Errorf("count entries: %w", err)
	}
	if hdr.rng != hr {
		return nil, fmt.Errorf("count entries: snapshot holds key groups %d..%d, handle says %d..%d", hdr.rng.Start, hdr.rng.End, hr.Start, hr.End)
	}
	counts := map[string]int{}
	for kg := hr.Start; kg <= hr.End; kg++ {
		err := hdr.readGroup(data, h.Offsets[kg-hr.Start], kg, func(st stateMeta, entries []byte) error {
			return forEachEntry(entries, func(_, _ []byte) error {
				counts[st.name]++
				return nil
			})
		})
		if err != nil {
			return nil, fmt.Errorf("count entries: %w", err)
		}
	}
	return counts, nil
}

// SnapshotKeyType reads the key type from the header of the keyed-state snapshot file at path
// (reading only its beginning), so a restore can be checked before anything is scheduled.
func SnapshotKeyType(path string) (record.Type, error) {
	f, err := os.Open(path)
	if err != nil {
		return record.Invalid, fmt.Errorf("keyed state %s: %w", path, err)
	}
	defer f.Close()
	return ReadSnapshotKeyType(f, path)
}

// ReadSnapshotKeyType is SnapshotKeyType of a snapshot file read from r (a local file or an
// object), named name in errors; it reads only the file's beginning.
func ReadSnapshotKeyType(r io.Reader, name string) (record.Type, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxHeaderRead))
	if err != nil {
		return record.Invalid, fmt.Errorf("keyed state %s: %w", name, err)
	}
	h, err := parseHeader(b)
	if err != nil {
		return record.Invalid, fmt.Errorf("keyed state %s: %w", name, err)
	}
	return h.keyType, nil
}

// maxHeaderRead bounds what SnapshotKeyType reads: a header names each state once.
const maxHeaderRead = 1 << 20
