package state

import (
	"maps"
	"testing"

	"github.com/goflink/goflink/record"
)

// CountEntries counts what a snapshot holds per state, on both backends, over the key groups of
// the handle: one entry per key of a value, list or reducing state, one per user key of a map
// state; cleared states are left out.
func TestCountEntries(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			b := newBackend(t, kind, record.Int64, KeyGroupRange{Start: 10, End: 90}, 4)
			bs := register(t, b)
			var keys []int64
			for k := int64(0); len(keys) < 5; k++ {
				if b.KeyGroupRange().Contains(KeyGroup(record.IntValue(k), record.Int64, testMaxP)) {
					keys = append(keys, k)
				}
			}
			for i, k := range keys {
				set(b, k)
				must(t, bs.v.Update(k))
				must(t, bs.l.Add("x"))
				must(t, bs.l.Add("y")) // one entry per key, whatever the list's length
				must(t, bs.m.Put("a", 1))
				if i%2 == 0 {
					must(t, bs.m.Put("b", 2))
				}
			}
			set(b, keys[0])
			must(t, bs.r.Add(3))
			must(t, bs.l.Clear())
			fs := files{}
			got, err := CountEntries(fs.snapshot(t, b, "chk-1"), fs.open)
			must(t, err)
			want := map[string]int{"count": 5, "names": 4, "totals": 8, "sum": 1}
			if !maps.Equal(got, want) {
				t.Errorf("CountEntries = %v, want %v", got, want)
			}

			for _, k := range keys {
				set(b, k)
				must(t, bs.v.Clear())
				must(t, bs.l.Clear())
				must(t, bs.m.Clear())
				must(t, bs.r.Clear())
			}
			got, err = CountEntries(fs.snapshot(t, b, "chk-2"), fs.open)
			must(t, err)
			if len(got) != 0 {
				t.Errorf("CountEntries of cleared states = %v, want none", got)
			}
		})
	}
}
