package worker

import (
	"io"
	"log/slog"
	"testing"
)

// testScratch is a scratch directory for tasks that run without a TaskManager; it is removed
// when the test ends.
func testScratch(t *testing.T) *scratch {
	t.Helper()
	s, err := openScratch(t.TempDir(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Error(err)
		}
	})
	return s
}
