package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// ErrCorrupt says an encoded row is truncated or malformed.
var ErrCorrupt = errors.New("record: corrupt encoded row")

// AppendRow appends the binary encoding of row to buf. Fixed-width fields take 8 bytes (bool 1),
// strings and bytes a uvarint length and the bytes. The encoding has no per-row header: the
// reader knows the schema.
func AppendRow(buf []byte, s *Schema, row Row) []byte {
	for i, f := range s.fields {
		v := row[i]
		switch f.Type {
		case Int64, Float64, Timestamp:
			buf = binary.LittleEndian.AppendUint64(buf, v.n)
		case Bool:
			buf = append(buf, byte(v.n&1))
		case String, Bytes, Map:
			buf = binary.AppendUvarint(buf, uint64(len(v.s)))
			buf = append(buf, v.s...)
		}
	}
	return buf
}

// EncodedSize returns the exact length AppendRow would add for row.
func EncodedSize(s *Schema, row Row) int {
	if s.fixed >= 0 {
		return s.fixed
	}
	n := 0
	for i, f := range s.fields {
		switch f.Type {
		case Int64, Float64, Timestamp:
			n += 8
		case Bool:
			n++
		case String, Bytes, Map:
			l := len(row[i].s)
			n += UvarintLen(uint64(l)) + l
		}
	}
	return n
}

// UvarintLen is the length of x encoded with binary.AppendUvarint.
func UvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// DecodeRow decodes one row from the front of buf into dst (len(dst) == s.Len()) and returns
// the number of bytes read. Strings are not copied: they point into buf, which must therefore
// never be modified afterwards; receivers that keep a string must clone it.
func DecodeRow(buf []byte, s *Schema, dst Row) (int, error) {
	off := 0
	for i, f := range s.fields {
		switch f.Type {
		case Int64, Float64, Timestamp:
			if len(buf)-off < 8 {
				return 0, fmt.Errorf("%w: field %q truncated", ErrCorrupt, f.Name)
			}
			dst[i] = Value{n: binary.LittleEndian.Uint64(buf[off:])}
			off += 8
		case Bool:
			if off >= len(buf) {
				return 0, fmt.Errorf("%w: field %q truncated", ErrCorrupt, f.Name)
			}
			dst[i] = Value{n: uint64(buf[off] & 1)}
			off++
		case String, Bytes, Map:
			l, k := binary.Uvarint(buf[off:])
			if k <= 0 || uint64(len(buf)-off-k) < l {
				return 0, fmt.Errorf("%w: field %q truncated", ErrCorrupt, f.Name)
			}
			off += k
			if l == 0 {
				dst[i] = Value{}
			} else {
				dst[i] = Value{s: unsafe.String(&buf[off], int(l))}
			}
			if f.Type == Map {
				if err := checkMap(dst[i].s); err != nil {
					return 0, fmt.Errorf("%w: field %q: %w", ErrCorrupt, f.Name, err)
				}
			}
			off += int(l)
		}
	}
	return off, nil
}
