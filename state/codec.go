package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/goflink/goflink/record"
)

// Codec encodes the values of a state. The container (a snapshot entry, a bbolt value) records
// the length, so an encoding need not be self-delimiting.
//
// Append appends the encoding of v to b. Decode decodes a value that Append produced and must
// consume all of b; the result must not retain b (decoded strings and slices are copies),
// because b may point into a memory-mapped file or a reused buffer. Codecs are stateless and
// safe for concurrent use: a snapshot may encode on another goroutine.
type Codec[T any] interface {
	Append(b []byte, v T) []byte
	Decode(b []byte) (T, error)
}

// Int64Codec encodes an int64 as 8 bytes, little endian.
type Int64Codec struct{}

// Append implements Codec.
func (Int64Codec) Append(b []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(b, uint64(v))
}

// Decode implements Codec.
func (Int64Codec) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: int64 of %d bytes", ErrCorrupt, len(b))
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}

// Float64Codec encodes a float64 as its IEEE 754 bits, 8 bytes little endian.
type Float64Codec struct{}

// Append implements Codec.
func (Float64Codec) Append(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

// Decode implements Codec.
func (Float64Codec) Decode(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: float64 of %d bytes", ErrCorrupt, len(b))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
}

// StringCodec encodes a string as its bytes.
type StringCodec struct{}

// Append implements Codec.
func (StringCodec) Append(b []byte, v string) []byte { return append(b, v...) }

// Decode implements Codec; the string is a copy.
func (StringCodec) Decode(b []byte) (string, error) { return string(b), nil }

// BytesCodec encodes a byte slice as itself.
type BytesCodec struct{}

// Append implements Codec.
func (BytesCodec) Append(b []byte, v []byte) []byte { return append(b, v...) }

// Decode implements Codec; the slice is a copy.
func (BytesCodec) Decode(b []byte) ([]byte, error) { return bytes.Clone(b), nil }

// RowCodec returns a codec for rows of schema s, using record.AppendRow. Decoded rows own
// their memory (strings are cloned).
func RowCodec(s *record.Schema) Codec[record.Row] { return rowCodec{s: s} }

type rowCodec struct{ s *record.Schema }

func (c rowCodec) Append(b []byte, v record.Row) []byte { return record.AppendRow(b, c.s, v) }

func (c rowCodec) Decode(b []byte) (record.Row, error) {
	row := make(record.Row, c.s.Len())
	n, err := record.DecodeRow(b, c.s, row)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if n != len(b) {
		return nil, fmt.Errorf("%w: row has %d trailing bytes", ErrCorrupt, len(b)-n)
	}
	for i, v := range row {
		row[i] = v.Clone()
	}
	return row, nil
}

// ValueCodec returns a codec for single values of type t: 8 bytes little endian for int64,
// float64 and timestamp, 1 byte for bool, the bytes themselves for string, bytes and map. Decoded
// values own their memory. For an invalid type, Append writes nothing and Decode fails.
func ValueCodec(t record.Type) Codec[record.Value] { return valueCodec{t: t} }

type valueCodec struct{ t record.Type }

func (c valueCodec) Append(b []byte, v record.Value) []byte {
	switch c.t {
	case record.Int64, record.Float64, record.Timestamp:
		return binary.LittleEndian.AppendUint64(b, uint64(v.Int()))
	case record.Bool:
		if v.Bool() {
			return append(b, 1)
		}
		return append(b, 0)
	case record.String, record.Bytes, record.Map:
		return append(b, v.Str()...)
	}
	return b
}

func (c valueCodec) Decode(b []byte) (record.Value, error) {
	switch c.t {
	case record.Int64, record.Float64, record.Timestamp:
		if len(b) != 8 {
			return record.Value{}, fmt.Errorf("%w: %s of %d bytes", ErrCorrupt, c.t, len(b))
		}
		return record.IntValue(int64(binary.LittleEndian.Uint64(b))), nil
	case record.Bool:
		if len(b) != 1 || b[0] > 1 {
			return record.Value{}, fmt.Errorf("%w: bad bool encoding", ErrCorrupt)
		}
		return record.BoolValue(b[0] == 1), nil
	case record.String:
		return record.StringValue(string(b)), nil
	case record.Bytes:
		return record.BytesValue(b), nil
	case record.Map:
		v, err := record.DecodeMap(b)
		if err != nil {
			return record.Value{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return v, nil
	}
	return record.Value{}, fmt.Errorf("%w: value of invalid type %s", ErrCorrupt, c.t)
}

// appendKey appends the prefix-free encoding of a key of type t: fixed-width types take
// their 8-byte word big endian (bool 1 byte), strings and bytes a uvarint length and the
// bytes. Being prefix-free, a map state's user key can follow it directly.
func appendKey(b []byte, v record.Value, t record.Type) []byte {
	switch t {
	case record.Int64, record.Float64, record.Timestamp:
		return binary.BigEndian.AppendUint64(b, uint64(v.Int()))
	case record.Bool:
		if v.Bool() {
			return append(b, 1)
		}
		return append(b, 0)
	default:
		s := v.Str()
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
}

// decodeKey decodes a key that appendKey wrote at the front of b and returns the number of
// bytes read; it accepts only appendKey's encoding. The key owns its memory.
func decodeKey(b []byte, t record.Type) (record.Value, int, error) {
	switch t {
	case record.Int64, record.Float64, record.Timestamp:
		if len(b) < 8 {
			return record.Value{}, 0, fmt.Errorf("%w: key truncated", ErrCorrupt)
		}
		return record.IntValue(int64(binary.BigEndian.Uint64(b))), 8, nil
	case record.Bool:
		if len(b) < 1 || b[0] > 1 {
			return record.Value{}, 0, fmt.Errorf("%w: bad bool key", ErrCorrupt)
		}
		return record.BoolValue(b[0] == 1), 1, nil
	case record.String, record.Bytes:
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return record.Value{}, 0, fmt.Errorf("%w: key truncated", ErrCorrupt)
		}
		// The bbolt backend stores and looks keys up by their bytes: one key, one encoding.
		if n != record.UvarintLen(l) {
			return record.Value{}, 0, fmt.Errorf("%w: key length %d not in its shortest encoding", ErrCorrupt, l)
		}
		return record.StringValue(string(b[n : n+int(l)])), n + int(l), nil
	}
	return record.Value{}, 0, fmt.Errorf("%w: key of invalid type %s", ErrCorrupt, t)
}

// appendElem appends one length-prefixed element (list state values are a sequence of them).
func appendElem(b, elem []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(elem)))
	return append(b, elem...)
}

// nextElem splits the first length-prefixed element off b.
func nextElem(b []byte) (elem, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, nil, fmt.Errorf("%w: element truncated", ErrCorrupt)
	}
	return b[n : n+int(l)], b[n+int(l):], nil
}
