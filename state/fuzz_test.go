package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// fuzzMmapSize keeps the address space each bbolt backend of FuzzKeyedRestore reserves small:
// the fuzzer opens one per input, and its files hold a few kilobytes.
const fuzzMmapSize = 1 << 20

// fuzzStates is what FuzzKeyedRestore registers: one state of every kind, named as in the
// seeds, and a value state of Map values, whose decoding validates them.
type fuzzStates struct {
	v   *ValueState[int64]
	l   *ListState[string]
	m   *MapState[string, int64]
	r   *ReducingState[int64]
	hdr *ValueState[record.Value]
}

func registerFuzz(b KeyedBackend) (fuzzStates, error) {
	var s fuzzStates
	var err error
	if s.v, err = NewValueState(b, "count", Int64Codec{}); err != nil {
		return s, err
	}
	if s.l, err = NewListState(b, "names", StringCodec{}); err != nil {
		return s, err
	}
	if s.m, err = NewMapState(b, "totals", StringCodec{}, Int64Codec{}); err != nil {
		return s, err
	}
	if s.r, err = NewReducingState(b, "sum", Int64Codec{}, func(acc, v int64) int64 { return acc + v }); err != nil {
		return s, err
	}
	s.hdr, err = NewValueState(b, "headers", ValueCodec(record.Map))
	return s, err
}

// dump renders everything the states hold for their keys, one line per key and state, sorted,
// so that two backends can be compared.
func (s fuzzStates) dump(b KeyedBackend, keyType record.Type) (string, error) {
	var lines []string
	add := func(state string, k record.Value, v any) {
		lines = append(lines, fmt.Sprintf("%s[%q] = %v", state, k.Format(keyType), v))
	}
	keys, err := s.v.Keys()
	if err != nil {
		return "", err
	}
	more, err := s.m.Keys()
	if err != nil {
		return "", err
	}
	keys = append(keys, more...)
	more, err = s.hdr.Keys()
	if err != nil {
		return "", err
	}
	keys = append(keys, more...)
	// List and reducing state cannot list their keys; the other states' keys stand for them.
	seen := map[record.Value]bool{}
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		b.SetCurrentKey(k)
		if v, ok, err := s.v.Value(); err != nil {
			return "", fmt.Errorf("count: %w", err)
		} else if ok {
			add("count", k, v)
		}
		if l, err := s.l.Get(); err != nil {
			return "", fmt.Errorf("names: %w", err)
		} else if len(l) > 0 {
			add("names", k, fmt.Sprintf("%q", l))
		}
		m := map[string]int64{}
		if err := s.m.Range(func(uk string, v int64) bool { m[uk] = v; return true }); err != nil {
			return "", fmt.Errorf("totals: %w", err)
		}
		if len(m) > 0 {
			add("totals", k, m)
		}
		for uk, want := range m {
			got, ok, err := s.m.Get(uk)
			if err != nil {
				return "", fmt.Errorf("totals[%q].Get(%q): %w", k.Format(keyType), uk, err)
			}
			if !ok || got != want {
				return "", fmt.Errorf("totals[%q].Get(%q) = %d, %v; Range gave %d", k.Format(keyType), uk, got, ok, want)
			}
		}
		if r, ok, err := s.r.Get(); err != nil {
			return "", fmt.Errorf("sum: %w", err)
		} else if ok {
			add("sum", k, r)
		}
		if h, ok, err := s.hdr.Value(); err != nil {
			return "", fmt.Errorf("headers: %w", err)
		} else if ok {
			add("headers", k, h.Map())
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}

// fuzzSnapshot writes a snapshot of b and returns the file and its handle.
func fuzzSnapshot(b KeyedBackend) ([]byte, *pb.KeyedStateHandle, error) {
	snap, err := b.Snapshot()
	if err != nil {
		return nil, nil, err
	}
	defer snap.Release()
	var buf bytes.Buffer
	offsets, err := snap.WriteSnapshot(&buf)
	if err != nil {
		return nil, nil, err
	}
	r := b.KeyGroupRange()
	return buf.Bytes(), &pb.KeyedStateHandle{
		File:          &pb.FileHandle{Path: "f", Size: int64(buf.Len())},
		KeyGroupStart: int32(r.Start), KeyGroupEnd: int32(r.End), Offsets: offsets,
	}, nil
}

// appendOffsets encodes key-group offsets as the fuzz input holds them: varints.
func appendOffsets(b []byte, offsets []int64) []byte {
	for _, o := range offsets {
		b = binary.AppendVarint(b, o)
	}
	return b
}

func parseOffsets(b []byte) []int64 {
	var out []int64
	for len(b) > 0 {
		o, n := binary.Varint(b)
		if n <= 0 {
			break
		}
		out = append(out, o)
		b = b[n:]
	}
	return out
}

// seedKeyed returns a snapshot of a backend with keys of type keyType in every state.
func seedKeyed(f *testing.F, keyType record.Type, maxP int, keys []record.Value) ([]byte, []int64) {
	b, err := NewKeyedBackend(KeyedBackendOptions{KeyType: keyType, MaxParallelism: maxP, Range: KeyGroupRange{0, maxP - 1}})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	s, err := registerFuzz(b)
	if err != nil {
		f.Fatal(err)
	}
	for i, k := range keys {
		b.SetCurrentKey(k)
		steps := []error{
			s.v.Update(int64(i)),
			s.l.Update([]string{"a", fmt.Sprint(i)}),
			s.m.Put("u", int64(i)), s.m.Put("w", -1),
			s.r.Add(int64(i)), s.r.Add(2),
			s.hdr.Update(record.MapValue(map[string]string{"k": fmt.Sprint(i), "z": ""})),
		}
		for _, err := range steps {
			if err != nil {
				f.Fatal(err)
			}
		}
	}
	data, h, err := fuzzSnapshot(b)
	if err != nil {
		f.Fatal(err)
	}
	return data, h.Offsets
}

// FuzzKeyedRestore restores an arbitrary keyed state snapshot file with arbitrary key-group
// offsets (both come from checkpoint storage, which a hostile or broken writer controls) into
// a hashmap and a bbolt backend, with the states registered before or after the restore. It
// must never panic. When both restores succeed, the backends must hold the same state, and a
// snapshot of what the hashmap backend restored must restore to the same state again.
func FuzzKeyedRestore(f *testing.F) {
	for _, sd := range []struct {
		keyType record.Type
		maxP    int
		keys    []record.Value
	}{
		{record.Int64, 4, []record.Value{record.IntValue(1), record.IntValue(2), record.IntValue(-7)}},
		{record.String, 8, []record.Value{record.StringValue("a"), record.StringValue(""), record.StringValue("héllo")}},
		{record.Bool, 2, []record.Value{record.BoolValue(true)}},
		{record.Bytes, 3, []record.Value{record.BytesValue([]byte{0, 0xff})}},
	} {
		data, offsets := seedKeyed(f, sd.keyType, sd.maxP, sd.keys)
		last := uint16(sd.maxP - 1)
		f.Add(data, appendOffsets(nil, offsets), uint16(0), last, false)
		f.Add(data, appendOffsets(nil, offsets), uint16(1), last, true)
	}

	dir := f.TempDir() // a bbolt backend removes its file on Close
	f.Fuzz(func(t *testing.T, data, offsetBytes []byte, lo, hi uint16, registerFirst bool) {
		// The backend matches the file's header where it can, so that restores get past it.
		keyType, maxP := record.Int64, 4
		hr := KeyGroupRange{Start: 0, End: 3}
		if h, err := parseHeader(data); err == nil && h.keyType > record.Invalid && h.keyType <= record.Timestamp {
			keyType, maxP, hr = h.keyType, h.maxP, h.rng
		}
		lo, hi = min(lo, hi), max(lo, hi)
		rng := KeyGroupRange{Start: int(lo) % maxP, End: int(hi) % maxP}
		if rng.Start > rng.End {
			rng.Start = rng.End
		}
		handle := &pb.KeyedStateHandle{
			File:          &pb.FileHandle{Path: "f", Size: int64(len(data))},
			KeyGroupStart: int32(hr.Start), KeyGroupEnd: int32(hr.End),
			Offsets: parseOffsets(offsetBytes),
		}
		read := openBytes(data)
		_, _ = CountEntries(handle, read)
		// Both backends validate the file alike before they store anything; only a file that
		// passes is worth restoring into them (a bbolt backend costs a file per input).
		err := restoreHandles([]*pb.KeyedStateHandle{handle}, read, rng, keyType, maxP, func(stateMeta, int, int64) (func(*entry) error, error) { return func(*entry) error { return nil }, nil })
		if err != nil {
			return
		}

		restore := func(kind string) (KeyedBackend, string, error) {
			b, err := NewKeyedBackend(KeyedBackendOptions{
				Kind: kind, KeyType: keyType, MaxParallelism: maxP, Range: rng,
				Dir: dir, MmapSize: fuzzMmapSize,
			})
			if err != nil {
				t.Fatalf("NewKeyedBackend(%s): %v", kind, err)
			}
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("Close(%s): %v", kind, err)
				}
			})
			var s fuzzStates
			if registerFirst {
				if s, err = registerFuzz(b); err != nil {
					t.Fatalf("register on an empty %s backend: %v", kind, err)
				}
			}
			if err := b.Restore([]*pb.KeyedStateHandle{handle}, read); err != nil {
				return nil, "", err
			}
			if !registerFirst {
				if s, err = registerFuzz(b); err != nil {
					return nil, "", err
				}
			}
			d, err := s.dump(b, keyType)
			return b, d, err
		}
		hm, hmDump, hmErr := restore(BackendHashMap)
		_, boltDump, boltErr := restore(BackendBBolt)
		if hmErr != nil || boltErr != nil {
			return
		}
		if hmDump != boltDump {
			t.Fatalf("hashmap and bbolt backends restored different state:\nhashmap:\n%s\nbbolt:\n%s", hmDump, boltDump)
		}

		again, h2, err := fuzzSnapshot(hm)
		if err != nil {
			t.Fatalf("snapshot of the restored hashmap backend: %v", err)
		}
		b2, err := NewKeyedBackend(KeyedBackendOptions{KeyType: keyType, MaxParallelism: maxP, Range: rng})
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if err := b2.Restore([]*pb.KeyedStateHandle{h2}, openBytes(again)); err != nil {
			t.Fatalf("restore of a snapshot of restored state: %v", err)
		}
		s2, err := registerFuzz(b2)
		if err != nil {
			t.Fatalf("register after restoring a snapshot of restored state: %v", err)
		}
		d2, err := s2.dump(b2, keyType)
		if err != nil {
			t.Fatalf("read state restored from a snapshot of restored state: %v", err)
		}
		if d2 != hmDump {
			t.Fatalf("a snapshot of restored state restores differently:\nfirst:\n%s\nagain:\n%s", hmDump, d2)
		}
	})
}

// FuzzOperatorRestore restores operator list state from an arbitrary TaskStateSnapshot (the
// operator states of a checkpoint's subtasks, read from its metadata) at an arbitrary
// subtask and parallelism. It must never panic; after an error the store must be unchanged,
// and after a restore a snapshot must hold the restored lists.
func FuzzOperatorRestore(f *testing.F) {
	for _, perSubtask := range [][][]string{{{"a", "b"}, {"c"}}, {{"x"}}, {{}, {"1", "2", "3"}, {"4"}}} {
		b, err := proto.Marshal(&pb.TaskStateSnapshot{Operators: oldStates(perSubtask)})
		if err != nil {
			f.Fatal(err)
		}
		for p := range uint8(4) {
			f.Add(b, p%2, p+1)
		}
	}

	f.Fuzz(func(t *testing.T, data []byte, subtask, parallelism uint8) {
		var ts pb.TaskStateSnapshot
		if err := proto.Unmarshal(data, &ts); err != nil {
			return
		}
		s := NewOperatorStateStore()
		registered, err := s.ListState("offsets", split)
		if err != nil {
			t.Fatal(err)
		}
		registered.Update(elems("before"))
		before := s.Snapshot()
		if err := s.Restore(ts.Operators, int(subtask), int(parallelism)); err != nil {
			if after := s.Snapshot(); !snapshotsEqual(before, after) {
				t.Fatalf("Restore failed (%v) but changed the store: %v, was %v", err, after, before)
			}
			return
		}
		lists := map[string]bool{}
		for _, st := range ts.Operators {
			for _, l := range st.Lists {
				lists[l.Name] = true
			}
		}
		for _, l := range s.Snapshot() {
			delete(lists, l.Name)
		}
		if len(lists) > 0 {
			t.Fatalf("restored lists %v are missing from the next snapshot", slices.Sorted(maps.Keys(lists)))
		}
	})
}

func snapshotsEqual(a, b []*pb.ListStateSnapshot) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.ListStateSnapshot) bool { return proto.Equal(x, y) })
}
