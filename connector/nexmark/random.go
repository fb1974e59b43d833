package nexmark

// splitRandom is java.util.SplittableRandom (SplitMix64) without the splitting: the same
// seed gives the same nextInt, nextInt(bound), nextLong and nextDouble sequence as
// new SplittableRandom(seed) in Java 8 to 21, bit for bit. It is the generator the Java
// Nexmark generator draws from since nexmark/nexmark#57.
type splitRandom struct{ seed uint64 }

// goldenGamma is SplittableRandom's GOLDEN_GAMMA, the increment of new SplittableRandom(seed).
const goldenGamma = 0x9e3779b97f4a7c15

// mix64 is SplittableRandom.mix64 (Stafford's variant 13, the SplitMix64 finalizer).
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// mix32 is SplittableRandom.mix32.
func mix32(z uint64) int32 {
	z = (z ^ (z >> 33)) * 0x62a9d9ed799705f5
	return int32(((z ^ (z >> 28)) * 0xcb24d0a5c88c35b3) >> 32)
}

func (r *splitRandom) nextSeed() uint64 {
	r.seed += goldenGamma
	return r.seed
}

// nextInt is SplittableRandom.nextInt().
func (r *splitRandom) nextInt() int32 { return mix32(r.nextSeed()) }

// nextLong is SplittableRandom.nextLong().
func (r *splitRandom) nextLong() int64 { return int64(mix64(r.nextSeed())) }

// intn is SplittableRandom.nextInt(bound): uniform in [0, bound); bound must be positive.
// The rejection loop relies on int32 wrapping, as the Java code does.
func (r *splitRandom) intn(bound int32) int32 {
	v := r.nextInt()
	m := bound - 1
	if bound&m == 0 {
		return v & m
	}
	u := int32(uint32(v) >> 1)
	for {
		v = u % bound
		if u+m-v >= 0 {
			return v
		}
		u = int32(uint32(r.nextInt()) >> 1)
	}
}

// float64 is SplittableRandom.nextDouble(): uniform in [0, 1).
func (r *splitRandom) float64() float64 { return float64(mix64(r.nextSeed())>>11) * 0x1.0p-53 }

// longn is Nexmark's LongGenerator.nextLong(random, n): nextInt(n) below 2^31-1, else the
// (skewed) |nextLong % n|.
func (r *splitRandom) longn(n int64) int64 {
	if n < 1<<31-1 {
		return int64(r.intn(int32(n)))
	}
	v := r.nextLong() % n
	if v < 0 {
		v = -v
	}
	return v
}
