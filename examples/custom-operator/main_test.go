package main

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/goflink/goflink/operator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The silence operator's timers fire per key: b falls silent after its last record (1.99 s),
// a only when the end of the input fires every timer.
func TestSilenceTimersFirePerKey(t *testing.T) {
	var out lockedBuffer // two TaskManagers print
	if err := runLocal(t.Context(), []operator.Type{MovingAverage, Silence}, "silence.yaml", &out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.b.String()), "\n") {
		if _, row, ok := strings.Cut(line, "> "); ok {
			got = append(got, row)
		}
	}
	slices.Sort(got)
	want := []string{`{"key":"a","last_seen":"1970-01-01T00:00:04Z"}`, `{"key":"b","last_seen":"1970-01-01T00:00:01.99Z"}`}
	if !slices.Equal(got, want) {
		t.Fatalf("print sink wrote %q, want %q", got, want)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
