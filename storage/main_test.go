package storage

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: an upload's, or the S3 client's
// connections (closed first, as a process that ends would).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
