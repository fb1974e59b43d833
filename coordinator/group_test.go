package coordinator

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/internal/poll"
)

// jmGroup is a Raft group of real JobManagers in the test process (real TCP Raft and gRPC on
// loopback), as the mini cluster starts them; members can be stopped and started again on
// their data directories and addresses.
type jmGroup struct {
	t    *testing.T
	cfgs []Config
	jms  []*JobManager // nil while stopped
}

func startGroup(t *testing.T, n int) *jmGroup {
	t.Helper()
	g := &jmGroup{t: t, jms: make([]*JobManager, n)}
	dir := t.TempDir()
	var peers []Peer
	for i := range n {
		cfg := Config{NodeID: fmt.Sprintf("jm-%d", i+1), DataDir: filepath.Join(dir, fmt.Sprintf("jm-%d", i+1)),
			Logger: discardLog, RaftLogger: discardLog}
		for _, l := range []*net.Listener{&cfg.RPCListener, &cfg.RaftListener} {
			var err error
			if *l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
		}
		cfg.RPCAddr, cfg.RaftAddr = cfg.RPCListener.Addr().String(), cfg.RaftListener.Addr().String()
		peers = append(peers, Peer{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr})
		g.cfgs = append(g.cfgs, cfg)
	}
	for i := range g.cfgs {
		g.cfgs[i].Peers = peers
	}
	t.Cleanup(func() {
		for i := range g.jms {
			g.stop(i)
		}
	})
	for i := range n {
		g.start(i)
	}
	return g
}

// start starts member i: on the sockets bound by startGroup the first time, on its addresses
// afterwards.
func (g *jmGroup) start(i int) {
	g.t.Helper()
	cfg := g.cfgs[i]
	g.cfgs[i].RPCListener, g.cfgs[i].RaftListener = nil, nil // Start owns them
	jm, err := Start(cfg)
	if err != nil {
		g.t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	g.jms[i] = jm
}

// stop stops member i as a crash looks to the others; its Raft state stays on disk.
func (g *jmGroup) stop(i int) {
	g.t.Helper()
	if g.jms[i] == nil {
		return
	}
	if err := g.jms[i].Close(); err != nil {
		g.t.Errorf("close %s: %v", g.cfgs[i].NodeID, err)
	}
	g.jms[i] = nil
}

// leader waits until a running member leads (after Barrier) and returns its index.
func (g *jmGroup) leader() int {
	g.t.Helper()
	i := -1
	poll.Until(g.t, 20*time.Second, "a leader", func() error {
		i = slices.IndexFunc(g.jms, func(jm *JobManager) bool { return jm != nil && jm.IsLeader() })
		if i < 0 {
			return errors.New("no member leads")
		}
		return nil
	})
	return i
}

// waitSameState waits until every running member's FSM holds the same state, and cond holds
// for it.
func (g *jmGroup) waitSameState(what string, cond func(f *fsm) error) {
	g.t.Helper()
	poll.Until(g.t, 20*time.Second, what, func() error {
		var first *fsm
		for i, jm := range g.jms {
			if jm == nil {
				continue
			}
			if err := cond(jm.fsm); err != nil {
				return fmt.Errorf("%s: %w", g.cfgs[i].NodeID, err)
			}
			if first == nil {
				first = jm.fsm
			} else if !proto.Equal(first.state(), jm.fsm.state()) {
				return fmt.Errorf("%s holds another state than the first member", g.cfgs[i].NodeID)
			}
		}
		return nil
	})
}
