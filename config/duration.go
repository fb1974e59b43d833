package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

var durationUnits = []struct {
	names []string
	unit  time.Duration
}{
	{[]string{"d", "day", "days"}, 24 * time.Hour},
	{[]string{"h", "hour", "hours"}, time.Hour},
	{[]string{"min", "m", "minute", "minutes"}, time.Minute},
	{[]string{"s", "sec", "secs", "second", "seconds"}, time.Second},
	{[]string{"ms", "milli", "millis", "millisecond", "milliseconds"}, time.Millisecond},
	{[]string{"µs", "us", "micro", "micros", "microsecond", "microseconds"}, time.Microsecond},
	{[]string{"ns", "nano", "nanos", "nanosecond", "nanoseconds"}, time.Nanosecond},
}

// ParseDuration parses Flink's duration syntax: a non-negative integer, optional spaces and an
// optional unit (d, h, min/m, s, ms, us, ns and their long forms); no unit means milliseconds.
// Go's compound form ("1m30s") is accepted too.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("invalid duration %q: empty", s)
	}
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("invalid duration %q: want a number and a unit such as 500ms, 10 s or 1 min", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", s, err)
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	if unit == "" {
		unit = "ms"
	}
	for _, u := range durationUnits {
		if slices.Contains(u.names, unit) {
			if n > math.MaxInt64/int64(u.unit) {
				return 0, fmt.Errorf("invalid duration %q: too large", s)
			}
			return time.Duration(n) * u.unit, nil
		}
	}
	if d, err := time.ParseDuration(strings.ReplaceAll(t, " ", "")); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("invalid duration %q: unknown unit %q (use d, h, min, s, ms, us or ns)", s, unit)
}

// FormatDuration renders d in the largest unit that represents it exactly ("500 ms", "5 min").
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0 ms"
	}
	for _, u := range durationUnits {
		if d%u.unit == 0 {
			return fmt.Sprintf("%d %s", d/u.unit, u.names[0])
		}
	}
	return fmt.Sprintf("%d ns", d)
}
