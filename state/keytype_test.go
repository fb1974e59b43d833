package state

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite state/testdata/keytypes-*.snap")

// keyTypeCases are keys of every key type, each set pairwise distinct as record values: the
// hashmap backend keys its maps by the value's word or string by type, and must tell apart
// (and conflate) exactly the keys that record.Value equality does.
var keyTypeCases = []struct {
	t    record.Type
	keys []record.Value
}{
	{record.Int64, []record.Value{record.IntValue(0), record.IntValue(1), record.IntValue(-1), record.IntValue(math.MaxInt64),
		record.IntValue(math.MinInt64), record.IntValue(1 << 32), record.IntValue(123456789012345)}},
	{record.Float64, []record.Value{record.FloatValue(0), record.FloatValue(math.Copysign(0, -1)), record.FloatValue(1.5),
		record.FloatValue(math.NaN()), record.FloatValue(math.Inf(-1)), record.FloatValue(-2.25e300)}},
	{record.Bool, []record.Value{record.BoolValue(false), record.BoolValue(true)}},
	{record.Timestamp, []record.Value{record.TimeValue(time.Unix(0, 0)), record.TimeValue(time.Unix(1700000000, 5)),
		record.TimeValue(time.Unix(-5, 0))}},
	{record.String, []record.Value{record.StringValue(""), record.StringValue("a"), record.StringValue("héllo"),
		record.StringValue("😀x"), record.StringValue(strings.Repeat("k", 300)), record.StringValue("a\x00")}},
	{record.Bytes, []record.Value{record.BytesValue(nil), record.BytesValue([]byte{0}), record.BytesValue([]byte{0, 0xff}),
		record.BytesValue([]byte("a"))}},
}

// keyTypeStates are the states the key-type tests fill: one of each kind.
type keyTypeStates struct {
	value *ValueState[int64]
	list  *ListState[string]
	m     *MapState[string, int64]
}

func registerKeyTypeStates(t testing.TB, b KeyedBackend) keyTypeStates {
	t.Helper()
	var s keyTypeStates
	var err error
	s.value, err = NewValueState(b, "value", Int64Codec{})
	must(t, err)
	s.list, err = NewListState(b, "list", StringCodec{})
	must(t, err)
	s.m, err = NewMapState(b, "map", StringCodec{}, Int64Codec{})
	must(t, err)
	return s
}

// fillKeyTypeStates gives key j of keys value j, list [j, j+1] and map {a: j, b: -j}. Each
// key's memory is reused afterwards, as a network buffer's would be.
func fillKeyTypeStates(t testing.TB, b KeyedBackend, s keyTypeStates, typ record.Type, keys []record.Value) {
	t.Helper()
	schema := record.MustSchema(record.Field{Name: "k", Type: typ})
	row := make(record.Row, 1)
	for j, k := range keys {
		buf := record.AppendRow(nil, schema, record.Row{k})
		if _, err := record.DecodeRow(buf, schema, row); err != nil {
			t.Fatal(err)
		}
		b.SetCurrentKey(row[0])
		must(t, s.value.Update(int64(j)))
		must(t, s.list.Add(fmt.Sprint(j)))
		must(t, s.list.Add(fmt.Sprint(j+1)))
		must(t, s.m.Put("a", int64(j)))
		must(t, s.m.Put("b", int64(-j)))
		clear(buf)
	}
}

// checkKeyTypeStates checks what fillKeyTypeStates wrote for the keys in b's key groups, and
// that the states hold no other keys.
func checkKeyTypeStates(t testing.TB, b KeyedBackend, s keyTypeStates, typ record.Type, keys []record.Value) {
	t.Helper()
	var want []string
	for j, k := range keys {
		if !b.KeyGroupRange().Contains(KeyGroup(k, typ, testMaxP)) {
			continue
		}
		want = append(want, k.Format(typ))
		b.SetCurrentKey(k)
		if v, ok, err := s.value.Value(); v != int64(j) || !ok || err != nil {
			t.Errorf("key %s: value = %d, %v, %v, want %d", k.Format(typ), v, ok, err, j)
		}
		if l, err := s.list.Get(); !slices.Equal(l, []string{fmt.Sprint(j), fmt.Sprint(j + 1)}) || err != nil {
			t.Errorf("key %s: list = %q, %v, want [%d %d]", k.Format(typ), l, err, j, j+1)
		}
		for uk, wv := range map[string]int64{"a": int64(j), "b": int64(-j)} {
			if v, ok, err := s.m.Get(uk); v != wv || !ok || err != nil {
				t.Errorf("key %s: map[%s] = %d, %v, %v, want %d", k.Format(typ), uk, v, ok, err, wv)
			}
		}
	}
	slices.Sort(want)
	for name, keysOf := range map[string]func() ([]record.Value, error){"value": s.value.Keys, "map": s.m.Keys} {
		ks, err := keysOf()
		must(t, err)
		var got []string
		for _, k := range ks {
			got = append(got, k.Format(typ))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s.Keys() = %q, want %q", name, got, want)
		}
	}
}

// TestKeyTypesAllStatesRescaled fills the states with keys of every type, then restores snapshots of
// them into either backend, at the same parallelism and rescaled to two.
func TestKeyTypesAllStatesRescaled(t *testing.T) {
	for _, tc := range keyTypeCases {
		for _, src := range kinds {
			t.Run(fmt.Sprintf("%s/%s", tc.t, src), func(t *testing.T) {
				b := newBackend(t, src, tc.t, fullRange, 2)
				s := registerKeyTypeStates(t, b)
				fillKeyTypeStates(t, b, s, tc.t, tc.keys)
				checkKeyTypeStates(t, b, s, tc.t, tc.keys)
				fs := files{}
				h := fs.snapshot(t, b, "chk-1/op-0")
				for _, dst := range kinds {
					for i := range 2 {
						r := newBackend(t, dst, tc.t, RangeForOperator(i, testMaxP, 2), 2)
						must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
						checkKeyTypeStates(t, r, registerKeyTypeStates(t, r), tc.t, tc.keys)
					}
				}
			})
		}
	}
}

// TestKeyTypesGolden restores snapshots written by the hashmap backend before its maps were
// typed by key kind: testdata/keytypes-<type>.snap, with its key groups' offsets in
// keytypes-<type>.offsets (regenerate with -update-golden only when the format changes on
// purpose).
func TestKeyTypesGolden(t *testing.T) {
	for _, tc := range keyTypeCases {
		path := filepath.Join("testdata", fmt.Sprintf("keytypes-%s.snap", tc.t))
		offsetsPath := strings.TrimSuffix(path, ".snap") + ".offsets"
		if *updateGolden {
			b := newBackend(t, BackendHashMap, tc.t, fullRange, 0)
			fillKeyTypeStates(t, b, registerKeyTypeStates(t, b), tc.t, tc.keys)
			fs := files{}
			h := fs.snapshot(t, b, path)
			must(t, os.WriteFile(path, fs[path], 0o644))
			must(t, os.WriteFile(offsetsPath, []byte(strings.Trim(fmt.Sprint(h.Offsets), "[]")+"\n"), 0o644))
		}
		data, err := os.ReadFile(path)
		must(t, err)
		text, err := os.ReadFile(offsetsPath)
		must(t, err)
		var offsets []int64
		for _, f := range strings.Fields(string(text)) {
			o, err := strconv.ParseInt(f, 10, 64)
			must(t, err)
			offsets = append(offsets, o)
		}
		h := &pb.KeyedStateHandle{File: &pb.FileHandle{Path: path, Size: int64(len(data))}, KeyGroupStart: 0, KeyGroupEnd: testMaxP - 1, Offsets: offsets}
		for _, kind := range kinds {
			for i := range 2 {
				t.Run(fmt.Sprintf("%s/%s/%d-of-2", tc.t, kind, i), func(t *testing.T) {
					r := newBackend(t, kind, tc.t, RangeForOperator(i, testMaxP, 2), 2)
					must(t, r.Restore([]*pb.KeyedStateHandle{h}, openBytes(data)))
					checkKeyTypeStates(t, r, registerKeyTypeStates(t, r), tc.t, tc.keys)
				})
			}
		}
	}
}

// The hashmap backend finds a value state's entry without the key group: a restored entry of
// key 0 must not answer for a backend that has no current key yet, and a key outside the range
// is still an error, before and after entries exist.
func TestValueStateLookupWithoutKeyGroup(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			src := newBackend(t, kind, record.Int64, fullRange, 0)
			vs, err := NewValueState(src, "v", Int64Codec{})
			must(t, err)
			for k := range int64(50) {
				set(src, k)
				must(t, vs.Update(k+100))
			}
			fs := files{}
			h := fs.snapshot(t, src, "chk")
			rng := RangeForOperator(0, testMaxP, 2)
			r := newBackend(t, kind, record.Int64, rng, 0)
			must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
			rv, err := NewValueState(r, "v", Int64Codec{})
			must(t, err)
			if _, _, err := rv.Value(); !errors.Is(err, ErrNoCurrentKey) {
				t.Errorf("Value() without a current key = %v, want ErrNoCurrentKey", err)
			}
			if err := rv.Update(1); !errors.Is(err, ErrNoCurrentKey) {
				t.Errorf("Update() without a current key = %v, want ErrNoCurrentKey", err)
			}
			for k := range int64(50) {
				set(r, k)
				v, ok, err := rv.Value()
				if rng.Contains(KeyGroup(record.IntValue(k), record.Int64, testMaxP)) {
					if v != k+100 || !ok || err != nil {
						t.Errorf("key %d: Value() = %d, %v, %v, want %d", k, v, ok, err, k+100)
					}
					must(t, rv.Update(v+1))
					continue
				}
				if !errors.Is(err, ErrKeyOutOfRange) {
					t.Errorf("key %d (not in range): Value() = %d, %v, %v, want ErrKeyOutOfRange", k, v, ok, err)
				}
				if err := rv.Update(1); !errors.Is(err, ErrKeyOutOfRange) {
					t.Errorf("key %d (not in range): Update() = %v, want ErrKeyOutOfRange", k, err)
				}
			}
		})
	}
}
