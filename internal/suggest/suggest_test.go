package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "abc", 3}, {"kitten", "sitting", 3}, {"value", "valeu", 2}, {"same", "same", 0}} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"heartbeat.interval", "heartbeat.timeout", "parallelism.default"}
	for _, tc := range []struct{ in, want string }{
		{"heartbeat.intervall", "heartbeat.interval"},
		{"Heartbeat.Timeout", "heartbeat.timeout"},
		{"something.else", ""},
	} {
		if got := Closest(tc.in, names); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
