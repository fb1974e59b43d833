package record

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"
)

// fuzzMaxFields bounds the schemas FuzzDecodeRow builds: enough for every type and a few
// repeats, few enough that the fuzzer spends its time on the bytes.
const fuzzMaxFields = 8

// fuzzSchema builds a schema from types, one field per byte (the byte picks the type), as the
// network or a state file would present rows of any schema to DecodeRow.
func fuzzSchema(types []byte) *Schema {
	n := min(len(types), fuzzMaxFields)
	fields := make([]Field, n)
	for i := range n {
		fields[i] = Field{Name: fmt.Sprintf("f%d", i), Type: Type(1 + int(types[i])%int(Map))}
	}
	return MustSchema(fields...)
}

// typesOf is the inverse of fuzzSchema, for seeds.
func typesOf(s *Schema) []byte {
	b := make([]byte, s.Len())
	for i, f := range s.fields {
		b[i] = byte(f.Type - 1)
	}
	return b
}

// FuzzDecodeRow decodes arbitrary bytes as rows of an arbitrary schema, as a task does with
// every network buffer and a restore with every row of a state file. It must never panic, and
// a row it accepts must encode and decode to itself and render as valid JSON.
func FuzzDecodeRow(f *testing.F) {
	ts := time.Date(2026, 11, 29, 12, 0, 0, 123, time.UTC)
	withMap := MustSchema(Field{"k", String}, Field{"headers", Map}, Field{"n", Int64})
	seeds := []struct {
		s    *Schema
		rows []Row
	}{
		{allTypes, []Row{
			{IntValue(-5), FloatValue(2.5), StringValue("héllo"), BoolValue(true), BytesValue([]byte{0, 1, 2}), TimeValue(ts)},
			{IntValue(math.MaxInt64), FloatValue(math.NaN()), StringValue(""), BoolValue(false), BytesValue(nil), TimeValue(time.Unix(0, 0))},
		}},
		{withMap, []Row{
			{StringValue("a"), MapValue(map[string]string{"x": "1", "y": "\x00\xff"}), IntValue(7)},
			{StringValue(""), Value{}, IntValue(0)},
		}},
	}
	for _, sd := range seeds {
		var buf []byte
		for _, r := range sd.rows {
			buf = AppendRow(buf, sd.s, r)
			f.Add(typesOf(sd.s), AppendRow(nil, sd.s, r))
		}
		f.Add(typesOf(sd.s), buf)
	}
	f.Add([]byte{}, []byte{})
	f.Add([]byte{byte(String - 1)}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})

	f.Fuzz(func(t *testing.T, types, data []byte) {
		s := fuzzSchema(types)
		dst := make(Row, s.Len())
		for off := 0; off < len(data); {
			n, err := DecodeRow(data[off:], s, dst)
			if err != nil {
				return
			}
			if n < 0 || n > len(data)-off {
				t.Fatalf("DecodeRow read %d bytes of %d", n, len(data)-off)
			}
			checkDecodedRow(t, s, dst)
			if n == 0 {
				return // a schema without fields reads nothing
			}
			off += n
		}
	})
}

// checkDecodedRow checks that a decoded row encodes back to an equal row and renders.
func checkDecodedRow(t *testing.T, s *Schema, row Row) {
	t.Helper()
	enc := AppendRow(nil, s, row)
	if got := EncodedSize(s, row); got != len(enc) {
		t.Fatalf("EncodedSize = %d, AppendRow wrote %d", got, len(enc))
	}
	again := make(Row, s.Len())
	n, err := DecodeRow(enc, s, again)
	if err != nil || n != len(enc) {
		t.Fatalf("DecodeRow(AppendRow(decoded row)) = %d, %v; want %d, nil", n, err, len(enc))
	}
	for i := range row {
		if again[i] != row[i] {
			t.Fatalf("field %s decodes as %#v, re-encoded as %#v", s.Field(i).Name, row[i], again[i])
		}
		_ = row[i].Format(s.Field(i).Type)
	}
	if js := AppendJSON(nil, s, row); !json.Valid(js) {
		t.Fatalf("AppendJSON of a decoded row is not valid JSON: %q", js)
	}
}

// FuzzDecodeMap decodes arbitrary bytes as a Map value, as a state restore does with a map
// field or value. It must never panic, and a map it accepts must be the canonical encoding of
// its entries: equal maps must be equal Values (they key state and group records).
func FuzzDecodeMap(f *testing.F) {
	f.Add([]byte(MapValue(map[string]string{"b": "2", "a": "1", "": "empty", "ü": "\x00\xff"}).Str()))
	f.Add([]byte(MapValue(map[string]string{"k": "v"}).Str()))
	f.Add([]byte{})
	f.Add([]byte{1, 1, 'k', 0, 0})

	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeMap(b)
		if err != nil {
			return
		}
		var entries []MapEntry
		for k, val := range v.MapAll() {
			entries = append(entries, MapEntry{k, val})
		}
		if len(entries) != v.MapLen() {
			t.Fatalf("MapAll yields %d entries, MapLen says %d", len(entries), v.MapLen())
		}
		if canon := MapOf(entries); canon != v {
			t.Fatalf("DecodeMap accepted %q, but the canonical encoding of its entries is %q", v.Str(), canon.Str())
		}
		for _, e := range entries {
			if got, ok := v.MapGet(e.Key); !ok || got != e.Value {
				t.Fatalf("MapGet(%q) = %q, %v; want %q", e.Key, got, ok, e.Value)
			}
		}
		if js := appendMapJSON(nil, v); !json.Valid(js) {
			t.Fatalf("map JSON %q is not valid", js)
		}
	})
}
