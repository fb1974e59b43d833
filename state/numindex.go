package state

import (
	"math/bits"
	"math/rand/v2"
)

// numIndex is a hash table from uint64 keys (the words of number keys) to E, for the lookup a
// keyed state does per record. It is open addressing with linear probing and multiplicative
// hashing (the top bits of key * mult), which costs a multiplication where a Go map hashes with
// memhash and probes groups: about a third of the time for a lookup. mult is a random odd
// number per table, so that no fixed set of keys collides in every process (multiply-shift
// hashing is universal). Deletion shifts the entries after the removed one back, so there are
// no tombstones. The zero numIndex is not usable (newNumIndex); it belongs to one goroutine.
type numIndex[E any] struct {
	keys  []uint64
	vals  []E
	used  []bool
	shift uint // 64 - log2(len(keys))
	mult  uint64
	n     int
}

const minNumIndex = 8

func newNumIndex[E any]() *numIndex[E] {
	t := &numIndex[E]{mult: rand.Uint64() | 1}
	t.alloc(minNumIndex)
	return t
}

func (t *numIndex[E]) alloc(size int) {
	t.keys, t.vals, t.used = make([]uint64, size), make([]E, size), make([]bool, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	t.n = 0
}

// home is the slot where a probe for k starts.
func (t *numIndex[E]) home(k uint64) int { return int((k * t.mult) >> t.shift) }

// get returns the value of k, and whether it has one.
func (t *numIndex[E]) get(k uint64) (E, bool) {
	mask := len(t.keys) - 1
	for i := t.home(k); t.used[i]; i = (i + 1) & mask {
		if t.keys[i] == k {
			return t.vals[i], true
		}
	}
	var zero E
	return zero, false
}

// put sets the value of k.
func (t *numIndex[E]) put(k uint64, v E) {
	if 4*(t.n+1) > 3*len(t.keys) { // at most 3/4 full
		old := *t
		t.alloc(2 * len(old.keys))
		for i, u := range old.used {
			if u {
				t.put(old.keys[i], old.vals[i])
			}
		}
	}
	mask := len(t.keys) - 1
	i := t.home(k)
	for ; t.used[i]; i = (i + 1) & mask {
		if t.keys[i] == k {
			t.vals[i] = v
			return
		}
	}
	t.used[i], t.keys[i], t.vals[i] = true, k, v
	t.n++
}

// delete removes k, if present.
func (t *numIndex[E]) delete(k uint64) {
	mask := len(t.keys) - 1
	i := t.home(k)
	for ; ; i = (i + 1) & mask {
		if !t.used[i] {
			return
		}
		if t.keys[i] == k {
			break
		}
	}
	// Shift back every entry after the hole that a probe would no longer reach across it: one
	// whose home is not cyclically in (hole, j].
	for j := (i + 1) & mask; t.used[j]; j = (j + 1) & mask {
		h := t.home(t.keys[j])
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue // still reachable from its home
		}
		t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
		i = j
	}
	var zero E
	t.used[i], t.keys[i], t.vals[i] = false, 0, zero
	t.n--
}

// len returns the number of keys.
func (t *numIndex[E]) len() int { return t.n }
