package nexmark

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves goroutines behind (TestRunsInCluster starts a cluster).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
