package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// run --local starts a whole mini cluster in the test process.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
