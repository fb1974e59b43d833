package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/connector/nexmark"
	"github.com/goflink/goflink/connector/postgres/pgspec"
	"github.com/goflink/goflink/internal/dirlock"
	"github.com/goflink/goflink/internal/metrics"
	"github.com/goflink/goflink/internal/netaddr"
	"github.com/goflink/goflink/internal/security"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
	"github.com/goflink/goflink/web"
)

// ConnectorTypes are the connectors' operator types a JobManager plans specs with besides the
// built-in ones: their descriptions, without client libraries. A client that checks a spec
// before it submits it (flinkctl run --local) plans with the same.
var ConnectorTypes = []operator.Type{kafkaspec.Type, nexmark.Type, pgspec.Type, pgspec.CDCType}

// HealthLeader is the gRPC health service name that is SERVING only on the leader (the
// empty name is the process, SERVING whenever it answers RPCs).
const HealthLeader = "goflink.leader"

// Config configures a JobManager.
type Config struct {
	// NodeID is the stable Raft server ID of this JobManager.
	NodeID string
	// RPCAddr serves clients and TaskManagers (host:port; port 0 picks a free one).
	RPCAddr string
	// RaftAddr serves the Raft transport.
	RaftAddr string
	// RPCListener and RaftListener, when set, are sockets the caller bound (an embedded
	// cluster, or a parent process through socket activation), used instead of listening on
	// RPCAddr and RaftAddr: so the addresses are known, and taken, before the JobManager
	// starts. The address, when set, is still what is advertised, with the listener's port;
	// when empty, the listener's address is. Start owns them: they are closed by Close, or on
	// error.
	RPCListener, RaftListener net.Listener
	// MetricsListener, when set, serves the Prometheus metrics (metrics.reporter.prom.port);
	// RESTListener the dashboard and its JSON API (rest.port). Start owns them like the
	// others.
	MetricsListener, RESTListener net.Listener
	// DataDir holds the Raft log, stable store and snapshots, and in checkpoints/ the
	// checkpoints of jobs when execution.checkpointing.dir is not set.
	DataDir string
	// Peers is the fixed Raft group, this JobManager included, bootstrapped identically on
	// every member when it has no Raft state yet (a restart reuses the state on disk). Empty:
	// a group of this JobManager alone.
	Peers []Peer
	// Settings is the cluster configuration; its job-scope keys are the defaults of every job.
	Settings *config.Config
	// Operators are custom operator types, besides the built-in ones and the connectors' (the
	// JobManager plans specs with them; its TaskManagers must run the same types).
	Operators []operator.Type
	Logger    *slog.Logger
	// RaftLogger receives hashicorp/raft's own records (default Logger), from WARN unless it
	// enables DEBUG.
	RaftLogger *slog.Logger
}

// Peer is one member of the JobManagers' Raft group.
type Peer struct {
	ID       string
	RaftAddr string
}

// ParsePeers parses the --peers flag: "id=host:port,id=host:port,…".
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		id, addr, ok := strings.Cut(item, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peers: %q is not id=host:port", item)
		}
		peers = append(peers, Peer{ID: id, RaftAddr: addr})
	}
	return peers, nil
}

// Flink's default ports of a JobManager.
const (
	DefaultRPCPort  = 6123
	DefaultRaftPort = 6124
)

// DefaultConfig returns a Config with Flink's default ports, on loopback (the jobmanager
// command binds every interface only with internal TLS or when given an address).
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{NodeID: "jm-" + host, RPCAddr: "127.0.0.1:6123", RaftAddr: "127.0.0.1:6124", DataDir: "data/jobmanager", Settings: config.New()}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.NodeID == "" {
		return errors.New("jobmanager: node ID is required")
	}
	if c.DataDir == "" {
		return errors.New("jobmanager: data dir is required")
	}
	// An address may be empty when its listener is given: the listener's is advertised.
	if _, _, err := net.SplitHostPort(c.RPCAddr); err != nil && (c.RPCAddr != "" || c.RPCListener == nil) {
		return fmt.Errorf("jobmanager rpc address %q: %w", c.RPCAddr, err)
	}
	if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil && (c.RaftAddr != "" || c.RaftListener == nil) {
		return fmt.Errorf("jobmanager raft address %q: %w", c.RaftAddr, err)
	}
	self := len(c.Peers) == 0 // no peers: a group of this JobManager alone
	ids, addrs := map[string]bool{}, map[string]bool{}
	for _, p := range c.Peers {
		if _, port, err := net.SplitHostPort(p.RaftAddr); err != nil || port == "0" {
			return fmt.Errorf("peers: %s's raft address %q is not host:port with a fixed port", p.ID, p.RaftAddr)
		}
		if ids[p.ID] {
			return fmt.Errorf("peers: node ID %q appears twice", p.ID)
		}
		if addrs[p.RaftAddr] {
			return fmt.Errorf("peers: raft address %q appears twice", p.RaftAddr)
		}
		ids[p.ID], addrs[p.RaftAddr] = true, true
		self = self || p.ID == c.NodeID
	}
	if !self {
		return fmt.Errorf("peers: this JobManager's node ID %q is not among them", c.NodeID)
	}
	if c.Settings != nil && c.Settings.Duration(config.HeartbeatTimeout) <= c.Settings.Duration(config.HeartbeatInterval) {
		return fmt.Errorf("%s (%v) must be longer than %s (%v)", config.HeartbeatTimeout, c.Settings.Duration(config.HeartbeatTimeout),
			config.HeartbeatInterval, c.Settings.Duration(config.HeartbeatInterval))
	}
	return nil
}

// JobManager is a running JobManager process.
type JobManager struct {
	cfg     Config
	log     *slog.Logger
	rpcAddr string

	fsm  *fsm
	node *raftNode
	rm   *resourceManager
	disp *dispatcher

	lock   *dirlock.Lock // the data dir, held until Close
	sec    *security.Security
	srv    *grpc.Server
	health *health.Server

	peersMu sync.Mutex
	peers   map[string]*grpc.ClientConn // other JobManagers by RPC address

	jobStore jobStoreSettings // how long, and how many, ended jobs are kept

	leading atomic.Bool // leadership established (after Barrier)
	// leaderChanges counts the leadership changes this JobManager saw (the metric).
	leaderChanges atomic.Uint64
	metrics       *security.HTTPService // nil without Config.MetricsListener
	web           *security.HTTPService // nil without Config.RESTListener
	self          *client.Client        // the dashboard's client of this JobManager
	term          atomic.Uint64         // the Raft term of the current leadership: the fencing token of JM→TM commands
	ctx           context.Context
	cancel        context.CancelFunc
	wg            sync.WaitGroup
}

// Start opens the Raft store, serves gRPC and starts following leadership.
func Start(cfg Config) (_ *JobManager, err error) {
	var undo []func() error // what a failed start releases, in reverse
	defer func() {
		if err != nil {
			for _, u := range slices.Backward(undo) {
				_ = u() // best effort: the start failed already
			}
			for _, l := range []net.Listener{cfg.RPCListener, cfg.RaftListener, cfg.MetricsListener, cfg.RESTListener} {
				if l != nil {
					l.Close()
				}
			}
		}
	}()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Settings = cmp.Or(cfg.Settings, config.New())
	log := cmp.Or(cfg.Logger, slog.Default())
	log, raftLog := log.With("jm_id", cfg.NodeID), cmp.Or(cfg.RaftLogger, log).With("jm_id", cfg.NodeID)
	ops, err := operator.NewRegistry(append(slices.Clone(ConnectorTypes), cfg.Operators...)...)
	if err != nil {
		return nil, fmt.Errorf("jobmanager: %w", err)
	}
	// The data dir first: a second JobManager on it fails at once, naming the first.
	lock, err := dirlock.Acquire(cfg.DataDir, "jobmanager")
	if err != nil {
		return nil, err
	}
	undo = append(undo, lock.Release)
	paths, err := newJobPaths(cfg.DataDir, cfg.Settings)
	if err != nil {
		return nil, err
	}
	lis := cfg.RPCListener
	if lis == nil {
		if lis, err = net.Listen("tcp", cfg.RPCAddr); err != nil {
			return nil, fmt.Errorf("jobmanager listen: %w", err)
		}
	}
	undo = append(undo, lis.Close)
	rpcAddr, err := netaddr.Advertised(cfg.RPCAddr, lis.Addr())
	if err != nil {
		return nil, err
	}
	sec, err := security.FromSettings(cfg.Settings, log)
	if err != nil {
		return nil, fmt.Errorf("jobmanager: %w", err)
	}
	f := newFSM(log)
	node, err := openRaft(cfg.NodeID, cfg.RaftAddr, cfg.RaftListener, cfg.DataDir, cfg.Peers, f, newRaftLogger(raftLog), defaultRaftTimings, sec)
	if err != nil {
		return nil, err
	}
	undo = append(undo, node.close)
	ctx, cancel := context.WithCancel(context.Background())
	jm := &JobManager{cfg: cfg, log: log, rpcAddr: rpcAddr, fsm: f, node: node, lock: lock, ctx: ctx, cancel: cancel,
		peers: map[string]*grpc.ClientConn{}, sec: sec, jobStore: jobStoreSettingsFrom(cfg.Settings)}
	jm.rm = newResourceManager(log, cfg.Settings.Duration(config.HeartbeatInterval), cfg.Settings.Duration(config.HeartbeatTimeout),
		func(tm *taskManager, reason string) { jm.disp.tmLost(tm, reason) })
	jm.rm.dial = sec.InternalDialOption()
	jm.disp = newDispatcher(node, f, jm.rm, log, cfg.Settings.JobDefaults(), ops, paths)
	jm.disp.historySize = cfg.Settings.Int(config.ExceptionHistorySize)
	jm.disp.s3 = storage.S3SettingsFrom(cfg.Settings)

	jm.srv = grpc.NewServer(append(sec.JobManagerServerCreds(),
		// Clients ping streams they watch (flinkctl run, TaskManager heartbeats) so that a
		// JobManager cut off by the network is noticed; allow it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Every call is authorized where it arrives, before a follower forwards it.
		grpc.ChainUnaryInterceptor(sec.UnaryInterceptor(rpcClass), jm.forwardUnary),
		grpc.ChainStreamInterceptor(sec.StreamInterceptor(rpcClass), jm.forwardStream))...)
	pb.RegisterJobServiceServer(jm.srv, &jobService{jm: jm})
	pb.RegisterClusterServiceServer(jm.srv, &clusterService{jm: jm})
	pb.RegisterTaskManagerServiceServer(jm.srv, &taskManagerService{jm: jm})
	jm.health = health.NewServer()
	// "" is the process: SERVING while it serves RPCs (as leader, or as a follower that
	// points to the leader); HealthLeader is SERVING only while it leads.
	jm.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	jm.health.SetServingStatus(HealthLeader, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(jm.srv, jm.health)
	if cfg.Settings.Bool(config.RPCReflection) {
		reflection.Register(jm.srv)
	}
	raftBound := cfg.RaftAddr
	if cfg.RaftListener != nil {
		raftBound = cfg.RaftListener.Addr().String()
	}
	warnInsecure(log, sec, lis.Addr().String(), raftBound)
	if cfg.MetricsListener != nil {
		if jm.metrics, err = metrics.Serve(cfg.MetricsListener, sec, jm.log, newJMCollector(jm)); err != nil {
			return nil, fmt.Errorf("jobmanager: %w", err)
		}
		undo = append(undo, jm.metrics.Close)
	}
	if cfg.RESTListener != nil {
		// The dashboard reads through this JobManager's own RPC port: a follower forwards to
		// the leader, as for any client.
		if jm.self, err = client.NewWithOptions(sec.MemberDialOptions(), lis.Addr().String()); err != nil {
			return nil, fmt.Errorf("jobmanager: dashboard client: %w", err)
		}
		undo = append(undo, jm.self.Close)
		jm.web = web.Serve(cfg.RESTListener, jm.self, sec, jm.log)
		undo = append(undo, jm.web.Close)
	}

	jm.wg.Go(jm.advertise)
	jm.wg.Go(func() {
		if err := jm.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			jm.log.Error("jobmanager server stopped", "err", err)
		}
	})
	jm.wg.Go(jm.monitorLeadership)
	jm.log.Info("jobmanager started", "rpc_addr", rpcAddr, "raft_addr", node.addr, "data_dir", cfg.DataDir)
	return jm, nil
}

// Run starts a JobManager and serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	jm, err := Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return jm.Close()
}

// Addr returns the advertised RPC address.
func (jm *JobManager) Addr() string { return jm.rpcAddr }

// RESTAddr returns where the JobManager serves its dashboard and JSON API ("" when it does
// not).
func (jm *JobManager) RESTAddr() string {
	if jm.web == nil {
		return ""
	}
	return jm.web.Addr()
}

// MetricsAddr returns where the JobManager serves its Prometheus metrics ("" when it does
// not).
func (jm *JobManager) MetricsAddr() string {
	if jm.metrics == nil {
		return ""
	}
	return jm.metrics.Addr()
}

// RaftAddr returns the address of the Raft transport.
func (jm *JobManager) RaftAddr() string { return jm.node.addr }

// IsLeader reports whether this JobManager leads and has established leadership.
func (jm *JobManager) IsLeader() bool { return jm.leading.Load() }

func (jm *JobManager) checkLeader() error {
	if jm.ctx.Err() != nil {
		return ErrShuttingDown
	}
	if jm.leading.Load() {
		return nil
	}
	if jm.node.r.State() == raft.Leader {
		return ErrNoLeader // elected, still establishing
	}
	if _, id := jm.node.r.LeaderWithID(); id != "" {
		addr, _ := jm.fsm.jobManagerAddr(string(id))
		return &notLeaderError{leaderID: string(id), leaderAddr: addr}
	}
	return ErrNoLeader
}

// leadership is the lifetime of the leader's duties.
type leadership struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// monitorLeadership starts the leader's duties after Barrier when leadership is gained and
// stops them at once when it is lost. Two consecutive "true" values mean lost and regained.
func (jm *JobManager) monitorLeadership() {
	var cur *leadership
	revoke := func() {
		if cur == nil {
			return
		}
		jm.leading.Store(false)
		jm.health.SetServingStatus(HealthLeader, healthpb.HealthCheckResponse_NOT_SERVING)
		cur.cancel()
		jm.disp.stop()
		jm.rm.close()
		cur.wg.Wait()
		cur = nil
		jm.log.Info("leadership revoked")
	}
	defer revoke()
	leaderCh := jm.node.r.LeaderCh()
	for {
		select {
		case isLeader := <-leaderCh:
			jm.leaderChanges.Add(1)
			revoke()
			if !isLeader {
				continue
			}
			// Every entry committed by earlier leaders is applied first.
			if err := jm.whileLeading("barrier", func() error { return jm.node.r.Barrier(applyTimeout).Error() }); err != nil {
				jm.log.Warn("barrier after election failed; not leading", "err", err)
				continue
			}
			// This JobManager's RPC address, for the leader hints of followers.
			if err := jm.whileLeading("record address", func() error { return jm.registerAddress(jm.cfg.NodeID, jm.rpcAddr) }); err != nil {
				jm.log.Warn("cannot record this jobmanager's address; not leading", "err", err)
				continue
			}
			jm.term.Store(jm.node.r.CurrentTerm())
			l := &leadership{}
			var ctx context.Context
			ctx, l.cancel = context.WithCancel(jm.ctx)
			cur = l
			l.wg.Go(func() { jm.rm.monitor(ctx) })
			l.wg.Go(func() { jm.sweepJobStore(ctx, jm.jobStore) })
			jm.rm.start()
			jm.disp.start(ctx, leaderInfo{id: jm.cfg.NodeID, term: jm.term.Load()})
			jm.leading.Store(true)
			jm.health.SetServingStatus(HealthLeader, healthpb.HealthCheckResponse_SERVING)
			jm.log.Info("leadership established")
		case <-jm.ctx.Done():
			return
		}
	}
}

// registerAddress records a JobManager's RPC address in the FSM through Raft unless it is
// there already.
func (jm *JobManager) registerAddress(nodeID, addr string) error {
	if a, ok := jm.fsm.jobManagerAddr(nodeID); ok && a == addr {
		return nil
	}
	cmd := &pb.RaftCommand{Op: &pb.RaftCommand_RegisterJobmanager{RegisterJobmanager: &pb.RegisterJobManagerCommand{
		NodeId: nodeID, RpcAddress: addr}}}
	_, err := jm.node.apply(cmd, applyTimeout)
	return err
}

// whileLeading runs op until it succeeds, retrying transient errors for as long as this node
// still leads.
func (jm *JobManager) whileLeading(what string, op func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := op()
		if err == nil || jm.node.r.State() != raft.Leader || jm.ctx.Err() != nil {
			return err
		}
		jm.log.Warn(what+" failed; retrying", "err", err)
		select {
		case <-time.After(backoff):
		case <-jm.ctx.Done():
			return jm.ctx.Err()
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// ownStatus describes this JobManager's Raft state.
func (jm *JobManager) ownStatus() *pb.JobManagerInfo {
	r := jm.node.r
	_, leaderID := r.LeaderWithID()
	return &pb.JobManagerInfo{Id: jm.cfg.NodeID, Address: jm.rpcAddr, RaftAddress: jm.node.addr, Role: r.State().String(),
		Term: r.CurrentTerm(), LastIndex: r.LastIndex(), Leader: leaderID == raft.ServerID(jm.cfg.NodeID)}
}

// statusTimeout bounds asking another JobManager for its status.
const statusTimeout = time.Second

// groupStatus describes every member of the Raft group: this one from its own state, the
// others by asking them (in parallel) at their recorded RPC addresses. A member that cannot
// be asked is listed with the reason.
func (jm *JobManager) groupStatus(ctx context.Context) ([]*pb.JobManagerInfo, error) {
	f := jm.node.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	_, leaderID := jm.node.r.LeaderWithID()
	servers := f.Configuration().Servers
	out := make([]*pb.JobManagerInfo, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		if string(srv.ID) == jm.cfg.NodeID {
			out[i] = jm.ownStatus()
			continue
		}
		base := &pb.JobManagerInfo{Id: string(srv.ID), RaftAddress: string(srv.Address), Leader: srv.ID == leaderID}
		out[i] = base // filled in below, or replaced by the member's own answer
		addr, ok := jm.fsm.jobManagerAddr(string(srv.ID))
		if !ok {
			base.Error = "its RPC address is not known yet (it has not registered with a leader)"
			continue
		}
		base.Address = addr
		wg.Go(func() {
			info, err := jm.peerStatus(ctx, addr)
			if err != nil {
				base.Error = err.Error()
				return
			}
			info.RaftAddress = base.RaftAddress
			out[i] = info
		})
	}
	wg.Wait()
	return out, nil
}

// peerStatus asks another JobManager for its own status.
func (jm *JobManager) peerStatus(ctx context.Context, addr string) (*pb.JobManagerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	conn, err := jm.peerConn(addr)
	if err != nil {
		return nil, err
	}
	resp, err := pb.NewClusterServiceClient(conn).GetJobManagerStatus(ctx, &pb.GetJobManagerStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("unreachable: %v", status.Convert(err).Message())
	}
	return resp.GetJobmanager(), nil
}

// peerConn returns a shared client connection to another JobManager. It reconnects within a
// second to a JobManager that comes back (a restarted leader serves forwarded calls at once),
// and a relayed stream to a JobManager cut off by the network breaks within about 15 s.
func (jm *JobManager) peerConn(addr string) (*grpc.ClientConn, error) {
	jm.peersMu.Lock()
	defer jm.peersMu.Unlock()
	if c, ok := jm.peers[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, jm.sec.InternalDialOption(),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}))
	if err != nil {
		return nil, fmt.Errorf("dial jobmanager %s: %w", addr, err)
	}
	jm.peers[addr] = c
	return c, nil
}

// advertiseInterval is how often a JobManager checks that its RPC address is recorded.
const advertiseInterval = 500 * time.Millisecond

// advertise keeps this JobManager's RPC address recorded in the FSM, so that followers can
// hint clients to it once it leads and `flinkctl cluster` can reach it: a leader records it
// itself, a follower through the leader's RegisterJobManager.
func (jm *JobManager) advertise() {
	t := time.NewTicker(advertiseInterval)
	defer t.Stop()
	var refusal string // the leader's last refusal of the address, logged once
	for {
		select {
		case <-t.C:
		case <-jm.ctx.Done():
			return
		}
		if a, ok := jm.fsm.jobManagerAddr(jm.cfg.NodeID); ok && a == jm.rpcAddr {
			continue
		}
		_, leaderID := jm.node.r.LeaderWithID()
		addr, ok := jm.fsm.jobManagerAddr(string(leaderID))
		if leaderID == "" || string(leaderID) == jm.cfg.NodeID || !ok {
			continue // no leader yet, or this node leads and records it itself
		}
		conn, err := jm.peerConn(addr)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(jm.ctx, statusTimeout)
		_, err = pb.NewClusterServiceClient(conn).RegisterJobManager(ctx, &pb.RegisterJobManagerRequest{NodeId: jm.cfg.NodeID, RpcAddress: jm.rpcAddr})
		cancel()
		switch {
		case status.Code(err) == codes.PermissionDenied && status.Convert(err).Message() != refusal:
			// The leader finds the address inconsistent with the Raft configuration: until
			// this member leads, clients do not learn it (flinkctl cluster shows it unknown).
			refusal = status.Convert(err).Message()
			jm.log.Warn("the leader refused this jobmanager's address", "leader", addr, "rpc_addr", jm.rpcAddr, "err", refusal)
		case err != nil:
			jm.log.Debug("recording this jobmanager's address through the leader failed", "leader", addr, "err", err)
		}
	}
}

// Close stops leading, serving and Raft, and waits for every goroutine.
func (jm *JobManager) Close() error {
	jm.cancel()
	jm.health.Shutdown()
	stopped := make(chan struct{})
	go func() { jm.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		jm.srv.Stop()
		<-stopped
	}
	_ = jm.metrics.Close()
	_ = jm.web.Close()
	if jm.self != nil {
		_ = jm.self.Close()
	}
	jm.wg.Wait()
	jm.peersMu.Lock()
	for _, c := range jm.peers {
		c.Close()
	}
	jm.peersMu.Unlock()
	return errors.Join(jm.node.close(), jm.lock.Release())
}

// rpcClass says who may call a method of the JobManager's port: health checks anyone,
// TaskManagerService and RegisterJobManager only cluster processes, the rest clients.
func rpcClass(method string) security.Class {
	switch {
	case strings.HasPrefix(method, "/grpc.health.v1.Health/"):
		return security.Open
	case strings.HasPrefix(method, "/"+pb.TaskManagerService_ServiceDesc.ServiceName+"/"),
		method == pb.ClusterService_RegisterJobManager_FullMethodName:
		return security.Internal
	}
	return security.Client
}

// warnInsecure says at start what the security settings leave open on the ports that are not
// loopback only.
func warnInsecure(log *slog.Logger, sec *security.Security, rpcAddr, raftAddr string) {
	if !sec.InternalTLS() && !netaddr.IsLoopback(raftAddr) {
		log.Warn("serving Raft without security.ssl.internal.enabled on a network address: anyone who reaches it can forge the JobManagers' replicated state", "addr", raftAddr)
	}
	if netaddr.IsLoopback(rpcAddr) {
		return
	}
	if !sec.InternalTLS() {
		log.Warn("serving without security.ssl.internal.enabled on a network address: cluster RPCs are neither encrypted nor authenticated", "addr", rpcAddr)
	}
	if !sec.ClientAuthConfigured() {
		log.Warn("serving clients without security.auth.token-file or client certificates on a network address: anyone who reaches it can submit and cancel jobs", "addr", rpcAddr)
	}
}
