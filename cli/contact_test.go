package cli

import (
	"sync"
	"testing"
	"time"
)

// rawTCP listens on loopback like the JobManager's Raft port: it accepts connections and closes
// them without a word of gRPC.
func rawTCP(t *testing.T) string {
	t.Helper()
	lis := listen(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_, _ = conn.Read(make([]byte, 64))
				conn.Close()
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	return lis.Addr().String()
}

// The Raft port given for -m is reported at once, not retried for 15 s.
func TestRaftPortReported(t *testing.T) {
	addr := rawTCP(t)
	start := time.Now()
	code, stdout, stderr := execute(t, "-m", addr, "list")
	want := "flinkctl: " + addr + " does not answer as a goflink JobManager (error reading server preface: EOF); is it the Raft port? the RPC port is 6123 by default\n"
	if code != ExitFailure || stdout != "" || stderr != want {
		t.Errorf("list -m <Raft port> = exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout, stderr, ExitFailure, want)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("list -m <Raft port> took %v, want an answer at once", took)
	}
}
