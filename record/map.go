package record

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"iter"
	"slices"
)

// A Map value is a map of string keys to string values, such as Kafka record headers. It is
// held in the value's string in one canonical encoding, so equal maps are equal Values (and
// hash, key and compare alike): a uvarint entry count, then each entry in ascending key order
// as a uvarint-length key and a uvarint-length value. The empty map is the zero Value.

// MapEntry is one key and value of a Map value.
type MapEntry struct {
	Key, Value string
}

// MapValue returns the Map value holding m's entries.
func MapValue(m map[string]string) Value {
	entries := make([]MapEntry, 0, len(m))
	for k, v := range m {
		entries = append(entries, MapEntry{k, v})
	}
	return MapOf(entries)
}

// MapOf returns the Map value holding entries. Of entries with the same key, the last wins
// (as with Kafka headers read into a map). entries is sorted in place.
func MapOf(entries []MapEntry) Value {
	if len(entries) == 0 {
		return Value{}
	}
	// A stable sort keeps equal keys in their order, so the last of them is the one kept.
	slices.SortStableFunc(entries, func(a, b MapEntry) int { return cmp.Compare(a.Key, b.Key) })
	kept := entries[:0]
	for _, e := range entries {
		if n := len(kept); n > 0 && kept[n-1].Key == e.Key {
			kept[n-1] = e
			continue
		}
		kept = append(kept, e)
	}
	size := UvarintLen(uint64(len(kept)))
	for _, e := range kept {
		size += UvarintLen(uint64(len(e.Key))) + len(e.Key) + UvarintLen(uint64(len(e.Value))) + len(e.Value)
	}
	buf := make([]byte, 0, size)
	buf = binary.AppendUvarint(buf, uint64(len(kept)))
	for _, e := range kept {
		buf = binary.AppendUvarint(buf, uint64(len(e.Key)))
		buf = append(buf, e.Key...)
		buf = binary.AppendUvarint(buf, uint64(len(e.Value)))
		buf = append(buf, e.Value...)
	}
	return Value{s: string(buf)}
}

// MapLen returns the number of entries of a Map value.
func (v Value) MapLen() int {
	n, _, _ := cutUvarint(v.s)
	return int(n)
}

// MapAll yields the entries of a Map value in ascending key order. The strings share the
// value's memory.
func (v Value) MapAll() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		s := v.s
		n, s, _ := cutUvarint(s)
		for range n {
			var k, val string
			k, s, _ = cutString(s)
			val, s, _ = cutString(s)
			if !yield(k, val) {
				return
			}
		}
	}
}

// Map returns the entries of a Map value as a new Go map.
func (v Value) Map() map[string]string {
	m := make(map[string]string, v.MapLen())
	for k, val := range v.MapAll() {
		m[k] = val
	}
	return m
}

// MapGet returns the value of key in a Map value.
func (v Value) MapGet(key string) (string, bool) {
	for k, val := range v.MapAll() {
		if k == key {
			return val, true
		}
		if k > key {
			break
		}
	}
	return "", false
}

// DecodeMap returns the Map value of a canonical encoding (a copy of b), or an error if b is
// not one.
func DecodeMap(b []byte) (Value, error) {
	s := string(b)
	if err := checkMap(s); err != nil {
		return Value{}, err
	}
	return Value{s: s}, nil
}

// checkMap reports whether s is a canonical Map encoding: well-formed, keys strictly
// ascending, nothing left over.
func checkMap(s string) error {
	if s == "" {
		return nil
	}
	n, rest, ok := cutUvarint(s)
	if !ok || n == 0 {
		return fmt.Errorf("bad map entry count (zero, truncated or not in its shortest encoding)")
	}
	prev := ""
	for i := range n {
		var k string
		k, rest, ok = cutString(rest)
		if ok {
			_, rest, ok = cutString(rest)
		}
		if !ok {
			return fmt.Errorf("map entry %d of %d truncated, or a length not in its shortest encoding", i+1, n)
		}
		if i > 0 && k <= prev {
			return fmt.Errorf("map keys out of order at entry %d", i+1)
		}
		prev = k
	}
	if rest != "" {
		return fmt.Errorf("%d bytes after the map's last entry", len(rest))
	}
	return nil
}

// cutUvarint splits a uvarint off s. It accepts only the shortest encoding of a number (the
// one binary.AppendUvarint writes), so that a map has exactly one encoding.
func cutUvarint(s string) (uint64, string, bool) {
	var x uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 || i > 0 && b == 0 {
				return 0, s, false // overflows, or padded with a trailing zero group
			}
			return x | uint64(b)<<(7*i), s[i+1:], true
		}
		x |= uint64(b&0x7f) << (7 * i)
	}
	return 0, s, false
}

func cutString(s string) (string, string, bool) {
	l, rest, ok := cutUvarint(s)
	if !ok || uint64(len(rest)) < l {
		return "", s, false
	}
	return rest[:l], rest[l:], true
}

// appendMapJSON appends a Map value as a JSON object with its keys in ascending order.
func appendMapJSON(buf []byte, v Value) []byte {
	buf = append(buf, '{')
	first := true
	for k, val := range v.MapAll() {
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = appendJSONString(buf, k)
		buf = append(buf, ':')
		buf = appendJSONString(buf, val)
	}
	return append(buf, '}')
}
