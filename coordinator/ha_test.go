package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/internal/poll"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// raftGroup is three Raft members with goflink's FSM on in-memory transports, so that a test
// can partition one of them.
type raftGroup struct {
	t     *testing.T
	rafts []*raft.Raft
	fsms  []*fsm
	trans []*raft.InmemTransport
}

func newRaftGroup(t *testing.T) *raftGroup {
	t.Helper()
	g := &raftGroup{t: t}
	var servers []raft.Server
	for i := range 3 {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("jm-%d", i)))
		g.trans = append(g.trans, tr)
		servers = append(servers, raft.Server{ID: raft.ServerID(addr), Address: addr})
	}
	for i, a := range g.trans {
		for j, b := range g.trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i := range 3 {
		cfg := raft.DefaultConfig()
		cfg.LocalID = servers[i].ID
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout, cfg.CommitTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond, 5*time.Millisecond
		cfg.LogOutput = nil
		cfg.LogLevel = "ERROR"
		store := raft.NewInmemStore()
		f := newFSM(discardLog)
		r, err := raft.NewRaft(cfg, f, store, store, raft.NewInmemSnapshotStore(), g.trans[i])
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
				t.Fatal(err)
			}
		}
		g.rafts, g.fsms = append(g.rafts, r), append(g.fsms, f)
	}
	t.Cleanup(func() {
		for _, r := range g.rafts {
			_ = r.Shutdown().Error()
		}
	})
	return g
}

// leader waits for a leader among the members not in except.
func (g *raftGroup) leader(except int) int {
	g.t.Helper()
	leader := -1
	poll.Until(g.t, 10*time.Second, "a leader", func() error {
		for i, r := range g.rafts {
			if i != except && r.State() == raft.Leader {
				leader = i
				return nil
			}
		}
		return errors.New("no leader elected")
	})
	return leader
}

func (g *raftGroup) apply(i int, cmd *pb.RaftCommand, timeout time.Duration) (any, error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		g.t.Fatal(err)
	}
	f := g.rafts[i].Apply(data, timeout)
	if err := f.Error(); err != nil {
		return nil, err
	}
	if err, ok := f.Response().(error); ok {
		return nil, err
	}
	return f.Response(), nil
}

// partition cuts member i off from the others (both directions), or heals it.
func (g *raftGroup) partition(i int, cut bool) {
	for j := range g.trans {
		if j == i {
			continue
		}
		if cut {
			g.trans[i].Disconnect(g.trans[j].LocalAddr())
			g.trans[j].Disconnect(g.trans[i].LocalAddr())
		} else {
			g.trans[i].Connect(g.trans[j].LocalAddr(), g.trans[j])
			g.trans[j].Connect(g.trans[i].LocalAddr(), g.trans[i])
		}
	}
}

func checkpointIDsOf(f *fsm, job string) []int64 {
	rec, _ := f.job(job)
	var ids []int64
	for _, c := range rec.GetCheckpoints() {
		ids = append(ids, c.GetId())
	}
	return ids
}

// A leader cut off from the majority cannot complete a checkpoint: its completion never
// commits (the commit point is the Raft entry), the majority elects a new leader whose IDs are
// beyond every ID handed out before, and after healing every member holds the same completed
// checkpoints: no ID twice, strictly increasing.
func TestPartitionedLeaderCannotCompleteACheckpoint(t *testing.T) {
	g := newRaftGroup(t)
	old := g.leader(-1)
	for _, cmd := range []*pb.RaftCommand{submitCmd("j", "job", ts(1)), statusCmd("j", running, "", ts(2))} {
		if _, err := g.apply(old, cmd, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	res, err := g.apply(old, allocCmd("j", 64), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if first := res.(int64); first != 1 {
		t.Fatalf("first ID = %d, want 1", first)
	}
	if _, err := g.apply(old, completeCmd("j", 1, 10), time.Second); err != nil {
		t.Fatal(err)
	}

	g.partition(old, true)
	if _, err := g.apply(old, completeCmd("j", 2, 10), 300*time.Millisecond); err == nil {
		t.Fatalf("the partitioned leader completed checkpoint 2")
	}
	if ids := checkpointIDsOf(g.fsms[old], "j"); !slices.Equal(ids, []int64{1}) {
		t.Errorf("the partitioned leader's FSM holds checkpoints %v, want [1]", ids)
	}

	next := g.leader(old)
	res, err = g.apply(next, allocCmd("j", 64), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first := res.(int64)
	if first <= 64 {
		t.Fatalf("new leader's first ID = %d, want beyond the 64 handed out before", first)
	}
	if _, err := g.apply(next, completeCmd("j", first, 10), time.Second); err != nil {
		t.Fatal(err)
	}

	g.partition(old, false)
	want := []int64{1, first}
	poll.Until(t, 10*time.Second, "every member to hold the same checkpoints", func() error {
		for i, f := range g.fsms {
			if ids := checkpointIDsOf(f, "j"); !slices.Equal(ids, want) {
				return fmt.Errorf("member %d holds checkpoints %v, want %v", i, ids, want)
			}
		}
		return nil
	})
	if g.rafts[old].State() == raft.Leader && g.rafts[next].State() == raft.Leader {
		t.Errorf("two leaders after healing")
	}
}

// An undecodable entry and invalid commands that reach the log of a real group of three
// JobManagers (proposed past the leader's own checks, as a forged AppendEntries puts them
// there) are rejected by every member alike: the proposer gets the error, the group keeps
// working with the same state on every member, and a member restarted on its log replays
// them without dying.
func TestGroupRejectsInvalidEntries(t *testing.T) {
	g := startGroup(t, 3)
	l := g.leader()
	r := g.jms[l].node.r
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"undecodable", []byte{0xff, 0xff, 0xff}, ErrInvalidCommand},
		{"no command", rawEntry(t, &pb.RaftCommand{Time: ts(1)}), ErrInvalidCommand},
		{"job ID with a path", rawEntry(t, submitCmd("../../x", "job", ts(1))), ErrInvalidCommand},
		{"status of an unknown job", rawEntry(t, statusCmd("nope", running, "", ts(1))), ErrJobNotFound},
	} {
		f := r.Apply(tc.data, 5*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("%s: the entry did not commit: %v", tc.name, err)
		}
		if err, _ := f.Response().(error); !errors.Is(err, tc.want) {
			t.Errorf("%s: the proposer got %v, want an error wrapping %v", tc.name, f.Response(), tc.want)
		}
	}
	if _, err := g.jms[l].node.apply(submitCmd("j1", "job", ts(2)), 5*time.Second); err != nil {
		t.Fatalf("a valid command after the invalid ones: %v", err)
	}
	hasJob := func(f *fsm) error {
		if _, ok := f.job("j1"); !ok {
			return errors.New("job j1 not applied")
		}
		if n := len(f.list()); n != 1 {
			return fmt.Errorf("%d jobs, want 1", n)
		}
		return nil
	}
	g.waitSameState("every member to hold job j1 and only it", hasJob)

	follower := (l + 1) % 3
	g.stop(follower)
	g.start(follower) // replays the log, invalid entries included
	g.waitSameState("the restarted member to catch up", hasJob)
	if _, err := g.jms[g.leader()].node.apply(statusCmd("j1", running, "", ts(3)), 5*time.Second); err != nil {
		t.Fatalf("a command after the restart: %v", err)
	}
	g.waitSameState("every member to see j1 running", func(f *fsm) error {
		if rec, _ := f.job("j1"); rec.GetStatus() != running {
			return fmt.Errorf("j1 is %v", rec.GetStatus())
		}
		return nil
	})
}
