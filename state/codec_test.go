package state

import (
	"errors"
	"math"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

func TestCodecsRoundTrip(t *testing.T) {
	schema := record.MustSchema(record.Field{Name: "n", Type: record.Int64}, record.Field{Name: "s", Type: record.String},
		record.Field{Name: "b", Type: record.Bool})
	row := record.Row{record.IntValue(-3), record.StringValue("héllo"), record.BoolValue(true)}
	rc := RowCodec(schema)
	enc := rc.Append(nil, row)
	got, err := rc.Decode(enc)
	must(t, err)
	clear(enc)
	if got[0].Int() != -3 || got[1].Str() != "héllo" || !got[2].Bool() {
		t.Errorf("RowCodec round trip = %v, want %v (and not aliasing the input)", got, row)
	}
	if _, err := rc.Decode(append(rc.Append(nil, row), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("RowCodec.Decode(trailing byte) = %v, want ErrCorrupt", err)
	}
	if _, err := rc.Decode([]byte{1, 2}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("RowCodec.Decode(truncated) = %v, want ErrCorrupt", err)
	}

	if v, err := (Int64Codec{}).Decode(Int64Codec{}.Append(nil, math.MinInt64)); v != math.MinInt64 || err != nil {
		t.Errorf("Int64Codec round trip = %d, %v", v, err)
	}
	if v, err := (Float64Codec{}).Decode(Float64Codec{}.Append(nil, -0.25)); v != -0.25 || err != nil {
		t.Errorf("Float64Codec round trip = %v, %v", v, err)
	}
	for _, bad := range [][]byte{nil, make([]byte, 7), make([]byte, 9)} {
		if _, err := (Int64Codec{}).Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Int64Codec.Decode(%d bytes) = %v, want ErrCorrupt", len(bad), err)
		}
		if _, err := (Float64Codec{}).Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Float64Codec.Decode(%d bytes) = %v, want ErrCorrupt", len(bad), err)
		}
	}
	src := []byte("abc")
	bs, _ := BytesCodec{}.Decode(src)
	src[0] = 'x'
	if string(bs) != "abc" {
		t.Errorf("BytesCodec.Decode aliases its input")
	}
}

var typedValues = []struct {
	t  record.Type
	vs []record.Value
}{
	{record.Int64, []record.Value{record.IntValue(0), record.IntValue(-1), record.IntValue(math.MaxInt64)}},
	{record.Float64, []record.Value{record.FloatValue(1.5), record.FloatValue(math.Inf(-1)), record.FloatValue(0)}},
	{record.String, []record.Value{record.StringValue(""), record.StringValue("a"), record.StringValue(string(make([]byte, 300)))}},
	{record.Bool, []record.Value{record.BoolValue(true), record.BoolValue(false)}},
	{record.Bytes, []record.Value{record.BytesValue([]byte{0, 1, 2}), record.BytesValue(nil)}},
	{record.Timestamp, []record.Value{record.TimeValue(time.Unix(1700000000, 5)), record.TimeValue(time.Unix(0, 0))}},
}

func TestValueCodec(t *testing.T) {
	for _, tc := range typedValues {
		c := ValueCodec(tc.t)
		for _, v := range tc.vs {
			got, err := c.Decode(c.Append(nil, v))
			if err != nil || got != v {
				t.Errorf("ValueCodec(%s) round trip of %s = %v, %v", tc.t, v.Format(tc.t), got, err)
			}
		}
	}
	if _, err := ValueCodec(record.Bool).Decode([]byte{2}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ValueCodec(bool).Decode(2) = %v, want ErrCorrupt", err)
	}
	m := ValueCodec(record.Map)
	for _, v := range []record.Value{{}, record.MapValue(map[string]string{"a": "1", "b": ""})} {
		if got, err := m.Decode(m.Append(nil, v)); err != nil || got != v {
			t.Errorf("ValueCodec(map) round trip of %s = %v, %v", v.Format(record.Map), got, err)
		}
	}
	if _, err := m.Decode([]byte("\x02\x01b\x00\x01a\x00")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ValueCodec(map).Decode(keys out of order) = %v, want ErrCorrupt", err)
	}
	if _, err := ValueCodec(record.Invalid).Decode(nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ValueCodec(invalid).Decode = %v, want ErrCorrupt", err)
	}
}

// Every key type survives a snapshot of one backend kind restored into the other.
func TestKeyTypesRoundTrip(t *testing.T) {
	for _, tc := range typedValues {
		for _, src := range kinds {
			dst := kinds[0]
			if src == dst {
				dst = kinds[1]
			}
			t.Run(tc.t.String()+"/"+src, func(t *testing.T) {
				b := newBackend(t, src, tc.t, fullRange, 0)
				vs, err := NewValueState(b, "v", ValueCodec(tc.t))
				must(t, err)
				for _, k := range tc.vs {
					b.SetCurrentKey(k)
					must(t, vs.Update(k))
				}
				fs := files{}
				h := fs.snapshot(t, b, "chk")
				r := newBackend(t, dst, tc.t, fullRange, 0)
				must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
				rv, err := NewValueState(r, "v", ValueCodec(tc.t))
				must(t, err)
				for _, k := range tc.vs {
					r.SetCurrentKey(k)
					if got, ok, err := rv.Value(); got != k || !ok || err != nil {
						t.Errorf("restored Value() of key %s = %v, %v, %v", k.Format(tc.t), got, ok, err)
					}
				}
			})
		}
	}
}

// MapState.Range may use other states, even when that fills the bbolt cache: the flush waits
// for the iteration to end.
func TestMapRangeWhileWritingOtherState(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, fullRange, 3)
			ms, err := NewMapState(b, "m", Int64Codec{}, StringCodec{})
			must(t, err)
			vs, err := NewValueState(b, "v", Int64Codec{})
			must(t, err)
			set(b, 1)
			for i := range int64(10) {
				must(t, ms.Put(i, "x"))
			}
			must(t, ms.Remove(4))
			set(b, 2) // forces a flush of the map entries
			must(t, vs.Update(0))
			set(b, 1)
			must(t, ms.Put(20, "y"))
			seen := map[int64]string{}
			must(t, ms.Range(func(k int64, v string) bool {
				seen[k] = v
				set(b, 100+k)
				if err := vs.Update(k); err != nil {
					t.Errorf("Update inside Range = %v", err)
				}
				set(b, 1)
				return true
			}))
			if len(seen) != 10 || seen[20] != "y" || seen[4] != "" {
				t.Errorf("Range saw %v, want 0..9 without 4, and 20", seen)
			}
			for k := range seen {
				set(b, 100+k)
				if v, ok, err := vs.Value(); v != k || !ok || err != nil {
					t.Errorf("Value(%d) = %d, %v, %v, want %d", 100+k, v, ok, err, k)
				}
			}
			set(b, 1)
			n := 0
			must(t, ms.Range(func(int64, string) bool { n++; return n < 3 }))
			if n != 3 {
				t.Errorf("Range after returning false called fn %d times, want 3", n)
			}
		})
	}
}
