package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// median of xs (the upper middle for an even count, as the existing figures do); 0 if empty.
func median[T cmp.Ordered](xs []T) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	return slices.Sorted(slices.Values(xs))[len(xs)/2]
}

// percentile by nearest rank: the smallest value with at least p of the values at or below
// it; 0 if empty.
func percentile[T cmp.Ordered](xs []T, p float64) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	s := slices.Sorted(slices.Values(xs))
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func sortedCopy(xs []string) []string { return slices.Sorted(slices.Values(xs)) }

// ms formats a duration in milliseconds with a resolution that fits its size.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 1:
		return fmt.Sprintf("%.3f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// bytesText formats a size in B, KiB or MiB.
func bytesText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// keysText writes 10000 as 10k and 1000000 as 1M.
func keysText(k int) string {
	switch {
	case k >= 1_000_000 && k%1_000_000 == 0:
		return fmt.Sprintf("%dM", k/1_000_000)
	case k >= 1000 && k%1000 == 0:
		return fmt.Sprintf("%dk", k/1000)
	}
	return fmt.Sprint(k)
}

// verdicts collects every figure that has a target, for the summary at the end.
type verdicts struct {
	lines  []string
	failed int
}

// check records and returns the verdict of a figure against its target.
func (v *verdicts) check(figure string, met bool) string {
	word := "target met"
	if !met {
		word = "BELOW TARGET"
		v.failed++
	}
	v.lines = append(v.lines, fmt.Sprintf("  %-64s %s", figure, word))
	return word
}

func (v *verdicts) print() {
	if len(v.lines) == 0 {
		return
	}
	fmt.Printf("\n== summary: %d of %d targets met ==\n%s\n", len(v.lines)-v.failed, len(v.lines), strings.Join(v.lines, "\n"))
}

// durText writes whole-unit durations as in the README: "0 ms", "100 ms", "1 s".
func durText(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	if d%time.Millisecond == 0 {
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
	return d.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
