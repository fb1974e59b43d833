package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/internal/netaddr"
	"github.com/goflink/goflink/internal/security"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// raftNode wraps hashicorp/raft with goflink's FSM, a bbolt log and stable store, file
// snapshots and the TCP transport on its own port.
type raftNode struct {
	id    string // this node's Raft server ID
	r     *raft.Raft
	store *raftboltdb.BoltStore
	trans *raft.NetworkTransport
	addr  string
}

// raftTimings tune elections; a single node elects itself after about one heartbeat timeout.
type raftTimings struct {
	heartbeat, election, lease, commit time.Duration
}

var defaultRaftTimings = raftTimings{heartbeat: 500 * time.Millisecond, election: 500 * time.Millisecond, lease: 250 * time.Millisecond, commit: 10 * time.Millisecond}

// openRaft opens the Raft node. The transport serves on lis when it is set, else on a
// listener bound to bind; the caller closes lis if openRaft fails.
func openRaft(nodeID, bind string, lis net.Listener, dataDir string, peers []Peer, f *fsm, logger hclog.Logger, t raftTimings, sec *security.Security) (*raftNode, error) {
	dir := filepath.Join(dataDir, "raft")
	snapDir := filepath.Join(dir, raftSnapshotsDir)
	for _, d := range []string{dir, snapDir} { // tightened too when an older version made them
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("raft data dir: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("raft data dir: %w", err)
		}
	}
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(nodeID)
	cfg.Logger = logger
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout, cfg.CommitTimeout = t.heartbeat, t.election, t.lease, t.commit
	if err := raft.ValidateConfig(cfg); err != nil {
		return nil, fmt.Errorf("raft config: %w", err)
	}
	// The data dir's lock keeps other JobManagers out; the timeout only keeps a process that
	// ignores it (an older version) from waiting for ever.
	dbPath := filepath.Join(dir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: dbPath, BoltOptions: &bbolt.Options{Timeout: 5 * time.Second}})
	if err != nil {
		return nil, fmt.Errorf("raft log store: %w", err)
	}
	if err := os.Chmod(dbPath, 0o600); err != nil { // bbolt creates it 0600; an older file may be looser
		store.Close()
		return nil, fmt.Errorf("raft log store: %w", err)
	}
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 3, logger)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft snapshot store: %w", err)
	}
	snaps := &privateSnapshotStore{FileSnapshotStore: fileSnaps, dir: snapDir}
	var trans *raft.NetworkTransport
	if self := peerAddr(peers, nodeID); self != "" || lis != nil || sec.InternalTLS() {
		// A member of a --peers group advertises the address the others know it by, as given
		// (a host name stays a name, so a container that comes back with a new IP is found);
		// a listener bound by the caller, its own address unless it is such a member.
		if lis == nil {
			if lis, err = net.Listen("tcp", bind); err != nil {
				store.Close()
				return nil, fmt.Errorf("raft transport on %s: %w", bind, err)
			}
		}
		if self == "" {
			if self, err = netaddr.Advertised(bind, lis.Addr()); err != nil {
				store.Close()
				return nil, fmt.Errorf("raft transport: %w", err)
			}
		}
		// With internal TLS, a peer without the internal certificate fails the handshake on
		// its first read: raft drops the connection.
		stream := &namedStream{Listener: sec.Listen(lis), advertise: self, tls: sec.InternalClientConfig()}
		trans = raft.NewNetworkTransportWithLogger(stream, 3, 10*time.Second, logger)
	} else {
		advertise, err := resolveAdvertise(bind)
		if err != nil {
			store.Close()
			return nil, err
		}
		if trans, err = raft.NewTCPTransportWithLogger(bind, advertise, 3, 10*time.Second, logger); err != nil {
			store.Close()
			return nil, fmt.Errorf("raft transport on %s: %w", bind, err)
		}
	}
	r, err := raft.NewRaft(cfg, f, store, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	n := &raftNode{id: nodeID, r: r, store: store, trans: trans, addr: string(trans.LocalAddr())}
	has, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		_ = n.close()
		return nil, fmt.Errorf("raft state: %w", err)
	}
	if !has {
		// Every member bootstraps the same configuration; Raft accepts it once per group.
		boot := raft.Configuration{Servers: []raft.Server{{ID: cfg.LocalID, Address: trans.LocalAddr()}}}
		if len(peers) > 0 {
			boot.Servers = nil
			for _, p := range peers {
				boot.Servers = append(boot.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
			}
		}
		if err := r.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			_ = n.close()
			return nil, fmt.Errorf("bootstrap raft: %w", err)
		}
	}
	return n, nil
}

// raftSnapshotsDir is the directory of hashicorp/raft's FileSnapshotStore in the raft data
// dir, and raftSnapshotTmpSuffix the suffix of a snapshot's directory while it is written
// (both are the library's; TestRaftFilesArePrivate notices if they change).
const (
	raftSnapshotsDir      = "snapshots"
	raftSnapshotTmpSuffix = ".tmp"
)

// privateSnapshotStore is raft's FileSnapshotStore with snapshots only their owner can read:
// a snapshot holds the whole replicated state (job graphs, with any credentials in their
// configuration). The library creates a snapshot's directory 0755 and its files 0666 (less the
// umask); Create tightens them to 0700 and 0600 before any state is written into them.
type privateSnapshotStore struct {
	*raft.FileSnapshotStore
	dir string
}

func (s *privateSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	if err := makePrivate(filepath.Join(s.dir, sink.ID()+raftSnapshotTmpSuffix)); err != nil {
		_ = sink.Cancel()
		return nil, fmt.Errorf("raft snapshot: %w", err)
	}
	return sink, nil
}

// makePrivate makes a directory 0700 and the files in it 0600.
func makePrivate(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		mode := os.FileMode(0o600)
		if e.IsDir() {
			mode = 0o700
		}
		if err := os.Chmod(filepath.Join(dir, e.Name()), mode); err != nil {
			return err
		}
	}
	return nil
}

// peerAddr returns the Raft address of a node in the peers list ("" when absent).
func peerAddr(peers []Peer, id string) string {
	if i := slices.IndexFunc(peers, func(p Peer) bool { return p.ID == id }); i >= 0 {
		return peers[i].RaftAddr
	}
	return ""
}

// namedStream is a TCP raft.StreamLayer that advertises a host:port as given, unresolved.
type namedStream struct {
	net.Listener
	advertise string
	tls       *tls.Config // nil: plaintext
}

func (s *namedStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.tls == nil {
		return net.DialTimeout("tcp", string(addr), timeout)
	}
	// The handshake is bounded by the dial timeout too: a peer that accepts but never answers
	// does not hold raft's dialer.
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.tls}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, "tcp", string(addr))
}

func (s *namedStream) Addr() net.Addr { return namedAddr(s.advertise) }

// namedAddr is a net.Addr that is a host:port string.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

// resolveAdvertise turns a bind address into a concrete address for the Raft configuration.
func resolveAdvertise(bind string) (net.Addr, error) {
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return nil, fmt.Errorf("raft address %q: %w", bind, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		h, err := os.Hostname()
		if err != nil {
			return nil, err
		}
		host = h
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("raft address %q: bad port", bind)
	}
	if p == 0 {
		return nil, nil // the transport advertises what it bound
	}
	addr, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("raft address %q: %w", bind, err)
	}
	return addr, nil
}

// apply proposes a command stamped with the leader's time and node ID (cmd.Time,
// cmd.Proposer), waits for it to commit and returns the FSM's result value. A domain rejection
// by the FSM is returned as the error; a command the FSM would reject whatever the state
// (validateCommand) is not proposed.
func (n *raftNode) apply(cmd *pb.RaftCommand, timeout time.Duration) (any, error) {
	if err := validateCommand(cmd); err != nil {
		return nil, err // every replica would reject it
	}
	cmd.Time, cmd.Proposer = timestamppb.Now(), n.id
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode raft command: %w", err)
	}
	f := n.r.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return nil, ErrShuttingDown
		}
		return nil, fmt.Errorf("raft apply: %w", err)
	}
	if resErr, ok := f.Response().(error); ok && resErr != nil {
		return nil, resErr
	}
	return f.Response(), nil
}

func (n *raftNode) close() error {
	err := n.r.Shutdown().Error()
	// Shutdown closes the listener but not the pooled connections to the other members, whose
	// handler goroutines would wait on them for ever.
	n.trans.CloseStreams()
	return errors.Join(err, n.store.Close())
}
