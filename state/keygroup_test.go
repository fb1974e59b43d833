package state

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goflink/goflink/record"
)

// Vectors generated with OpenJDK 17: key.hashCode() (Long, String, Boolean, Double) and
// Flink's MathUtils.murmurHash, then murmur % maxParallelism for 128, 1000 and 32768.
var javaVectors = []struct {
	v                      record.Value
	t                      record.Type
	hash, murmur           int32
	kg128, kg1000, kg32768 int
}{
	{record.IntValue(0), record.Int64, 0, 593689054, 94, 54, 31198},
	{record.IntValue(1), record.Int64, 1, 68075478, 86, 478, 16342},
	{record.IntValue(-1), record.Int64, 0, 593689054, 94, 54, 31198},
	{record.IntValue(7), record.Int64, 7, 1343918321, 113, 321, 4337},
	{record.IntValue(1000000007), record.Int64, 1000000007, 62410208, 96, 208, 19936},
	{record.IntValue(math.MaxInt64), record.Int64, -2147483648, 1718298732, 108, 732, 10348},
	{record.IntValue(math.MinInt64), record.Int64, -2147483648, 1718298732, 108, 732, 10348},
	{record.IntValue(123456789012345), record.Int64, -2045923535, 1706327101, 61, 101, 31805},
	{record.StringValue(""), record.String, 0, 593689054, 94, 54, 31198},
	{record.StringValue("odd"), record.String, 109871, 2017159406, 110, 406, 26862},
	{record.StringValue("even"), record.String, 3125530, 190278511, 111, 511, 27503},
	{record.StringValue("hello"), record.String, 99162322, 1715862179, 35, 179, 31395},
	{record.StringValue("Grüße"), record.String, 69215351, 557622771, 115, 771, 9715},
	{record.StringValue("😀x"), record.String, 54959989, 1998616508, 60, 508, 30652},
	{record.BoolValue(true), record.Bool, 1231, 1090530765, 77, 765, 11725},
	{record.BoolValue(false), record.Bool, 1237, 1530821891, 3, 891, 32003},
	{record.FloatValue(1.5), record.Float64, 1073217536, 1684538177, 65, 177, 833},
	{record.FloatValue(math.Copysign(0, -1)), record.Float64, -2147483648, 1718298732, 108, 732, 10348},
	{record.FloatValue(math.NaN()), record.Float64, 2146959360, 1585394089, 41, 89, 12713},
}

func TestKeyHashMatchesJava(t *testing.T) {
	for _, tc := range javaVectors {
		name := tc.v.Format(tc.t)
		if got := KeyHash(tc.v, tc.t); got != tc.hash {
			t.Errorf("KeyHash(%s) = %d, want %d", name, got, tc.hash)
		}
		if got := MurmurHash(tc.hash); got != tc.murmur {
			t.Errorf("MurmurHash(%d) = %d, want %d", tc.hash, got, tc.murmur)
		}
		for _, c := range []struct{ maxP, want int }{{128, tc.kg128}, {1000, tc.kg1000}, {32768, tc.kg32768}} {
			if got := KeyGroup(tc.v, tc.t, c.maxP); got != c.want {
				t.Errorf("KeyGroup(%s, %d) = %d, want %d", name, c.maxP, got, c.want)
			}
		}
	}
}

func TestRangesPartitionKeyGroups(t *testing.T) {
	for _, maxP := range []int{1, 7, 128, 1000, 32768} {
		for _, p := range []int{1, 2, 3, 5, 7} {
			if p > maxP {
				continue
			}
			next := 0
			for i := range p {
				r := RangeForOperator(i, maxP, p)
				if r.Start != next {
					t.Fatalf("RangeForOperator(%d, %d, %d).Start = %d, want %d", i, maxP, p, r.Start, next)
				}
				for kg := r.Start; kg <= r.End; kg++ {
					if got := OperatorIndexForKeyGroup(kg, maxP, p); got != i {
						t.Fatalf("OperatorIndexForKeyGroup(%d, %d, %d) = %d, want %d (range %v)", kg, maxP, p, got, i, r)
					}
				}
				next = r.End + 1
			}
			if next != maxP {
				t.Fatalf("ranges for maxP=%d p=%d cover %d key groups, want %d", maxP, p, next, maxP)
			}
		}
	}
}

func TestDefaultMaxParallelism(t *testing.T) {
	for _, tc := range []struct{ p, want int }{{1, 128}, {85, 128}, {86, 256}, {100, 256}, {1000, 2048}, {30000, 32768}} {
		if got := DefaultMaxParallelism(tc.p); got != tc.want {
			t.Errorf("DefaultMaxParallelism(%d) = %d, want %d", tc.p, got, tc.want)
		}
	}
}

// A parallelism beyond any valid one (a hostile parallelism.default) derives the upper bound
// at once: p + p/2 and the doubling loop must not overflow (security review F7: 4e18 spun for
// ever).
func TestDefaultMaxParallelismOutOfRange(t *testing.T) {
	for _, tc := range []struct{ p, want int }{
		{0, 128}, {-1, 128}, {math.MinInt, 128}, {32768, 32768}, {32769, 32768}, {1 << 40, 32768},
		{4000000000000000000, 32768}, {math.MaxInt / 3 * 2, 32768}, {math.MaxInt, 32768},
	} {
		done := make(chan int, 1)
		go func() { done <- DefaultMaxParallelism(tc.p) }()
		select {
		case got := <-done:
			if got != tc.want {
				t.Errorf("DefaultMaxParallelism(%d) = %d, want %d", tc.p, got, tc.want)
			}
		case <-time.After(5 * time.Second): // a deadline for a loop that never ends, not a wait
			t.Fatalf("DefaultMaxParallelism(%d) did not return within 5s", tc.p)
		}
	}
}

func TestValidateMaxParallelism(t *testing.T) {
	for _, tc := range []struct {
		maxP, p int
		ok      bool
	}{{128, 4, true}, {4, 4, true}, {3, 4, false}, {0, 1, false}, {32769, 1, false}, {128, 0, false}, {128, -1, false}} {
		if err := ValidateMaxParallelism(tc.maxP, tc.p); (err == nil) != tc.ok {
			t.Errorf("ValidateMaxParallelism(%d, %d) = %v, want ok=%v", tc.maxP, tc.p, err, tc.ok)
		}
	}
}

// KeyGrouper must assign every key the key group KeyGroup does: a key group computed otherwise
// at a producer, a consumer or a restore would lose or misplace state.
func TestKeyGrouperMatchesKeyGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	values := map[record.Type][]record.Value{}
	for _, tc := range javaVectors {
		values[tc.t] = append(values[tc.t], tc.v)
	}
	for _, tc := range keyTypeCases {
		values[tc.t] = append(values[tc.t], tc.keys...)
	}
	for range 2000 {
		n := rng.Int64()
		values[record.Int64] = append(values[record.Int64], record.IntValue(n), record.IntValue(n%1024))
		values[record.Timestamp] = append(values[record.Timestamp], record.IntValue(n))
		values[record.Float64] = append(values[record.Float64], record.FloatValue(rng.NormFloat64()*1e6))
		s := fmt.Sprintf("k%x", n)
		values[record.String] = append(values[record.String], record.StringValue(s))
		values[record.Bytes] = append(values[record.Bytes], record.BytesValue([]byte(s)))
	}
	for _, maxP := range []int{1, 2, 3, 7, 100, 127, 128, 129, 1000, 4096, 12345, 32767, 32768} {
		for typ, vs := range values {
			g := NewKeyGrouper(typ, maxP)
			for _, v := range vs {
				if got, want := g.KeyGroup(v), KeyGroup(v, typ, maxP); got != want {
					t.Fatalf("NewKeyGrouper(%s, %d).KeyGroup(%s) = %d, want %d", typ, maxP, v.Format(typ), got, want)
				}
			}
		}
	}
}

// fastMod is exact for every divisor a max parallelism can be, at the hashes where an error
// would show first: around multiples of the divisor and at the ends of the range.
func TestFastMod(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 3))
	for d := uint64(1); d <= UpperBoundMaxParallelism; d++ {
		m := ^uint64(0)/d + 1
		check := func(a uint32) {
			if got := fastMod(a, m, d); got != uint64(a)%d {
				t.Fatalf("fastMod(%d, %d) = %d, want %d", a, d, got, uint64(a)%d)
			}
		}
		for _, a := range []uint32{0, 1, math.MaxInt32, math.MaxInt32 - 1, math.MaxUint32, uint32(d - 1), uint32(d), uint32(d + 1)} {
			check(a)
		}
		top := uint64(math.MaxInt32) / d * d
		check(uint32(top))
		check(uint32(top - 1))
		for range 8 {
			check(rng.Uint32())
		}
	}
}

// BenchmarkKeyGroup compares KeyGroup and KeyGrouper for a max parallelism known only at run
// time, as a task's is.
func BenchmarkKeyGroup(b *testing.B) {
	maxP := DefaultMaxParallelism(len(b.Name()) % 3)
	b.Run("KeyGroup", func(b *testing.B) {
		s := 0
		for i := 0; b.Loop(); i++ {
			s += KeyGroup(record.IntValue(int64(i)), record.Int64, maxP)
		}
		_ = s
	})
	b.Run("KeyGrouper", func(b *testing.B) {
		g := NewKeyGrouper(record.Int64, maxP)
		s := 0
		for i := 0; b.Loop(); i++ {
			s += g.KeyGroup(record.IntValue(int64(i)))
		}
		_ = s
	})
}

func TestNonNegative(t *testing.T) {
	for _, tc := range []struct{ in, want int32 }{
		{0, 0}, {1, 1}, {-1, 1}, {math.MaxInt32, math.MaxInt32}, {-math.MaxInt32, math.MaxInt32},
		{math.MinInt32, 0}, {math.MinInt32 + 1, math.MaxInt32}, {-12345, 12345}, {12345, 12345},
	} {
		if got := nonNegative(tc.in); got != tc.want {
			t.Errorf("nonNegative(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
