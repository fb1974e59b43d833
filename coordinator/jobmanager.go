package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/netaddr"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Config configures a JobManager.
type Config struct {
	// NodeID is the stable Raft server ID of this JobManager.
	NodeID string
	// RPCAddr serves clients and TaskManagers (host:port; port 0 picks a free one).
	RPCAddr string
	// RaftAddr serves the Raft transport.
	RaftAddr string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// Settings is the cluster configuration; its job-scope keys are the defaults of every job.
	Settings *config.Config
	// Operators holds custom operators (optional).
	Operators *operator.Registry
	Logger    *slog.Logger
	// RaftLog receives hashicorp/raft's own warnings (default os.Stderr).
	RaftLog io.Writer
}

// DefaultConfig returns a Config with Flink's default ports.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{NodeID: "jm-" + host, RPCAddr: ":6123", RaftAddr: ":6124", DataDir: "data/jobmanager", Settings: config.New()}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.NodeID == "" {
		return errors.New("jobmanager: node ID is required")
	}
	if c.DataDir == "" {
		return errors.New("jobmanager: data dir is required")
	}
	for name, a := range map[string]string{"rpc": c.RPCAddr, "raft": c.RaftAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("jobmanager %s address %q: %w", name, a, err)
		}
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

	lis    net.Listener
	srv    *grpc.Server
	health *health.Server

	leading atomic.Bool // leadership established (after Barrier)
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Start opens the Raft store, serves gRPC and starts following leadership.
func Start(cfg Config) (*JobManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Settings == nil {
		cfg.Settings = config.New()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("jm_id", cfg.NodeID)
	raftLog := cfg.RaftLog
	if raftLog == nil {
		raftLog = os.Stderr
	}
	lis, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		return nil, fmt.Errorf("jobmanager listen: %w", err)
	}
	rpcAddr, err := netaddr.Advertised(cfg.RPCAddr, lis.Addr())
	if err != nil {
		lis.Close()
		return nil, err
	}
	f := newFSM()
	node, err := openRaft(cfg.NodeID, cfg.RaftAddr, cfg.DataDir, f, raftLog, defaultRaftTimings)
	if err != nil {
		lis.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	jm := &JobManager{cfg: cfg, log: log, rpcAddr: rpcAddr, fsm: f, node: node, lis: lis, ctx: ctx, cancel: cancel}
	jm.rm = newResourceManager(log, cfg.Settings.Duration(config.HeartbeatInterval), cfg.Settings.Duration(config.HeartbeatTimeout),
		func(tm *taskManager, reason string) { jm.disp.tmLost(tm, reason) })
	jm.disp = newDispatcher(node, f, jm.rm, log, cfg.Settings.JobDefaults(), cfg.Operators)

	jm.srv = grpc.NewServer()
	pb.RegisterJobServiceServer(jm.srv, &jobService{jm: jm})
	pb.RegisterClusterServiceServer(jm.srv, &clusterService{jm: jm})
	pb.RegisterTaskManagerServiceServer(jm.srv, &taskManagerService{jm: jm})
	jm.health = health.NewServer()
	jm.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(jm.srv, jm.health)
	reflection.Register(jm.srv)

	jm.wg.Add(2)
	go func() {
		defer jm.wg.Done()
		if err := jm.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			jm.log.Error("jobmanager server stopped", "err", err)
		}
	}()
	go func() { defer jm.wg.Done(); jm.monitorLeadership() }()
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
	if addr, _ := jm.node.r.LeaderWithID(); addr != "" {
		return fmt.Errorf("%w (leader raft address %s)", ErrNotLeader, addr)
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
		jm.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
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
			revoke()
			if !isLeader {
				continue
			}
			if err := jm.barrier(); err != nil {
				jm.log.Warn("barrier after election failed; not leading", "err", err)
				continue
			}
			l := &leadership{}
			var ctx context.Context
			ctx, l.cancel = context.WithCancel(jm.ctx)
			cur = l
			l.wg.Add(1)
			go func() { defer l.wg.Done(); jm.rm.monitor(ctx) }()
			jm.rm.start()
			jm.disp.start(ctx)
			jm.leading.Store(true)
			jm.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			jm.log.Info("leadership established")
		case <-jm.ctx.Done():
			return
		}
	}
}

// barrier waits until every entry committed by earlier leaders is applied, retrying for as
// long as this node still leads.
func (jm *JobManager) barrier() error {
	backoff := 50 * time.Millisecond
	for {
		err := jm.node.r.Barrier(applyTimeout).Error()
		if err == nil || jm.node.r.State() != raft.Leader || jm.ctx.Err() != nil {
			return err
		}
		jm.log.Warn("barrier failed; retrying", "err", err)
		select {
		case <-time.After(backoff):
		case <-jm.ctx.Done():
			return jm.ctx.Err()
		}
		backoff = min(backoff*2, 2*time.Second)
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
	jm.wg.Wait()
	return jm.node.close()
}
