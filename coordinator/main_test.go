package coordinator

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// discardLog is the logger of components under test whose logs the test does not read.
var discardLog = slog.New(slog.DiscardHandler)
