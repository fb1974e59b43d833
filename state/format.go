package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

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

// snapReader parses a snapshot from a stream, one entry at a time, remembering the first
// error. size is the file's size as its handle says: every length and count is bounded by the
// bytes left before it, so corrupt input cannot make the reader allocate more than the file
// holds, and it never reads beyond it. An entry that fits the 64 KiB bufio buffer is parsed
// in place; a larger one is read into buffers that the next one reuses. So the memory a
// restore needs for reading is the bufio buffer plus its largest key and value, however large
// the file.
type snapReader struct {
	br   *bufio.Reader
	off  int64 // file position of the next byte
	size int64
	err  error
	// src says err is the underlying reader's: a read failed, or a verifying reader found
	// the file corrupt. Reading on is pointless.
	src      bool
	key, val []byte // the current entry's
}

// snapReadBuffer is the bufio buffer of a snapshot's reader.
const snapReadBuffer = 64 << 10

func newSnapReader(r io.Reader, size int64) *snapReader {
	return &snapReader{br: bufio.NewReaderSize(r, snapReadBuffer), size: max(size, 0)}
}

// fail records the error err (io.EOF: the file ended) that cut short reading what.
func (s *snapReader) fail(what string, err error) {
	switch {
	case s.err != nil:
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		s.err = fmt.Errorf("%w: %s at offset %d truncated (file of %d bytes ends at %d)", ErrCorrupt, what, s.off, s.size, s.off)
	default:
		s.err, s.src = fmt.Errorf("reading %s at offset %d: %w", what, s.off, err), true
	}
}

func (s *snapReader) corrupt(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

// left is how many bytes the file has after the current position.
func (s *snapReader) left() int64 { return s.size - s.off }

func (s *snapReader) u8(what string) byte {
	if s.err != nil {
		return 0
	}
	if s.left() <= 0 {
		s.fail(what, io.EOF)
		return 0
	}
	c, err := s.br.ReadByte()
	if err != nil {
		s.fail(what, err)
		return 0
	}
	s.off++
	return c
}

func (s *snapReader) uvarint(what string) uint64 {
	start := s.off
	var x uint64
	for i := range binary.MaxVarintLen64 {
		c := s.u8(what)
		if s.err != nil {
			return 0
		}
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				break
			}
			return x | uint64(c)<<(7*i)
		}
		x |= uint64(c&0x7f) << (7 * i)
	}
	s.corrupt("%s at offset %d overflows 64 bits", what, start)
	return 0
}

// int reads a uvarint that must not exceed limit.
func (s *snapReader) int(what string, limit int64) int {
	start := s.off
	x := s.uvarint(what)
	if s.err == nil && x > uint64(max(limit, 0)) {
		s.corrupt("%s %d at offset %d exceeds %d", what, x, start, limit)
		return 0
	}
	return int(x)
}

// length reads a length, which cannot exceed the bytes left in the file.
func (s *snapReader) length(what string) int { return s.int(what, s.left()) }

// bytes reads n bytes into *buf, reusing it, and returns them. It grows *buf as the bytes
// arrive, so a length the file does not back costs no more than the bytes there are.
func (s *snapReader) bytes(n int, what string, buf *[]byte) []byte {
	if s.err != nil {
		return nil
	}
	if int64(n) > s.left() {
		s.fail(what, io.EOF)
		return nil
	}
	b := (*buf)[:0]
	for len(b) < n {
		k := min(n-len(b), 1<<20)
		b = slices.Grow(b, k)
		m, err := io.ReadFull(s.br, b[len(b):len(b)+k])
		b = b[:len(b)+m]
		s.off += int64(m)
		if err != nil {
			s.fail(what, err)
			break
		}
	}
	*buf = b
	return b
}

// peekEntry reads the next entry of a block without copying it when it fits the bufio
// buffer: the key part and value (and the entry's whole encoding, raw) point into the buffer
// and are valid until the next read. An empty key part is the end of the block. It returns
// false, having consumed nothing, when the entry does not fit or does not parse; the copying
// path then reads it or reports the error.
func (s *snapReader) peekEntry() (kp, val, raw []byte, ok bool) {
	b, _ := s.br.Peek(s.br.Buffered()) // what is buffered, without reading
	kp, val, n := parseEntry(b, s.left())
	if n == 0 {
		// Fill the buffer and try again.
		var err error
		b, err = s.br.Peek(int(min(s.left(), snapReadBuffer)))
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !errors.Is(err, io.EOF) {
			s.fail("entry", err)
			return nil, nil, nil, false
		}
		if kp, val, n = parseEntry(b, s.left()); n == 0 {
			return nil, nil, nil, false
		}
	}
	raw = b[:n]
	s.discard(n) // leaves the buffered bytes in place
	return kp, val, raw, true
}

// parseEntry parses an entry (or the end of a block: an empty key part) at the start of b,
// of a file with left bytes left. n is the entry's size, 0 when b does not hold it all or it
// does not parse.
func parseEntry(b []byte, left int64) (kp, val []byte, n int) {
	kl, i := binary.Uvarint(b)
	if i <= 0 || kl > uint64(len(b)-i) || int64(kl) > left {
		return nil, nil, 0
	}
	if kl == 0 {
		return nil, nil, i
	}
	kp, b = b[i:i+int(kl)], b[i+int(kl):]
	vl, j := binary.Uvarint(b)
	if j <= 0 || vl > uint64(len(b)-j) {
		return nil, nil, 0
	}
	n = i + int(kl) + j + int(vl)
	if int64(n) > left {
		return nil, nil, 0
	}
	return kp, b[j : j+int(vl)], n
}

func (s *snapReader) discard(n int) {
	d, _ := s.br.Discard(n) // n bytes are buffered
	s.off += int64(d)
}

// skipTo skips to the file position off, which must not lie behind the current one.
func (s *snapReader) skipTo(off int64, what string) {
	if s.err != nil {
		return
	}
	if off < s.off || off >= s.size {
		s.corrupt("%s at offset %d is out of order or outside the file (at offset %d of %d bytes)", what, off, s.off, s.size)
		return
	}
	n, err := s.br.Discard(int(off - s.off))
	s.off += int64(n)
	if err != nil {
		s.fail(what, err)
	}
}

// finish reads the rest of the file, up to its end: a verifying reader checks the file at
// its end, so a restore must get there before it trusts what it read. It returns the first
// error of the reading.
func (s *snapReader) finish() error {
	if s.err != nil {
		return s.err
	}
	n, err := io.CopyN(io.Discard, s.br, s.left()+1)
	s.off += n
	switch {
	case err == nil: // more bytes than the handle says
		s.corrupt("the file has more than the %d bytes its handle says", s.size)
	case !errors.Is(err, io.EOF):
		s.fail("the file", err)
	case s.off != s.size:
		s.fail("the file", io.EOF)
	}
	return s.err
}

// verifyAfter reads on to the end of the file after its contents failed to parse, and
// returns the underlying reader's error, if any: whether the file fails verification.
func (s *snapReader) verifyAfter() error {
	if s.src {
		return nil // the reader's error is the one reported
	}
	s.err = nil
	if s.finish() != nil && s.src {
		return s.err
	}
	return nil
}

// header reads the header.
func (s *snapReader) header() (*snapshotHeader, error) {
	var buf []byte
	magic := s.bytes(len(snapshotMagic), "magic", &buf)
	if s.err != nil {
		return nil, s.err
	}
	if string(magic) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	version, keyType := s.u8("version"), s.u8("key type")
	if s.err != nil {
		return nil, s.err
	}
	if version != snapshotVersion {
		return nil, fmt.Errorf("%w: unsupported snapshot version %d", ErrCorrupt, version)
	}
	h := &snapshotHeader{keyType: record.Type(keyType)}
	h.maxP = s.int("max parallelism", UpperBoundMaxParallelism)
	h.rng.Start = s.int("range start", UpperBoundMaxParallelism)
	h.rng.End = s.int("range end", UpperBoundMaxParallelism)
	n := s.int("state count", s.left()/2) // a state takes at least 2 bytes
	seen := make(map[string]bool)
	for i := 0; i < n && s.err == nil; i++ {
		name := string(s.bytes(s.length("name length"), "state name", &buf))
		k := stateKind(s.u8("state kind"))
		if s.err != nil {
			break
		}
		if k < kindValue || k > kindReducing || name == "" || seen[name] {
			return nil, fmt.Errorf("%w: bad state %d (%q, kind %d)", ErrCorrupt, i, name, k)
		}
		seen[name] = true
		h.states = append(h.states, stateMeta{name: name, kind: k})
	}
	if s.err != nil {
		return nil, s.err
	}
	if h.maxP == 0 || h.rng.End >= h.maxP || h.rng.Start > h.rng.End {
		return nil, fmt.Errorf("%w: bad key-group range %d..%d of max parallelism %d", ErrCorrupt, h.rng.Start, h.rng.End, h.maxP)
	}
	h.size = int(s.off)
	return h, nil
}

// parseHeader parses the header at the start of data.
func parseHeader(data []byte) (*snapshotHeader, error) {
	return newSnapReader(bytes.NewReader(data), int64(len(data))).header()
}

// entry is one validated entry of a snapshot: its key decodes and belongs to the key group
// of the section. Its slices point into the reader's buffers; they are valid until the
// callback that receives the entry returns.
type entry struct {
	key     record.Value // the decoded key
	keyPart []byte       // the key's encoding and, for map state, the user key: a bbolt key without its key-group prefix
	userKey []byte       // keyPart after the key: a map state's user key
	value   []byte
	raw     []byte // the entry's encoding in the snapshot, when the reader has it at hand
}

// blockFunc is called at the start of each state's block in a key group's section, with an
// upper bound of the block's size in bytes (what is left of the section); it returns the
// function that receives the block's entries, and nil at the end of the block.
type blockFunc func(st stateMeta, kg int, size int64) (func(e *entry) error, error)

// readGroup parses the section of key group kg, which starts at the current position and
// ends before end. It validates every entry (the key decodes and falls in kg) and passes it
// on as block says.
func (s *snapReader) readGroup(h *snapshotHeader, kg int, end int64, block blockFunc) error {
	start := s.off
	if got := s.int("key group", UpperBoundMaxParallelism); s.err == nil && got != kg {
		s.corrupt("section at offset %d is key group %d, want %d", start, got, kg)
	}
	var e entry
	for s.err == nil {
		idx := s.int("state index", int64(len(h.states)))
		if s.err != nil || idx == 0 {
			break
		}
		st := h.states[idx-1]
		fn, err := block(st, kg, max(end-s.off, 0))
		if err != nil {
			return err
		}
		for s.err == nil {
			kp, val, raw, ok := s.peekEntry()
			if !ok { // the entry does not fit the buffer (or is corrupt): copy it
				kp = s.bytes(s.length("key length"), "key", &s.key)
				if s.err == nil && len(kp) > 0 {
					val = s.bytes(s.length("value length"), "value", &s.val)
				}
			}
			if s.err != nil {
				break
			}
			if len(kp) == 0 {
				if err := fn(nil); err != nil {
					return err
				}
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
			e = entry{key: key, keyPart: kp, userKey: kp[n:], value: val, raw: raw}
			if err := fn(&e); err != nil {
				return err
			}
		}
	}
	return s.err
}

// forEachEntry calls fn for every entry of a block of encoded entries (what a hashmap
// backend keeps of a restored state that is not registered yet, as the snapshot had it).
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

// FileOpener opens the file of a handle for reading from its start, as storage.Root.OpenFile
// does: a reader that verifies the file's size and checksum as it reaches the end, and fails
// there (at the latest) when they do not match.
type FileOpener func(*pb.FileHandle) (io.ReadCloser, error)

// restoreHandles reads, from every handle that intersects rng, the key groups of the
// intersection and passes their entries on as block says, in key-group order per handle. A
// handle listed twice is read once. Each file is read once, from its start to its end, and
// closed; an error of the reader (a corrupt file, found at its end) fails the restore after
// entries were passed on.
func restoreHandles(handles []*pb.KeyedStateHandle, open FileOpener, rng KeyGroupRange, keyType record.Type, maxP int, block blockFunc) error {
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
		if err := readHandle(h, hr, lo, hi, open, func(hdr *snapshotHeader) error {
			switch {
			case hdr.maxP != maxP:
				return fmt.Errorf("snapshot has max parallelism %d, backend %d", hdr.maxP, maxP)
			case hdr.keyType != keyType:
				return fmt.Errorf("snapshot has key type %s, backend %s", hdr.keyType, keyType)
			}
			return nil
		}, block); err != nil {
			return fmt.Errorf("restore keyed state from %s: %w", h.File.Path, err)
		}
	}
	return nil
}

// readHandle reads key groups lo..hi of the file of h (holding hr), checking its header with
// check, and reads the file to its end.
func readHandle(h *pb.KeyedStateHandle, hr KeyGroupRange, lo, hi int, open FileOpener, check func(*snapshotHeader) error, block blockFunc) error {
	if len(h.Offsets) != hr.Len() {
		return fmt.Errorf("handle has %d offsets for key groups %d..%d", len(h.Offsets), hr.Start, hr.End)
	}
	f, err := open(h.File)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	s := newSnapReader(f, h.File.GetSize())
	err = readKeyGroups(s, h, hr, lo, hi, check, block)
	if err == nil {
		err = s.finish()
	} else if verr := s.verifyAfter(); verr != nil {
		// The file does not parse, and is not what its handle says either: that is the
		// likelier cause.
		err = fmt.Errorf("%w (it failed to parse before: %w)", verr, err)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return err
}

func readKeyGroups(s *snapReader, h *pb.KeyedStateHandle, hr KeyGroupRange, lo, hi int, check func(*snapshotHeader) error, block blockFunc) error {
	hdr, err := s.header()
	if err != nil {
		return err
	}
	if hdr.rng != hr {
		return fmt.Errorf("snapshot holds key groups %d..%d, handle says %d..%d", hdr.rng.Start, hdr.rng.End, hr.Start, hr.End)
	}
	if err := check(hdr); err != nil {
		return err
	}
	// Every section lies after the header and the one before it, in the file.
	prev := int64(hdr.size)
	for i, off := range h.Offsets {
		if off < prev || off >= s.size {
			return fmt.Errorf("%w: key group %d offset %d out of order or outside the file (%d bytes, header %d)", ErrCorrupt, hr.Start+i, off, s.size, hdr.size)
		}
		prev = off
	}
	for kg := lo; kg <= hi; kg++ {
		s.skipTo(h.Offsets[kg-hr.Start], fmt.Sprintf("key group %d", kg))
		end := s.size
		if i := kg + 1 - hr.Start; i < len(h.Offsets) {
			end = h.Offsets[i]
		}
		if err := s.readGroup(hdr, kg, end, block); err != nil {
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
	bw := snapBuffers.Get().(*bufio.Writer)
	bw.Reset(w)
	return &snapWriter{w: bw}
}

// snapBuffers holds snapWriter buffers between snapshots (a keyed task writes one per
// checkpoint); finish returns them.
var snapBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// errSnapFinished is the error of a write after finish.
var errSnapFinished = errors.New("snapshot write after finish")

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

// finish flushes the output and gives the buffer back; nothing more may be written.
func (sw *snapWriter) finish() error {
	if sw.w == nil {
		return sw.err
	}
	err := sw.err
	if err == nil {
		err = sw.w.Flush()
	}
	sw.w.Reset(nil)
	snapBuffers.Put(sw.w)
	sw.w, sw.err = nil, errSnapFinished
	return err
}

// CountEntries returns how many entries each state holds in a keyed state snapshot (h, with
// open as for KeyedBackend.Restore): one per key of a value, list or reducing state, one per
// user key of a map state. States without entries are left out, so a snapshot of a backend
// whose states are all empty gives an empty map. It reads every key group of the handle and
// validates it as a restore does, streaming the file to its end; it is meant for tests and
// tools that inspect what an operator left in its state (that a window cleaned up its expired
// panes and timers).
func CountEntries(h *pb.KeyedStateHandle, open FileOpener) (map[string]int, error) {
	if h == nil || h.File == nil {
		return nil, fmt.Errorf("count entries: handle without a file")
	}
	hr := KeyGroupRange{Start: int(h.KeyGroupStart), End: int(h.KeyGroupEnd)}
	counts := map[string]int{}
	err := readHandle(h, hr, hr.Start, hr.End, open, func(*snapshotHeader) error { return nil },
		func(st stateMeta, _ int, _ int64) (func(*entry) error, error) {
			return func(e *entry) error {
				if e != nil {
					counts[st.name]++
				}
				return nil
			}, nil
		})
	if err != nil {
		return nil, fmt.Errorf("count entries: %w", err)
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
