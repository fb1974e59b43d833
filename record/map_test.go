package record

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"
)

func TestMapValueIsCanonical(t *testing.T) {
	a := MapValue(map[string]string{"b": "2", "a": "1", "": "empty", "ü": "\x00\xff"})
	b := MapOf([]MapEntry{{"ü", "\x00\xff"}, {"a", "1"}, {"", "empty"}, {"b", "2"}})
	if a != b {
		t.Fatalf("the same entries in another order encode differently: %q vs %q", a.Str(), b.Str())
	}
	if got := a.MapLen(); got != 4 {
		t.Errorf("MapLen = %d, want 4", got)
	}
	want := map[string]string{"b": "2", "a": "1", "": "empty", "ü": "\x00\xff"}
	if got := a.Map(); !maps.Equal(got, want) {
		t.Errorf("Map() = %v, want %v", got, want)
	}
	var keys []string
	for k := range a.MapAll() {
		keys = append(keys, k)
	}
	if len(keys) != 4 || keys[0] != "" || keys[1] != "a" || keys[2] != "b" || keys[3] != "ü" {
		t.Errorf("MapAll keys %q, want ascending", keys)
	}
	if v, ok := a.MapGet("b"); !ok || v != "2" {
		t.Errorf("MapGet(b) = %q, %v", v, ok)
	}
	if _, ok := a.MapGet("c"); ok {
		t.Error("MapGet(c) found a missing key")
	}
	if (MapValue(nil) != Value{}) || MapOf(nil).MapLen() != 0 {
		t.Error("the empty map is not the zero Value")
	}
	// Repeated keys: the last one wins, as when Kafka headers are read into a map.
	if v, _ := MapOf([]MapEntry{{"k", "1"}, {"x", "x"}, {"k", "2"}}).MapGet("k"); v != "2" {
		t.Errorf("repeated key kept %q, want the last value 2", v)
	}
}

func TestMapRowRoundTripAndJSON(t *testing.T) {
	s := MustSchema(Field{"h", Map}, Field{"n", Int64})
	row := Row{MapValue(map[string]string{"trace": "abc", "q\"": "line\n"}), IntValue(7)}
	buf := AppendRow(nil, s, row)
	if len(buf) != EncodedSize(s, row) {
		t.Errorf("EncodedSize = %d, AppendRow wrote %d", EncodedSize(s, row), len(buf))
	}
	dst := make(Row, 2)
	if _, err := DecodeRow(buf, s, dst); err != nil || dst[0] != row[0] || dst[1] != row[1] {
		t.Fatalf("DecodeRow = %v, %v; want %v", dst, err, row)
	}
	var got struct {
		H map[string]string
		N int64
	}
	out := AppendJSON(nil, s, row)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("AppendJSON wrote invalid JSON %s: %v", out, err)
	}
	if !maps.Equal(got.H, row[0].Map()) || got.N != 7 {
		t.Errorf("JSON %s decodes to %+v", out, got)
	}
	if f := row[0].Format(Map); f != `{"q\"":"line\n","trace":"abc"}` {
		t.Errorf("Format = %s", f)
	}
	if typ, err := ParseType("map"); err != nil || typ != Map {
		t.Errorf("ParseType(map) = %v, %v", typ, err)
	}
	if TypeFromProto(Map.Proto()) != Map {
		t.Error("the map type does not survive its wire form")
	}
}

// A map that is not in its canonical encoding is corrupt input, never a panic.
func TestDecodeCorruptMap(t *testing.T) {
	s := MustSchema(Field{"h", Map})
	good := MapValue(map[string]string{"a": "1", "b": "2"}).Str()
	bad := map[string]string{
		"truncated entry":   good[:len(good)-1],
		"keys out of order": "\x02\x01b\x012\x01a\x011",
		"repeated key":      "\x02\x01a\x011\x01a\x012",
		"trailing bytes":    good + "x",
		"zero count":        "\x00",
		"huge count":        "\xff\xff\xff\xff\x0f",
	}
	for name, enc := range bad {
		buf := AppendRow(nil, s, Row{{s: enc}})
		if _, err := DecodeRow(buf, s, make(Row, 1)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeRow = %v, want ErrCorrupt", name, err)
		}
	}
}
