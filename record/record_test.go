package record

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"
)

var allTypes = MustSchema(
	Field{"i", Int64}, Field{"f", Float64}, Field{"s", String},
	Field{"b", Bool}, Field{"raw", Bytes}, Field{"ts", Timestamp},
)

func TestRowRoundTrip(t *testing.T) {
	ts := time.Date(2026, 11, 29, 12, 0, 0, 123, time.UTC)
	rows := []Row{
		{IntValue(-5), FloatValue(2.5), StringValue("héllo"), BoolValue(true), BytesValue([]byte{0, 1, 2}), TimeValue(ts)},
		{IntValue(math.MaxInt64), FloatValue(math.Inf(-1)), StringValue(""), BoolValue(false), BytesValue(nil), TimeValue(time.Unix(0, 0))},
	}
	var buf []byte
	for _, r := range rows {
		before := len(buf)
		buf = AppendRow(buf, allTypes, r)
		if got, want := len(buf)-before, EncodedSize(allTypes, r); got != want {
			t.Errorf("EncodedSize = %d, AppendRow wrote %d", want, got)
		}
	}
	dst := make(Row, allTypes.Len())
	off := 0
	for i, want := range rows {
		n, err := DecodeRow(buf[off:], allTypes, dst)
		if err != nil {
			t.Fatalf("DecodeRow(row %d): %v", i, err)
		}
		off += n
		for j := range want {
			if dst[j] != want[j] {
				t.Errorf("row %d field %s = %#v, want %#v", i, allTypes.Field(j).Name, dst[j], want[j])
			}
		}
	}
	if off != len(buf) {
		t.Errorf("decoded %d bytes, want %d", off, len(buf))
	}
}

func TestDecodeTruncated(t *testing.T) {
	buf := AppendRow(nil, allTypes, Row{IntValue(1), FloatValue(1), StringValue("abcdef"), BoolValue(true), BytesValue([]byte("x")), TimeValue(time.Unix(1, 0))})
	dst := make(Row, allTypes.Len())
	for cut := range len(buf) {
		if _, err := DecodeRow(buf[:cut], allTypes, dst); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeRow(first %d of %d bytes) = %v, want ErrCorrupt", cut, len(buf), err)
		}
	}
}

func TestAppendJSONIsValidJSON(t *testing.T) {
	row := Row{IntValue(42), FloatValue(math.NaN()), StringValue("q\"uote\\ \n\x01 \xff ünï"), BoolValue(true), BytesValue([]byte("hi")), TimeValue(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	out := AppendJSON(nil, allTypes, row)
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("AppendJSON produced invalid JSON %s: %v", out, err)
	}
	want := map[string]any{"i": 42.0, "f": nil, "s": "q\"uote\\ \n\x01 \ufffd ünï", "b": true, "raw": "aGk=", "ts": "2026-01-02T03:04:05Z"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("field %s = %#v, want %#v", k, m[k], v)
		}
	}
}

func TestNewSchemaRejects(t *testing.T) {
	for _, fields := range [][]Field{{{"a", Int64}, {"a", String}}, {{"", Int64}}, {{"a", Invalid}}} {
		if _, err := NewSchema(fields...); err == nil {
			t.Errorf("NewSchema(%v) succeeded, want error", fields)
		}
	}
}

func BenchmarkAppendDecodeInt(b *testing.B) {
	s := MustSchema(Field{"value", Int64})
	row := Row{IntValue(12345)}
	dst := make(Row, 1)
	buf := make([]byte, 0, 8)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		row[0] = IntValue(int64(i))
		buf = AppendRow(buf[:0], s, row)
		if _, err := DecodeRow(buf, s, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// EncodedSize of a schema without variable-length fields is a constant computed once; it must
// still be what AppendRow writes.
func TestEncodedSizeFixedAndVariable(t *testing.T) {
	for _, fields := range [][]Field{
		nil,
		{{Name: "a", Type: Int64}},
		{{Name: "a", Type: Int64}, {Name: "b", Type: Bool}, {Name: "c", Type: Float64}, {Name: "d", Type: Timestamp}},
		{{Name: "a", Type: Int64}, {Name: "s", Type: String}},
		{{Name: "b", Type: Bytes}, {Name: "a", Type: Bool}},
	} {
		s := MustSchema(fields...)
		row := make(Row, s.Len())
		for i, f := range fields {
			switch f.Type {
			case String, Bytes:
				row[i] = StringValue("some bytes")
			default:
				row[i] = IntValue(int64(i) - 3)
			}
		}
		if got, want := EncodedSize(s, row), len(AppendRow(nil, s, row)); got != want {
			t.Errorf("EncodedSize(%v) = %d, AppendRow wrote %d", s, got, want)
		}
	}
}
