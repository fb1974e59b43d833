package state

import (
	"fmt"
	"math"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/goflink/goflink/record"
)

// UpperBoundMaxParallelism is the largest allowed max parallelism (Flink's 1 << 15).
const UpperBoundMaxParallelism = 1 << 15

// DefaultLowerBoundMaxParallelism is the smallest derived max parallelism (Flink's 128).
const DefaultLowerBoundMaxParallelism = 128

// KeyHash returns the key's 32-bit hash. It reproduces Java's hashCode for the corresponding
// Java type (Long, Double, Boolean, String over UTF-16 code units, Arrays.hashCode(byte[])),
// so it is stable across processes, versions and runs, and never seeded. Changing it would
// move keys to other key groups and break restoring state; it must never change.
func KeyHash(v record.Value, t record.Type) int32 {
	switch t {
	case record.Int64, record.Timestamp:
		return longHash(v.Int())
	case record.Float64:
		f := v.Float()
		var x uint64
		if math.IsNaN(f) {
			x = 0x7ff8000000000000 // Double.doubleToLongBits canonical NaN
		} else {
			x = math.Float64bits(f)
		}
		return int32(uint32(x ^ x>>32))
	case record.Bool:
		if v.Bool() {
			return 1231
		}
		return 1237
	case record.String:
		return javaStringHash(v.Str())
	case record.Bytes:
		h := int32(1)
		for _, b := range v.BytesView() {
			h = 31*h + int32(int8(b))
		}
		return h
	}
	return 0
}

// longHash is Java's Long.hashCode.
func longHash(v int64) int32 {
	x := uint64(v)
	return int32(uint32(x ^ x>>32))
}

func javaStringHash(s string) int32 {
	var h int32
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			h = 31*h + int32(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			h = 31*h + r1
			h = 31*h + r2
			continue
		}
		h = 31*h + r
	}
	return h
}

// MurmurHash is Flink's MathUtils.murmurHash: one round of murmur3 over a 4-byte int, made
// non-negative.
func MurmurHash(code int32) int32 {
	// Written in few statements so that it stays inlinable.
	c := bits.RotateLeft32(uint32(code)*0xcc9e2d51, 15) * 0x1b873593
	c = (bits.RotateLeft32(c, 13)*5 + 0xe6546b64) ^ 4 // ^ 4: the length of the input
	c = (c ^ c>>16) * 0x85ebca6b
	c = (c ^ c>>13) * 0xc2b2ae35
	return nonNegative(int32(c ^ c>>16))
}

// nonNegative is Flink's tail of murmurHash: r if r >= 0, 0 for math.MinInt32 (whose negation
// is itself), else -r. It has no branches: the sign of a hash is a coin toss that a branch
// predictor would lose half the time.
func nonNegative(r int32) int32 {
	m := r >> 31
	a := (r ^ m) - m // |r|; math.MinInt32 stays itself
	return a &^ (a >> 31)
}

// KeyGroupForHash returns the key group of a key hash for maxParallelism key groups.
func KeyGroupForHash(hash int32, maxParallelism int) int {
	return int(MurmurHash(hash)) % maxParallelism
}

// KeyGroup returns the key group of a key.
func KeyGroup(v record.Value, t record.Type, maxParallelism int) int {
	return KeyGroupForHash(KeyHash(v, t), maxParallelism)
}

// KeyGrouper computes the key groups of keys of one type for one max parallelism, as KeyGroup
// does, with the division by the max parallelism replaced by a multiplication precomputed
// once (Lemire's fastmod): a task computes a key group per record. The zero KeyGrouper is not
// usable; it is a value, safe for concurrent use.
type KeyGrouper struct {
	t    record.Type
	maxP uint64
	m    uint64 // ceil(2^64 / maxP)
}

// NewKeyGrouper returns the KeyGrouper of keys of type t for maxParallelism key groups
// (1..UpperBoundMaxParallelism).
func NewKeyGrouper(t record.Type, maxParallelism int) KeyGrouper {
	d := uint64(maxParallelism)
	return KeyGrouper{t: t, maxP: d, m: ^uint64(0)/d + 1}
}

// KeyGroup returns the key group of v: KeyGroup(v, t, maxParallelism).
func (g KeyGrouper) KeyGroup(v record.Value) int {
	var h int32
	if g.t == record.Int64 || g.t == record.Timestamp {
		h = longHash(v.Int()) // the common case inline
	} else {
		h = KeyHash(v, g.t)
	}
	return int(fastMod(uint32(MurmurHash(h)), g.m, g.maxP))
}

// fastMod returns a % d for m = ceil(2^64 / d), exact for every 32-bit a and 0 < d < 2^32
// (Lemire, Kaser, Kurz: "Faster remainder by direct computation", 2019).
func fastMod(a uint32, m, d uint64) uint64 {
	hi, _ := bits.Mul64(m*uint64(a), d)
	return hi
}

// OperatorIndexForKeyGroup returns the subtask that owns a key group.
func OperatorIndexForKeyGroup(keyGroup, maxParallelism, parallelism int) int {
	return keyGroup * parallelism / maxParallelism
}

// KeyGroupRange is an inclusive range of key groups; it is empty when Start > End.
type KeyGroupRange struct {
	Start, End int
}

// Contains reports whether kg lies in the range.
func (r KeyGroupRange) Contains(kg int) bool { return kg >= r.Start && kg <= r.End }

// Len returns the number of key groups in the range.
func (r KeyGroupRange) Len() int {
	if r.End < r.Start {
		return 0
	}
	return r.End - r.Start + 1
}

// RangeForOperator returns the key groups owned by subtask i of parallelism p.
func RangeForOperator(i, maxParallelism, parallelism int) KeyGroupRange {
	return KeyGroupRange{
		Start: (i*maxParallelism + parallelism - 1) / parallelism,
		End:   ((i+1)*maxParallelism - 1) / parallelism,
	}
}

// DefaultMaxParallelism derives the max parallelism of an operator from its parallelism, as
// Flink does: roundUpToPowerOfTwo(p + p/2) bounded to [128, 32768]. Any parallelism works: one
// above 32768 derives 32768 (and fails ValidateMaxParallelism), one below 1 derives 128.
func DefaultMaxParallelism(parallelism int) int {
	// Bounded first, so that p + p/2 and the doubling below cannot overflow.
	parallelism = min(max(parallelism, 0), UpperBoundMaxParallelism)
	n := parallelism + parallelism/2
	p := 1
	for p < n {
		p <<= 1
	}
	return min(max(p, DefaultLowerBoundMaxParallelism), UpperBoundMaxParallelism)
}

// ValidateMaxParallelism checks 0 < parallelism <= maxParallelism <= 32768.
func ValidateMaxParallelism(maxParallelism, parallelism int) error {
	switch {
	case maxParallelism <= 0 || maxParallelism > UpperBoundMaxParallelism:
		return fmt.Errorf("max parallelism %d out of range (1..%d)", maxParallelism, UpperBoundMaxParallelism)
	case parallelism < 1:
		return fmt.Errorf("parallelism %d out of range (1..%d)", parallelism, maxParallelism)
	case parallelism > maxParallelism:
		return fmt.Errorf("parallelism %d exceeds max parallelism %d", parallelism, maxParallelism)
	}
	return nil
}
