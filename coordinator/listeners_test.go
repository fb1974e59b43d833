package coordinator

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
)

// sockets binds a JobManager's RPC and Raft sockets on loopback, as its caller would.
func sockets(t *testing.T) (rpc, raft net.Listener) {
	t.Helper()
	var ls [2]net.Listener
	for i := range ls {
		var err error
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	return ls[0], ls[1]
}

// freed reports whether addr can be bound again: its listener was closed.
func freed(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		l.Close()
	}
	return err == nil
}

// A JobManager given sockets its caller bound serves and advertises them, and owns them: Close
// closes them, and so does a Start that fails.
func TestStartOnListenersBoundByTheCaller(t *testing.T) {
	rpc, raft := sockets(t)
	jm, err := Start(Config{NodeID: "jm-1", DataDir: t.TempDir(), RPCListener: rpc, RaftListener: raft,
		Logger: slog.New(slog.DiscardHandler), RaftLogger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jm.Addr(), rpc.Addr().String(); got != want {
		t.Errorf("Addr() = %s, want the listener's %s", got, want)
	}
	if got, want := jm.node.addr, raft.Addr().String(); got != want {
		t.Errorf("raft address %s, want the listener's %s", got, want)
	}
	poll.Until(t, 10*time.Second, "the JobManager to lead", func() error {
		if !jm.IsLeader() {
			return errors.New("not leading")
		}
		return nil
	})
	if err := jm.Close(); err != nil {
		t.Fatal(err)
	}
	if !freed(rpc.Addr().String()) || !freed(raft.Addr().String()) {
		t.Error("Close left a listener open")
	}

	rpc, raft = sockets(t)
	if _, err := Start(Config{DataDir: t.TempDir(), RPCListener: rpc, RaftListener: raft}); err == nil {
		t.Fatal("Start without a node ID succeeded")
	}
	if !freed(rpc.Addr().String()) || !freed(raft.Addr().String()) {
		t.Error("a failed Start left a listener open")
	}
}

// Wildcard sockets bound by the caller (socket activation on ":6123") advertise the hostname
// with their ports, on the RPC side and the Raft side alike, never "[::]".
func TestWildcardListenersAdvertiseTheHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	var ls [2]net.Listener
	for i := range ls {
		if ls[i], err = net.Listen("tcp", ":0"); err != nil {
			t.Fatal(err)
		}
	}
	jm, err := Start(Config{NodeID: "jm-1", DataDir: t.TempDir(), RPCListener: ls[0], RaftListener: ls[1],
		Logger: slog.New(slog.DiscardHandler), RaftLogger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer jm.Close()
	port := func(l net.Listener) string { return strconv.Itoa(l.Addr().(*net.TCPAddr).Port) }
	if got, want := jm.Addr(), net.JoinHostPort(host, port(ls[0])); got != want {
		t.Errorf("Addr() = %s, want %s", got, want)
	}
	if got, want := jm.node.addr, net.JoinHostPort(host, port(ls[1])); got != want {
		t.Errorf("raft address %s, want %s", got, want)
	}
}
