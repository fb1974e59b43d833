package coordinator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// discardLog is the logger of components under test whose logs the test does not read.
var discardLog = slog.New(slog.DiscardHandler)

// rpcCtx is the context of one RPC of a test: cancelled after 10 s or when the test ends.
func rpcCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
