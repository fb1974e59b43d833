package state

import (
	"math/rand/v2"
	"testing"
)

// numIndex behaves as a Go map under random puts, gets and deletes, for spread keys and for
// keys that share their low or high bits, and whatever the multiplier (a fixed small one
// makes many keys share a home and exercises the shifting of deletion).
func TestNumIndexAgainstMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(r *rand.Rand) uint64
		mult uint64
	}{
		{"random", func(r *rand.Rand) uint64 { return r.Uint64() % 5000 }, 0},
		{"sequential", func(r *rand.Rand) uint64 { return uint64(r.IntN(3000)) }, 0},
		{"low bits equal", func(r *rand.Rand) uint64 { return uint64(r.IntN(2000)) << 40 }, 0},
		{"high bits equal", func(r *rand.Rand) uint64 { return 0xdead<<48 | uint64(r.IntN(2000)) }, 0},
		{"colliding homes", func(r *rand.Rand) uint64 { return uint64(r.IntN(300)) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 11))
			ix := newNumIndex[int]()
			if tc.mult != 0 {
				ix.mult = tc.mult
			}
			m := map[uint64]int{}
			for step := range 200_000 {
				k := tc.key(r)
				switch r.IntN(4) {
				case 0, 1:
					ix.put(k, step)
					m[k] = step
				case 2:
					ix.delete(k)
					delete(m, k)
				}
				got, ok := ix.get(k)
				want, wok := m[k]
				if got != want || ok != wok || ix.len() != len(m) {
					t.Fatalf("step %d key %d: get = %d, %v, len %d; want %d, %v, len %d", step, k, got, ok, ix.len(), want, wok, len(m))
				}
			}
			for k, want := range m {
				if got, ok := ix.get(k); got != want || !ok {
					t.Fatalf("get(%d) = %d, %v, want %d", k, got, ok, want)
				}
			}
			for k := range m {
				ix.delete(k)
			}
			if ix.len() != 0 {
				t.Fatalf("len after deleting every key = %d", ix.len())
			}
			for k := range uint64(5000) {
				if _, ok := ix.get(k); ok {
					t.Fatalf("get(%d) found a deleted key", k)
				}
			}
		})
	}
}

func BenchmarkNumIndexGet(b *testing.B) {
	const n = 10_000
	keys := make([]uint64, n)
	r := rand.New(rand.NewPCG(1, 1))
	ix, m := newNumIndex[*int64](), map[uint64]*int64{}
	for i := range keys {
		keys[i] = r.Uint64()
		p := new(int64)
		ix.put(keys[i], p)
		m[keys[i]] = p
	}
	var sink *int64
	b.Run("numIndex", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			sink, _ = ix.get(keys[i%n])
		}
	})
	b.Run("map", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			sink = m[keys[i%n]]
		}
	})
	_ = sink
}
