package coordinator

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/goflink/goflink/internal/poll"
)

// A forged AppendEntries sent over the network to a member of a real group of three
// JobManagers (Raft in plaintext: what an attacker on the network can do without internal
// TLS) puts an undecodable entry into its log and commits it there. The member applies it
// without dying (the FSM rejects it), and the group elects a leader and goes on, every
// member running.
func TestForgedAppendEntriesDoNotStopTheGroup(t *testing.T) {
	g := startGroup(t, 3)
	target := (g.leader() + 1) % 3
	r := g.jms[target].node.r
	forger, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()

	var forged uint64
	poll.Until(t, 20*time.Second, "the target to take the forged entry", func() error {
		stats := r.Stats()
		term, err1 := strconv.ParseUint(stats["term"], 10, 64)
		last, err2 := strconv.ParseUint(stats["last_log_index"], 10, 64)
		lastTerm, err3 := strconv.ParseUint(stats["last_log_term"], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		req := &raft.AppendEntriesRequest{
			RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("forger"), Addr: []byte(forger.LocalAddr())},
			Term:              term + 1,
			PrevLogEntry:      last,
			PrevLogTerm:       lastTerm,
			Entries:           []*raft.Log{{Index: last + 1, Term: term + 1, Type: raft.LogCommand, Data: []byte{0xff, 0xff, 0xff}}},
			LeaderCommitIndex: last + 1,
		}
		var resp raft.AppendEntriesResponse
		if err := forger.AppendEntries(raft.ServerID(g.cfgs[target].NodeID), raft.ServerAddress(g.cfgs[target].RaftAddr), req, &resp); err != nil {
			return err
		}
		if !resp.Success {
			return fmt.Errorf("refused at index %d (its log moved on)", last+1)
		}
		forged = last + 1
		return nil
	})
	poll.Until(t, 20*time.Second, "the target to apply the forged entry", func() error {
		if applied := r.AppliedIndex(); applied < forged {
			return fmt.Errorf("applied %d, forged entry at %d", applied, forged)
		}
		return nil
	})

	// The group goes on: a leader (maybe the target, whose log is now the longest) commits a
	// valid command, and every member still runs. (Their states may differ now: Raft cannot
	// keep members consistent against a forger that speaks for a leader, which is why the Raft
	// port takes only peers with the internal certificate once internal TLS is on.)
	var tries int
	var id string
	poll.Until(t, 30*time.Second, "a valid command to commit after the forged entry", func() error {
		tries++
		id = fmt.Sprintf("j%d", tries) // an earlier try may have committed after its timeout
		_, err := g.jms[g.leader()].node.apply(submitCmd(id, "job", ts(1)), 5*time.Second)
		return err
	})
	for i, jm := range g.jms {
		if st := jm.node.r.State(); st == raft.Shutdown {
			t.Errorf("%s shut down", g.cfgs[i].NodeID)
		}
	}
	if _, ok := g.jms[g.leader()].fsm.job(id); !ok {
		t.Errorf("the leader does not hold job %s, committed after the forged entry", id)
	}
}
