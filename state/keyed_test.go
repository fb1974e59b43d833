package state

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// bundle is one state of each kind, registered under fixed names.
type bundle struct {
	v *ValueState[int64]
	l *ListState[string]
	m *MapState[string, int64]
	r *ReducingState[int64]
}

func register(t testing.TB, b KeyedBackend) bundle {
	t.Helper()
	v, err := NewValueState(b, "count", Int64Codec{})
	must(t, err)
	l, err := NewListState(b, "names", StringCodec{})
	must(t, err)
	m, err := NewMapState(b, "totals", StringCodec{}, Int64Codec{})
	must(t, err)
	r, err := NewReducingState(b, "sum", Int64Codec{}, func(acc, v int64) int64 { return acc + v })
	must(t, err)
	return bundle{v: v, l: l, m: m, r: r}
}

// model is what the bundle must hold, per key.
type model struct {
	v map[int64]int64
	l map[int64][]string
	m map[int64]map[string]int64
	r map[int64]int64
}

func newModel() *model {
	return &model{v: map[int64]int64{}, l: map[int64][]string{}, m: map[int64]map[string]int64{}, r: map[int64]int64{}}
}

func (md *model) clone() *model {
	c := newModel()
	maps.Copy(c.v, md.v)
	maps.Copy(c.r, md.r)
	for k, l := range md.l {
		c.l[k] = slices.Clone(l)
	}
	for k, m := range md.m {
		c.m[k] = maps.Clone(m)
	}
	return c
}

// step applies one random operation to the current key k of bs and to the model.
func (md *model) step(t testing.TB, rng *rand.Rand, bs bundle, k int64) {
	t.Helper()
	x := rng.Int64N(1000)
	uk := "u" + strconv.Itoa(rng.IntN(5))
	switch rng.IntN(11) {
	case 0, 1:
		must(t, bs.v.Update(x))
		md.v[k] = x
	case 2:
		must(t, bs.v.Clear())
		delete(md.v, k)
	case 3:
		s := strconv.FormatInt(x, 10)
		must(t, bs.l.Add(s))
		md.l[k] = append(md.l[k], s)
	case 4:
		var vs []string
		for i := range rng.IntN(4) {
			vs = append(vs, strconv.Itoa(i)+"/"+strconv.FormatInt(x, 10))
		}
		must(t, bs.l.Update(vs))
		if len(vs) == 0 {
			delete(md.l, k)
		} else {
			md.l[k] = vs
		}
	case 5:
		must(t, bs.l.Clear())
		delete(md.l, k)
	case 6, 7:
		must(t, bs.m.Put(uk, x))
		if md.m[k] == nil {
			md.m[k] = map[string]int64{}
		}
		md.m[k][uk] = x
	case 8:
		must(t, bs.m.Remove(uk))
		delete(md.m[k], uk)
		if len(md.m[k]) == 0 {
			delete(md.m, k)
		}
	case 9:
		if rng.IntN(3) == 0 {
			must(t, bs.m.Clear())
			delete(md.m, k)
		} else {
			must(t, bs.r.Clear())
			delete(md.r, k)
		}
	case 10:
		must(t, bs.r.Add(x))
		md.r[k] += x
	}
}

// check compares the state of key k with the model.
func (md *model) check(t testing.TB, b KeyedBackend, bs bundle, k int64) {
	t.Helper()
	set(b, k)
	v, ok, err := bs.v.Value()
	must(t, err)
	if want, wantOK := md.v[k]; v != want || ok != wantOK {
		t.Fatalf("key %d: ValueState.Value() = %d, %v, want %d, %v", k, v, ok, want, wantOK)
	}
	l, err := bs.l.Get()
	must(t, err)
	if want := md.l[k]; !slices.Equal(l, want) {
		t.Fatalf("key %d: ListState.Get() = %q, want %q", k, l, want)
	}
	got := map[string]int64{}
	must(t, bs.m.Range(func(uk string, v int64) bool {
		if _, dup := got[uk]; dup {
			t.Errorf("key %d: MapState.Range visits %q twice", k, uk)
		}
		got[uk] = v
		return true
	}))
	want := md.m[k]
	if want == nil {
		want = map[string]int64{}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("key %d: MapState.Range() = %v, want %v", k, got, want)
	}
	for uk, w := range want {
		v, ok, err := bs.m.Get(uk)
		must(t, err)
		if !ok || v != w {
			t.Fatalf("key %d: MapState.Get(%q) = %d, %v, want %d, true", k, uk, v, ok, w)
		}
	}
	if _, ok, err := bs.m.Get("absent"); err != nil || ok {
		t.Fatalf("key %d: MapState.Get(absent) = _, %v, %v, want false, nil", k, ok, err)
	}
	r, ok, err := bs.r.Get()
	must(t, err)
	if want, wantOK := md.r[k]; r != want || ok != wantOK {
		t.Fatalf("key %d: ReducingState.Get() = %d, %v, want %d, %v", k, r, ok, want, wantOK)
	}
}

// checkRange checks every key in keys that b owns.
func (md *model) checkRange(t testing.TB, b KeyedBackend, bs bundle, keys int) {
	t.Helper()
	for k := range int64(keys) {
		if b.KeyGroupRange().Contains(KeyGroup(record.IntValue(k), record.Int64, testMaxP)) {
			md.check(t, b, bs, k)
		}
	}
}

func TestKeyedStatesAgainstModel(t *testing.T) {
	const keys = 60
	for _, tc := range []struct {
		name  string
		kind  string
		cache int
	}{
		{"hashmap", BackendHashMap, 0},
		{"bbolt", BackendBBolt, 0},
		{"bbolt/tiny-cache", BackendBBolt, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, tc.kind, record.Int64, fullRange, tc.cache)
			bs := register(t, b)
			md := newModel()
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 5000 {
				k := rng.Int64N(keys)
				set(b, k)
				md.step(t, rng, bs, k)
				if i%97 == 0 {
					md.check(t, b, bs, k)
				}
			}
			md.checkRange(t, b, bs, keys)
		})
	}
}

func TestValueStateOps(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.String, fullRange, 0)
			rows, err := NewValueState(b, "rows", RowCodec(record.MustSchema(
				record.Field{Name: "a", Type: record.Int64}, record.Field{Name: "s", Type: record.String})))
			must(t, err)
			floats, err := NewValueState(b, "floats", Float64Codec{})
			must(t, err)
			blobs, err := NewValueState(b, "blobs", BytesCodec{})
			must(t, err)
			strs, err := NewValueState(b, "strings", StringCodec{})
			must(t, err)

			b.SetCurrentKey(record.StringValue("k1"))
			if _, ok, err := rows.Value(); ok || err != nil {
				t.Fatalf("Value() of a new key = _, %v, %v, want false, nil", ok, err)
			}
			must(t, rows.Update(record.Row{record.IntValue(7), record.StringValue("seven")}))
			must(t, floats.Update(2.5))
			must(t, blobs.Update([]byte{1, 2}))
			must(t, strs.Update("")) // an empty encoding is still a value
			b.SetCurrentKey(record.StringValue("k2"))
			must(t, floats.Update(-1))

			b.SetCurrentKey(record.StringValue("k1"))
			row, ok, err := rows.Value()
			if err != nil || !ok || row[0].Int() != 7 || row[1].Str() != "seven" {
				t.Fatalf("rows.Value() = %v, %v, %v, want [7 seven]", row, ok, err)
			}
			if f, ok, err := floats.Value(); f != 2.5 || !ok || err != nil {
				t.Fatalf("floats.Value() = %v, %v, %v, want 2.5", f, ok, err)
			}
			if v, ok, err := blobs.Value(); string(v) != "\x01\x02" || !ok || err != nil {
				t.Fatalf("blobs.Value() = %v, %v, %v", v, ok, err)
			}
			if v, ok, err := strs.Value(); v != "" || !ok || err != nil {
				t.Fatalf("strs.Value() = %q, %v, %v, want \"\", true", v, ok, err)
			}
			must(t, floats.Clear())
			if _, ok, _ := floats.Value(); ok {
				t.Fatalf("floats.Value() after Clear reports a value")
			}
			b.SetCurrentKey(record.StringValue("k2"))
			if f, ok, _ := floats.Value(); f != -1 || !ok {
				t.Fatalf("floats.Value() of k2 = %v, %v, want -1", f, ok)
			}
		})
	}
}

// A key may point into a network buffer that is reused: the state must keep its own copy.
func TestKeysAreCloned(t *testing.T) {
	schema := record.MustSchema(record.Field{Name: "k", Type: record.String})
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.String, fullRange, 1)
			vs, err := NewValueState(b, "v", Int64Codec{})
			must(t, err)
			buf := record.AppendRow(nil, schema, record.Row{record.StringValue("alpha")})
			row := make(record.Row, 1)
			for i, name := range []string{"alpha", "bravo"} {
				buf = record.AppendRow(buf[:0], schema, record.Row{record.StringValue(name)})
				if _, err := record.DecodeRow(buf, schema, row); err != nil {
					t.Fatal(err)
				}
				b.SetCurrentKey(row[0]) // points into buf
				must(t, vs.Update(int64(i)))
			}
			clear(buf)
			for i, name := range []string{"alpha", "bravo"} {
				b.SetCurrentKey(record.StringValue(name))
				if v, ok, err := vs.Value(); v != int64(i) || !ok || err != nil {
					t.Fatalf("Value(%s) = %d, %v, %v, want %d", name, v, ok, err, i)
				}
			}
		})
	}
}

func TestKeyedStateErrors(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			rng := RangeForOperator(0, testMaxP, 2)
			b := newBackend(t, kind, record.Int64, rng, 0)
			vs, err := NewValueState(b, "v", Int64Codec{})
			must(t, err)
			if _, _, err := vs.Value(); !errors.Is(err, ErrNoCurrentKey) {
				t.Errorf("Value() without a key = %v, want ErrNoCurrentKey", err)
			}
			var foreign int64
			for KeyGroup(record.IntValue(foreign), record.Int64, testMaxP) <= rng.End {
				foreign++
			}
			set(b, foreign)
			if err := vs.Update(1); !errors.Is(err, ErrKeyOutOfRange) {
				t.Errorf("Update() of a key outside the range = %v, want ErrKeyOutOfRange", err)
			}
			if _, err := NewValueState(b, "v", Int64Codec{}); !errors.Is(err, ErrStateExists) {
				t.Errorf("NewValueState(duplicate) = %v, want ErrStateExists", err)
			}
			if _, err := NewListState(b, "v", Int64Codec{}); !errors.Is(err, ErrStateExists) {
				t.Errorf("NewListState(duplicate) = %v, want ErrStateExists", err)
			}
			if _, err := NewValueState(b, "", Int64Codec{}); err == nil {
				t.Errorf("NewValueState(\"\") = nil, want an error")
			}
			if _, err := NewValueState[int64](b, "nil", nil); err == nil {
				t.Errorf("NewValueState(nil codec) = nil, want an error")
			}
		})
	}
}

func TestNewKeyedBackendValidates(t *testing.T) {
	ok := KeyedBackendOptions{KeyType: record.Int64, MaxParallelism: 128, Range: KeyGroupRange{Start: 0, End: 127}}
	for _, tc := range []struct {
		name   string
		modify func(*KeyedBackendOptions)
	}{
		{"unknown kind", func(o *KeyedBackendOptions) { o.Kind = "rocksdb" }},
		{"invalid key type", func(o *KeyedBackendOptions) { o.KeyType = record.Invalid }},
		{"zero max parallelism", func(o *KeyedBackendOptions) { o.MaxParallelism = 0 }},
		{"range past max parallelism", func(o *KeyedBackendOptions) { o.Range.End = 128 }},
		{"empty range", func(o *KeyedBackendOptions) { o.Range = KeyGroupRange{Start: 5, End: 4} }},
		{"bbolt without dir", func(o *KeyedBackendOptions) { o.Kind = BackendBBolt }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.modify(&o)
			if _, err := NewKeyedBackend(o); err == nil {
				t.Errorf("NewKeyedBackend(%+v) = nil error, want an error", o)
			}
		})
	}
	o := ok
	o.Kind = "rocksdb"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `"hashmap"`) || !strings.Contains(err.Error(), `"bbolt"`) {
		t.Errorf("Validate() = %v, want the valid kinds named", err)
	}
}

func TestBBoltRemovesWorkingFile(t *testing.T) {
	dir := t.TempDir()
	b, err := NewKeyedBackend(KeyedBackendOptions{Kind: BackendBBolt, KeyType: record.Int64, MaxParallelism: 128,
		Range: KeyGroupRange{Start: 0, End: 127}, Dir: dir})
	must(t, err)
	vs, err := NewValueState(b, "v", Int64Codec{})
	must(t, err)
	set(b, 1)
	must(t, vs.Update(1))
	must(t, b.Close())
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left after Close: %v", entries)
	}
}

// Keys lists every key with a value, in the backend's range only, also after a restore and
// with entries still in the bbolt backend's cache.
func TestValueStateKeys(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, fullRange, 4)
			s, err := NewValueState(b, "timers", Int64Codec{})
			must(t, err)
			for k := range int64(20) {
				b.SetCurrentKey(record.IntValue(k))
				must(t, s.Update(k*10))
			}
			for _, k := range []int64{3, 7} {
				b.SetCurrentKey(record.IntValue(k))
				must(t, s.Clear())
			}
			want := map[int64]bool{}
			for k := range int64(20) {
				want[k] = k != 3 && k != 7
			}
			checkKeys := func(s *ValueState[int64], rng KeyGroupRange) {
				t.Helper()
				ks, err := s.Keys()
				must(t, err)
				got := map[int64]bool{}
				for _, k := range ks {
					if got[k.Int()] {
						t.Fatalf("Keys() lists %d twice", k.Int())
					}
					got[k.Int()] = true
				}
				for k, has := range want {
					in := rng.Contains(KeyGroup(record.IntValue(k), record.Int64, testMaxP))
					if got[k] != (has && in) {
						t.Errorf("Keys() lists %d: %v, want %v", k, got[k], has && in)
					}
				}
			}
			checkKeys(s, fullRange)

			fs := files{}
			h := fs.snapshot(t, b, "snap")
			half := KeyGroupRange{Start: 0, End: testMaxP/2 - 1}
			r := newBackend(t, kind, record.Int64, half, 4)
			must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
			rs, err := NewValueState(r, "timers", Int64Codec{})
			must(t, err)
			checkKeys(rs, half)
		})
	}
}

// A key's map state grows past the entries kept in a slice (into a Go map) and shrinks again,
// on both backends, checked (entries and Keys) against a plain map after every step and after
// a restore.
func TestMapStateGrowsAndShrinks(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, fullRange, 0)
			ms, err := NewMapState(b, "m", Int64Codec{}, Int64Codec{})
			must(t, err)
			want := map[int64]map[int64]int64{}
			check := func(b KeyedBackend, ms *MapState[int64, int64], when string) {
				t.Helper()
				keys, err := ms.Keys()
				must(t, err)
				var got []int64
				for _, k := range keys {
					got = append(got, k.Int())
				}
				slices.Sort(got)
				if w := slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
					t.Fatalf("%s: Keys() = %v, want %v", when, got, w)
				}
				for k, w := range want {
					set(b, k)
					got := map[int64]int64{}
					must(t, ms.Range(func(uk, v int64) bool { got[uk] = v; return true }))
					if !maps.Equal(got, w) {
						t.Fatalf("%s: key %d holds %v, want %v", when, k, got, w)
					}
					for uk, v := range w {
						if g, ok, err := ms.Get(uk); err != nil || !ok || g != v {
							t.Fatalf("%s: key %d Get(%d) = %d, %v, %v; want %d", when, k, uk, g, ok, err, v)
						}
					}
					if _, ok, _ := ms.Get(-1); ok {
						t.Fatalf("%s: key %d has an entry -1 it never got", when, k)
					}
				}
			}
			r := rand.New(rand.NewPCG(7, 11))
			for step := range 6000 {
				k := int64(r.IntN(3))
				set(b, k)
				if want[k] == nil {
					want[k] = map[int64]int64{}
				}
				uk := int64(r.IntN(100))
				if r.IntN(3) == 0 {
					must(t, ms.Remove(uk))
					delete(want[k], uk)
				} else {
					must(t, ms.Put(uk, int64(step)))
					want[k][uk] = int64(step)
				}
				if len(want[k]) == 0 {
					delete(want, k)
				}
				if step%100 == 0 {
					check(b, ms, fmt.Sprintf("step %d", step))
				}
			}
			check(b, ms, "the end")
			fs := files{}
			h := fs.snapshot(t, b, "snap")
			for _, to := range kinds {
				rb := newBackend(t, to, record.Int64, fullRange, 0)
				rms, err := NewMapState(rb, "m", Int64Codec{}, Int64Codec{})
				must(t, err)
				must(t, rb.Restore([]*pb.KeyedStateHandle{h}, fs.open))
				check(rb, rms, "restored into "+to)
			}
		})
	}
}

// A value changed in place after GetForUpdate does not reach a snapshot taken before it, on
// both backends (the hashmap backend keeps values as they are: it must settle the snapshot's
// copy of the key group first).
func TestGetForUpdateLeavesSnapshotsAlone(t *testing.T) {
	schema := record.MustSchema(record.Field{Name: "n", Type: record.Int64})
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, fullRange, 0)
			ms, err := NewMapState(b, "m", Int64Codec{}, RowCodec(schema))
			must(t, err)
			set(b, 1)
			must(t, ms.Put(7, record.Row{record.IntValue(1)}))
			snap, err := b.Snapshot()
			must(t, err)
			defer snap.Release()
			v, ok, err := ms.GetForUpdate(7)
			if err != nil || !ok {
				t.Fatalf("GetForUpdate(7) = %v, %v, %v", v, ok, err)
			}
			v[0] = record.IntValue(2)
			must(t, ms.Put(7, v))
			var buf bytes.Buffer
			offsets, err := snap.WriteSnapshot(&buf)
			must(t, err)
			fs := files{"snap": buf.Bytes()}
			h := &pb.KeyedStateHandle{File: &pb.FileHandle{Path: "snap", Size: int64(buf.Len())}, KeyGroupStart: 0, KeyGroupEnd: testMaxP - 1, Offsets: offsets}
			r := newBackend(t, kind, record.Int64, fullRange, 0)
			rms, err := NewMapState(r, "m", Int64Codec{}, RowCodec(schema))
			must(t, err)
			must(t, r.Restore([]*pb.KeyedStateHandle{h}, fs.open))
			set(r, 1)
			if got, _, err := rms.Get(7); err != nil || got[0].Int() != 1 {
				t.Errorf("the snapshot holds %v (%v), want the value before the update, 1", got, err)
			}
			if got, _, _ := ms.Get(7); got[0].Int() != 2 {
				t.Errorf("the state holds %v after the update, want 2", got)
			}
		})
	}
}
