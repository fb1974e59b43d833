package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/connector/kafka"
	"github.com/goflink/goflink/connector/nexmark"
	"github.com/goflink/goflink/connector/postgres"
	"github.com/goflink/goflink/internal/confine"
	"github.com/goflink/goflink/internal/execid"
	"github.com/goflink/goflink/internal/leaderrpc"
	"github.com/goflink/goflink/internal/metrics"
	"github.com/goflink/goflink/internal/netaddr"
	"github.com/goflink/goflink/internal/security"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// Config configures a TaskManager.
type Config struct {
	// ID names the TaskManager in the cluster view; default "tm-" + the advertised address.
	ID string
	// Addr is where the TaskManager listens and what it advertises (host:port). An empty host
	// listens on all interfaces and advertises the hostname; port 0 picks a free port.
	Addr string
	// JobManagers are JobManager RPC addresses (host:port). The TaskManager registers with the
	// leader among them: it tries them in turn and follows the leader address that a JobManager
	// which does not lead names, also to a JobManager that is not listed.
	JobManagers []string
	// DataDir holds the TaskManager's local files: in scratch/ the working files of its tasks
	// (the bbolt state backend's), removed when the task ends, and at the next start when the
	// process died. Empty: a temporary directory, removed by Close.
	DataDir string
	// Settings is the process configuration (slots, network buffers); nil means defaults.
	Settings *config.Config
	// Operators are custom operator types, besides the built-in ones and the connectors' (the
	// JobManagers must plan the same types).
	Operators []operator.Type
	// Stdout receives the print sink's output (default os.Stdout).
	Stdout io.Writer
	Logger *slog.Logger
	// MetricsListener, when set, serves the Prometheus metrics (metrics.reporter.prom.port);
	// the TaskManager owns it.
	MetricsListener net.Listener
}

// DefaultPort is Flink's default TaskManager port.
const DefaultPort = 6122

// DefaultConfig returns a Config with Flink's default TaskManager port, on loopback (the
// taskmanager command binds every interface only with internal TLS or when given an address).
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:6122", JobManagers: []string{"localhost:6123"}, Settings: config.New()}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("taskmanager address %q: %w", c.Addr, err)
	}
	if len(c.JobManagers) == 0 {
		return errors.New("taskmanager: at least one JobManager address is required")
	}
	for _, a := range c.JobManagers {
		if err := checkJobManagerAddr(a); err != nil {
			return err
		}
	}
	return nil
}

// TaskManager is a running TaskManager process.
type TaskManager struct {
	cfg      Config
	id       string
	instance string // random, chosen at Start: tells this process from another with the same ID
	addr     string // advertised
	slots    int
	sec      *security.Security
	log      *slog.Logger

	srv     *grpc.Server
	metrics *security.HTTPService // nil without Config.MetricsListener
	health  *health.Server
	env     *taskEnv
	scratch *scratch

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn

	// leader is the address of the last known JobManager leader, and lost the address of the
	// JobManager whose registration ended last (tried last, since it may be unreachable); both
	// are owned by connectLoop.
	leader, lost string

	mu    sync.Mutex
	tasks map[string]*task
	loads *loadSampler // the heartbeats' (TaskReport.load)
	// registration is the current registration ("" while there is none) and jmClient the
	// JobManager that accepted it; reports and checkpoint messages go there.
	registration string
	jmClient     pb.TaskManagerServiceClient
	// regCtx lives as long as the current registration: reports and checkpoint messages of
	// the registration use it, so they stop when it ends. endReg ends it with the reason.
	regCtx context.Context
	endReg context.CancelCauseFunc
	// leaderTerm is the highest JobManager leader term seen, from registrations and commands;
	// commands of a lower term come from a deposed leader and are refused (fenceLocked).
	leaderTerm uint64
	// tombstones remember cancelled execution keys for tombstoneTTL, so a SubmitTask that a
	// CancelTask overtook is refused.
	tombstones map[string]time.Time

	reportMu sync.Mutex
	reports  []*pb.UpdateTaskExecutionStateRequest
	reportCh chan struct{}
}

// Start listens, serves and starts registering with the JobManager.
func Start(cfg Config) (*TaskManager, error) {
	served := false // the metrics listener, which Start owns, is closed unless it is served
	defer func() {
		if !served && cfg.MetricsListener != nil {
			cfg.MetricsListener.Close()
		}
	}()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	settings := cmp.Or(cfg.Settings, config.New())
	log := cmp.Or(cfg.Logger, slog.Default())
	stdout := cmp.Or[io.Writer](cfg.Stdout, os.Stdout)
	ops, err := operator.NewRegistry(append([]operator.Type{kafka.Type, nexmark.Type, postgres.Type, postgres.CDCType}, cfg.Operators...)...)
	if err != nil {
		return nil, fmt.Errorf("taskmanager: %w", err)
	}
	sec, err := security.FromSettings(settings, log)
	if err != nil {
		return nil, fmt.Errorf("taskmanager: %w", err)
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("taskmanager listen: %w", err)
	}
	addr, err := netaddr.Advertised(cfg.Addr, lis.Addr())
	if err != nil {
		lis.Close()
		return nil, err
	}
	id := cmp.Or(cfg.ID, "tm-"+addr)
	var b [8]byte
	_, _ = rand.Read(b[:])
	instance := hex.EncodeToString(b[:])
	scr, err := openScratch(cfg.DataDir, instance, log.With("tm_id", id))
	if err != nil {
		lis.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	tm := &TaskManager{
		cfg: cfg, id: id, instance: instance, addr: addr, slots: settings.Int(config.TaskSlots), scratch: scr,
		log: log.With("tm_id", id), ctx: ctx, cancel: cancel,
		conns: map[string]*grpc.ClientConn{}, tasks: map[string]*task{}, loads: newLoadSampler(), tombstones: map[string]time.Time{},
		reportCh: make(chan struct{}, 1), sec: sec,
	}
	partitions := newPartitionRegistry()
	tm.env = &taskEnv{
		selfAddr: addr, partitions: partitions, dataClient: tm.dataClient, report: tm.enqueueReport,
		ack: tm.sendAck, decline: tm.sendDecline,
		operators: ops, allowed: confine.FromSettings(settings, ""), s3: storage.S3SettingsFrom(settings), scratch: scr, stdout: &lockedWriter{w: stdout}, log: tm.log,
		credits: settings.Int(config.BuffersPerChannel), queueCapacity: settings.Int(config.MaxBuffersPerChannel),
		partTimeout: settings.Duration(config.PartitionRequestTimeout), now: time.Now,
	}
	// Only cluster processes call a TaskManager: with internal TLS, a caller without the
	// internal certificate fails the handshake.
	tm.srv = grpc.NewServer(append(sec.InternalServerCreds(), grpc.MaxRecvMsgSize(maxRecordBytes+1<<20))...)
	if !sec.InternalTLS() && !netaddr.IsLoopback(lis.Addr().String()) {
		tm.log.Warn("serving without security.ssl.internal.enabled on a network address: anyone who reaches it can submit tasks and read their data", "addr", lis.Addr().String())
	}
	pb.RegisterTaskExecutorServiceServer(tm.srv, &executorServer{tm: tm})
	pb.RegisterDataExchangeServiceServer(tm.srv, &dataServer{partitions: partitions, timeout: tm.env.partTimeout})
	tm.health = health.NewServer()
	healthpb.RegisterHealthServer(tm.srv, tm.health)
	if settings.Bool(config.RPCReflection) {
		reflection.Register(tm.srv)
	}
	tm.wg.Go(func() {
		if err := tm.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			tm.log.Error("taskmanager server stopped", "err", err)
		}
	})
	if cfg.MetricsListener != nil {
		served = true // Serve owns it now
		if tm.metrics, err = metrics.Serve(cfg.MetricsListener, sec, tm.log, newTMCollector(tm), opCollector{tm}); err != nil {
			_ = tm.Close()
			return nil, fmt.Errorf("taskmanager: %w", err)
		}
	}
	tm.wg.Go(tm.connectLoop)
	tm.wg.Go(tm.reportLoop)
	tm.log.Info("taskmanager started", "addr", addr, "slots", tm.slots, "jobmanagers", strings.Join(cfg.JobManagers, ","))
	return tm, nil
}

// Run starts a TaskManager and serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	tm, err := Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return tm.Close()
}

// ID returns the TaskManager's ID.
func (tm *TaskManager) ID() string { return tm.id }

// Addr returns the advertised address.
func (tm *TaskManager) Addr() string { return tm.addr }

// MetricsAddr returns where the TaskManager serves its Prometheus metrics ("" when it does
// not).
func (tm *TaskManager) MetricsAddr() string {
	if tm.metrics == nil {
		return ""
	}
	return tm.metrics.Addr()
}

// RunningTasks returns the execution keys (job/vertex/subtask/attempt) of the tasks that have
// not ended yet.
func (tm *TaskManager) RunningTasks() []string {
	var out []string
	for _, t := range tm.runningTasks() {
		out = append(out, execid.Key(t.id))
	}
	return out
}

// runningTasks returns the tasks that have not ended yet.
func (tm *TaskManager) runningTasks() []*task {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := make([]*task, 0, len(tm.tasks))
	for _, t := range tm.tasks {
		select {
		case <-t.done:
		default:
			out = append(out, t)
		}
	}
	return out
}

// Close cancels every task, stops serving and waits for all goroutines.
func (tm *TaskManager) Close() error {
	tm.cancel()
	tm.mu.Lock()
	tasks := slices.Collect(maps.Values(tm.tasks))
	tm.mu.Unlock()
	for _, t := range tasks {
		t.requestCancel()
	}
	for _, t := range tasks {
		<-t.done
	}
	tm.health.Shutdown()
	tm.srv.Stop()
	_ = tm.metrics.Close()
	tm.wg.Wait()
	tm.connMu.Lock()
	defer tm.connMu.Unlock()
	for _, c := range tm.conns {
		c.Close()
	}
	tm.conns = map[string]*grpc.ClientConn{}
	if err := tm.scratch.close(); err != nil {
		return fmt.Errorf("taskmanager: remove scratch files: %w", err)
	}
	return nil
}

// conn returns a shared client connection to addr.
func (tm *TaskManager) conn(addr string) (*grpc.ClientConn, error) {
	tm.connMu.Lock()
	defer tm.connMu.Unlock()
	if c, ok := tm.conns[addr]; ok {
		return c, nil
	}
	if tm.ctx.Err() != nil {
		return nil, errors.New("taskmanager is shutting down")
	}
	c, err := grpc.NewClient(addr, tm.sec.InternalDialOption(),
		// Reconnect within a second of a peer coming back (gRPC's default backoff grows to two
		// minutes): a restarted JobManager may be the next leader.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: registerTimeout,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecordBytes+1<<20)),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(16<<20))
	if err != nil {
		return nil, err
	}
	tm.conns[addr] = c
	return c, nil
}

func (tm *TaskManager) dataClient(addr string) (pb.DataExchangeServiceClient, error) {
	c, err := tm.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewDataExchangeServiceClient(c), nil
}

// Registration backoff: after a round in which no JobManager accepted the registration (none
// reachable, none leading during an election), connectLoop waits before the next round. The
// cap is short so that a TaskManager finds a newly elected leader within a quarter second (a
// round is a few cheap RPCs); a longer one added up to a second to every JobManager failover.
const (
	minRegisterBackoff = 50 * time.Millisecond
	maxRegisterBackoff = 250 * time.Millisecond
	// registerTimeout bounds one RegisterTaskManager call.
	registerTimeout = 5 * time.Second
	// idInUseBackoff is the wait before registering again after the leader refused this
	// TaskManager's ID because another live TaskManager holds it.
	idInUseBackoff = 5 * time.Second
)

// connectLoop keeps the TaskManager registered with the JobManager leader: register, heartbeat
// until the JobManager is lost (it died, stopped leading or stopped answering), cancel the tasks
// it ran for that registration, and register again as a new TaskManager — with the leader the
// lost JobManager named, if it named one.
func (tm *TaskManager) connectLoop() {
	backoff := minRegisterBackoff
	for tm.ctx.Err() == nil {
		reg, err := tm.register()
		if err != nil {
			wait := backoff
			if status.Code(err) == codes.AlreadyExists {
				// Another TaskManager process runs with this ID: it keeps it, and this one
				// waits until it is gone instead of knocking it out of the cluster.
				wait = idInUseBackoff
				tm.log.Error("the jobmanager refused this taskmanager's ID; retrying", "err", status.Convert(err).Message(), "retry_in", wait)
			} else {
				tm.log.Debug("no jobmanager accepted the registration; retrying", "err", err, "backoff", backoff)
				backoff = min(backoff*2, maxRegisterBackoff)
			}
			select {
			case <-time.After(wait):
			case <-tm.ctx.Done():
				return
			}
			continue
		}
		backoff = minRegisterBackoff
		tm.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		tm.log.Info("registered with jobmanager", "registration_id", reg.resp.GetRegistrationId(),
			"jobmanager", reg.resp.GetJobmanagerId(), "jobmanager_addr", reg.addr, "leader_term", reg.resp.GetLeaderTerm())
		err = tm.heartbeat(reg)
		tm.mu.Lock()
		tm.registration, tm.jmClient = "", nil
		tm.endReg(err)
		tasks := slices.Collect(maps.Values(tm.tasks))
		tm.mu.Unlock()
		if tm.ctx.Err() != nil {
			return
		}
		tm.lost = reg.addr
		if leader, notLeader := leaderrpc.LeaderHint(err); leader != "" {
			tm.leader = leader
		} else if (notLeader || leaderrpc.NotLeading(err)) && tm.leader == reg.addr {
			tm.leader = ""
		}
		tm.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		level := slog.LevelWarn
		if leaderrpc.Reason(err) == leaderrpc.ReasonShuttingDown {
			level = slog.LevelInfo // an orderly JobManager shutdown
		}
		tm.log.Log(context.Background(), level, "lost jobmanager; cancelling tasks and registering again", "err", err, "tasks", len(tasks))
		for _, t := range tasks {
			t.requestCancel()
		}
		tm.env.partitions.releaseAll(errJobManagerLost)
	}
}

var (
	// errJobManagerLost releases the partitions of a TaskManager that lost its JobManager.
	errJobManagerLost = errors.New("taskmanager lost its jobmanager")
	// errDeposedLeader refuses a registration that a JobManager accepted at a leader term below
	// one the TaskManager has seen.
	errDeposedLeader = errors.New("registration accepted by a deposed leader")
)

// jmRegistration is a registration the JobManager leader accepted and the TaskManager adopted.
type jmRegistration struct {
	addr   string
	client pb.TaskManagerServiceClient
	resp   *pb.RegisterTaskManagerResponse
	ctx    context.Context // ends with the registration, with the reason as its cause
}

// register makes one round of registration attempts. It tries the last known leader first, then
// the configured JobManagers in order, and the JobManager just lost last (a partitioned one
// would hold every round up for registerTimeout). A JobManager answering NOT_LEADER with the
// leader's address sends the next attempt straight there, even to an address that is not
// configured. Each address is tried at most once per round, so JobManagers naming each other
// during an election cannot make it loop. It returns every attempt's error if none succeeded.
func (tm *TaskManager) register() (*jmRegistration, error) {
	queue := make([]string, 0, len(tm.cfg.JobManagers)+2)
	if tm.leader != "" && tm.leader != tm.lost {
		queue = append(queue, tm.leader)
	}
	for _, a := range tm.cfg.JobManagers {
		if a != tm.lost {
			queue = append(queue, a)
		}
	}
	if tm.lost != "" {
		queue = append(queue, tm.lost)
	}
	tried := map[string]bool{}
	var errs []error
	for len(queue) > 0 && tm.ctx.Err() == nil {
		addr := queue[0]
		queue = queue[1:]
		if tried[addr] {
			continue
		}
		tried[addr] = true
		reg, err := tm.registerWith(addr)
		if err == nil {
			tm.leader, tm.lost = addr, ""
			return reg, nil
		}
		if status.Code(err) == codes.AlreadyExists {
			return nil, err // the leader answered: the ID is taken
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		leader, notLeader := leaderrpc.LeaderHint(err)
		if tm.leader == addr && (notLeader || leaderrpc.NotLeading(err) || errors.Is(err, errDeposedLeader)) {
			tm.leader = ""
		}
		if leader != "" {
			tm.leader = leader
			if !tried[leader] {
				queue = append([]string{leader}, queue...)
			}
		}
	}
	if tm.ctx.Err() != nil {
		return nil, tm.ctx.Err()
	}
	return nil, errors.Join(errs...)
}

// registerWith registers with the JobManager at addr and adopts the registration, unless a
// newer leader term was seen already (the JobManager is a deposed leader that does not know it).
func (tm *TaskManager) registerWith(addr string) (*jmRegistration, error) {
	c, err := tm.conn(addr)
	if err != nil {
		return nil, err
	}
	client := pb.NewTaskManagerServiceClient(c)
	ctx, cancel := context.WithTimeout(tm.ctx, registerTimeout)
	resp, err := client.RegisterTaskManager(ctx, &pb.RegisterTaskManagerRequest{TaskmanagerId: tm.id, Address: tm.addr,
		Slots: int32(tm.slots), InstanceId: tm.instance})
	cancel()
	if err != nil {
		return nil, err
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if term := resp.GetLeaderTerm(); term > 0 && term < tm.leaderTerm {
		return nil, fmt.Errorf("registration %s: %w: stale leader term %d < %d", resp.GetRegistrationId(), errDeposedLeader, term, tm.leaderTerm)
	}
	tm.leaderTerm = max(tm.leaderTerm, resp.GetLeaderTerm())
	regCtx, endReg := context.WithCancelCause(tm.ctx)
	tm.registration, tm.jmClient, tm.regCtx, tm.endReg = resp.GetRegistrationId(), client, regCtx, endReg
	return &jmRegistration{addr: addr, client: client, resp: resp, ctx: regCtx}, nil
}

// loseRegistration ends the registration if it is still the current one: its JobManager
// answered a report with err, saying that it does not lead any more. connectLoop then
// registers again.
func (tm *TaskManager) loseRegistration(registration string, err error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if registration != "" && registration == tm.registration {
		tm.endReg(fmt.Errorf("jobmanager does not lead any more: %w", err))
	}
}

// heartbeat runs the heartbeat stream until it breaks, the JobManager stays silent for the
// heartbeat timeout, or the registration ends (loseRegistration, Close).
func (tm *TaskManager) heartbeat(reg *jmRegistration) error {
	// The stream outlives tm.ctx by one message: a closing TaskManager says goodbye on it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := reg.client.Heartbeat(ctx)
	if err != nil {
		return err
	}
	interval := time.Duration(reg.resp.GetHeartbeatIntervalMs()) * time.Millisecond
	timeout := time.Duration(reg.resp.GetHeartbeatTimeoutMs()) * time.Millisecond
	if interval <= 0 || timeout <= 0 {
		return fmt.Errorf("jobmanager sent invalid heartbeat settings %v/%v", interval, timeout)
	}
	acks := make(chan struct{}, 1)
	broken := make(chan error, 1) // written once, so the goroutine never blocks
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				broken <- err
				return
			}
			select {
			case acks <- struct{}{}:
			default:
			}
		}
	}()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	silence := time.NewTimer(timeout)
	defer silence.Stop()
	send := func() error {
		err := stream.Send(&pb.HeartbeatRequest{RegistrationId: reg.resp.GetRegistrationId(), Tasks: tm.taskReports()})
		if err == nil {
			return nil
		}
		// Send reports io.EOF when the JobManager ended the stream; Recv has its status (such
		// as NOT_LEADER with the leader's address).
		select {
		case rerr := <-broken:
			return fmt.Errorf("heartbeat stream: %w", rerr)
		case <-time.After(time.Second):
			return fmt.Errorf("heartbeat send: %w", err)
		}
	}
	if err := send(); err != nil {
		return err
	}
	for {
		select {
		case err := <-broken:
			return fmt.Errorf("heartbeat stream: %w", err)
		case <-acks:
			silence.Reset(timeout)
		case <-ticker.C:
			if err := send(); err != nil {
				return err
			}
		case <-silence.C:
			return fmt.Errorf("no heartbeat answer from the jobmanager for %v", timeout)
		case <-reg.ctx.Done():
			if tm.ctx.Err() == nil {
				return context.Cause(reg.ctx)
			}
			_ = stream.Send(&pb.HeartbeatRequest{RegistrationId: reg.resp.GetRegistrationId(), Closing: true})
			_ = stream.CloseSend()
			select { // wait briefly for the JobManager to end the stream
			case err := <-broken:
				tm.log.Debug("heartbeat stream ended after goodbye", "err", err)
			case <-time.After(time.Second):
			}
			return tm.ctx.Err()
		}
	}
}

func (tm *TaskManager) taskReports() []*pb.TaskReport {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := make([]*pb.TaskReport, 0, len(tm.tasks))
	for _, t := range tm.tasks {
		select {
		case <-t.done:
			continue // ended; its final state is reported separately
		default:
		}
		out = append(out, &pb.TaskReport{Execution: t.id, RecordsIn: t.meter.recordsIn.Load(), RecordsOut: t.meter.recordsOut.Load(), Load: tm.loads.sample(t.meter)})
	}
	tm.loads.forgetUnseen()
	return out
}

// enqueueReport queues a task state change; reportLoop delivers them in order.
func (tm *TaskManager) enqueueReport(r *pb.UpdateTaskExecutionStateRequest) {
	tm.reportMu.Lock()
	tm.reports = append(tm.reports, r)
	tm.reportMu.Unlock()
	select {
	case tm.reportCh <- struct{}{}:
	default:
	}
}

// reportLoop sends task state changes to the JobManager in order, retrying transient errors.
// Reports of an older registration are dropped: that JobManager already failed those tasks (or
// lost its leadership, and the new leader redeploys the job). A JobManager that answers that
// it does not lead ends the registration.
func (tm *TaskManager) reportLoop() {
	for {
		tm.reportMu.Lock()
		var r *pb.UpdateTaskExecutionStateRequest
		if len(tm.reports) > 0 {
			r = tm.reports[0]
			tm.reports = tm.reports[1:]
		}
		tm.reportMu.Unlock()
		if r == nil {
			select {
			case <-tm.reportCh:
				continue
			case <-tm.ctx.Done():
				return
			}
		}
		tm.deliver(r)
		switch r.GetState() {
		case pb.ExecutionState_EXECUTION_STATE_FINISHED, pb.ExecutionState_EXECUTION_STATE_CANCELED, pb.ExecutionState_EXECUTION_STATE_FAILED:
			tm.forget(r.GetExecution()) // the task ended
		}
	}
}

func (tm *TaskManager) deliver(r *pb.UpdateTaskExecutionStateRequest) {
	backoff := 20 * time.Millisecond
	for tm.ctx.Err() == nil {
		client, regCtx := tm.clientFor(r.GetRegistrationId())
		if client == nil {
			return // the registration ended: that JobManager failed the task already
		}
		ctx, cancel := context.WithTimeout(regCtx, 5*time.Second)
		_, err := client.UpdateTaskExecutionState(ctx, r)
		cancel()
		if leaderrpc.NotLeading(err) {
			tm.loseRegistration(r.GetRegistrationId(), err)
			return
		}
		if err == nil || status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition {
			return
		}
		tm.log.Debug("report task state failed; retrying", "err", err)
		select {
		case <-time.After(backoff):
		case <-regCtx.Done():
			return
		}
		backoff = min(backoff*2, time.Second)
	}
}

// tombstoneTTL is how long a cancelled execution key is remembered.
const tombstoneTTL = 10 * time.Minute

// buryLocked remembers a cancelled execution and forgets tombstones older than tombstoneTTL.
func (tm *TaskManager) buryLocked(key string) {
	now := time.Now()
	maps.DeleteFunc(tm.tombstones, func(_ string, at time.Time) bool { return now.Sub(at) > tombstoneTTL })
	tm.tombstones[key] = now
}

func (tm *TaskManager) forget(id *pb.ExecutionAttemptID) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	delete(tm.tasks, execid.Key(id))
}

// executorServer serves TaskExecutorService for the JobManager leader.
type executorServer struct {
	pb.UnimplementedTaskExecutorServiceServer
	tm *TaskManager
}

// checkCommandLocked admits a command of the current leader term (fenceLocked) for the current
// registration. tm.mu is held.
func (tm *TaskManager) checkCommandLocked(registration string, term uint64) error {
	if err := tm.fenceLocked(registration, term); err != nil {
		return err
	}
	if registration == "" || registration != tm.registration || tm.ctx.Err() != nil {
		return status.Errorf(codes.FailedPrecondition, "registration %q is not this TaskManager's current registration", registration)
	}
	return nil
}

// admitLocked decides whether a task may be deployed: current leader term and registration,
// not deployed yet, not cancelled before it arrived (a CancelTask can overtake its SubmitTask).
func (s *executorServer) admitLocked(registration string, term uint64, key string) error {
	if err := s.tm.checkCommandLocked(registration, term); err != nil {
		return err
	}
	if _, dup := s.tm.tasks[key]; dup {
		return status.Errorf(codes.AlreadyExists, "execution %s already deployed", key)
	}
	if _, gone := s.tm.tombstones[key]; gone {
		return status.Errorf(codes.FailedPrecondition, "execution %s was cancelled before it was deployed", key)
	}
	return nil
}

// SubmitTask deploys one task attempt.
func (s *executorServer) SubmitTask(_ context.Context, req *pb.SubmitTaskRequest) (*pb.SubmitTaskResponse, error) {
	s.tm.mu.Lock()
	err := s.tm.checkCommandLocked(req.GetRegistrationId(), req.GetLeaderTerm())
	s.tm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if req.GetSlot() < 0 || int(req.GetSlot()) >= s.tm.slots {
		return nil, status.Errorf(codes.InvalidArgument, "slot %d out of range (this TaskManager has %d)", req.GetSlot(), s.tm.slots)
	}
	if err := validateSubmit(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "submit task: %v", err)
	}
	t, err := newTask(s.tm.ctx, s.tm.env, req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	key := execid.Key(req.GetExecution())
	// Check the term and registration and insert in one critical section, so the sweep of a
	// lost JobManager (connectLoop) either sees this task or this call sees the new registration.
	s.tm.mu.Lock()
	err = s.admitLocked(req.GetRegistrationId(), req.GetLeaderTerm(), key)
	if err == nil {
		s.tm.tasks[key] = t
	}
	s.tm.mu.Unlock()
	if err != nil {
		t.cancel(nil)
		return nil, err
	}
	s.tm.log.Info("deploying task", "task", t.name, "slot", req.GetSlot())
	t.start()
	return &pb.SubmitTaskResponse{}, nil
}

// CancelTask cancels one task attempt and releases its result partitions. A command of a stale
// leader term is refused; the registration need not be the current one.
func (s *executorServer) CancelTask(_ context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	id := req.GetExecution()
	if id == nil {
		return nil, status.Error(codes.InvalidArgument, "execution is required")
	}
	key := execid.Key(id)
	s.tm.mu.Lock()
	if err := s.tm.fenceLocked(req.GetRegistrationId(), req.GetLeaderTerm()); err != nil {
		s.tm.mu.Unlock()
		return nil, err
	}
	t := s.tm.tasks[key]
	s.tm.buryLocked(key)
	s.tm.mu.Unlock()
	cause := errTaskCanceled
	if req.GetJobEnded() {
		cause = &jobEndedError{lastCompleted: req.GetLastCompletedCheckpoint()}
	}
	switch {
	case t == nil:
	case req.GetJobEnded():
		t.requestEndOfJob(req.GetLastCompletedCheckpoint())
	default:
		t.requestCancel()
	}
	s.tm.env.partitions.releaseExecution(id, cause)
	return &pb.CancelTaskResponse{}, nil
}

// checkpointRPCTimeout bounds one acknowledgement or decline to the JobManager.
const checkpointRPCTimeout = 10 * time.Second

// sendAck reports a task's part of a checkpoint to the JobManager of its registration. Lost
// acknowledgements are not retried: the checkpoint expires and a later one succeeds.
func (tm *TaskManager) sendAck(r *pb.AcknowledgeCheckpointRequest) {
	client, regCtx := tm.clientFor(r.GetRegistrationId())
	if client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(regCtx, checkpointRPCTimeout)
	defer cancel()
	if _, err := client.AcknowledgeCheckpoint(ctx, r); err != nil {
		if leaderrpc.NotLeading(err) {
			tm.loseRegistration(r.GetRegistrationId(), err)
		}
		tm.log.Debug("acknowledge checkpoint failed", "checkpoint_id", r.GetCheckpointId(), "err", err)
	}
}

// sendDecline reports that a task does not take a checkpoint.
func (tm *TaskManager) sendDecline(r *pb.DeclineCheckpointRequest) {
	client, regCtx := tm.clientFor(r.GetRegistrationId())
	if client == nil {
		return
	}
	tm.wg.Go(func() { // declines come from the task goroutine, which must not wait for the network
		ctx, cancel := context.WithTimeout(regCtx, checkpointRPCTimeout)
		defer cancel()
		if _, err := client.DeclineCheckpoint(ctx, r); err != nil {
			if leaderrpc.NotLeading(err) {
				tm.loseRegistration(r.GetRegistrationId(), err)
			}
			tm.log.Debug("decline checkpoint failed", "checkpoint_id", r.GetCheckpointId(), "err", err)
		}
	})
}

// clientFor returns the JobManager client and the registration's context if registration is
// still the current one, or nil.
func (tm *TaskManager) clientFor(registration string) (pb.TaskManagerServiceClient, context.Context) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if registration == "" || registration != tm.registration || tm.jmClient == nil {
		return nil, nil
	}
	return tm.jmClient, tm.regCtx
}

// TriggerTaskCheckpoint starts a checkpoint at a source task.
func (s *executorServer) TriggerTaskCheckpoint(ctx context.Context, req *pb.TriggerTaskCheckpointRequest) (*pb.TriggerTaskCheckpointResponse, error) {
	if req.GetBarrier().GetCheckpointId() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "barrier with a positive checkpoint_id is required")
	}
	err := s.tm.checkpointCommand(ctx, req.GetRegistrationId(), req.GetLeaderTerm(), req.GetExecution(), func(t *task) error {
		return t.triggerFromRPC(req.GetBarrier())
	})
	if errors.Is(err, errTaskFinished) {
		// It ended after a checkpoint covered all it emitted; its FINISHED report (on its
		// way) tells the JobManager, which takes its final state into this checkpoint.
		return &pb.TriggerTaskCheckpointResponse{}, nil
	}
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.FailedPrecondition, err.Error())
		}
		return nil, err
	}
	return &pb.TriggerTaskCheckpointResponse{}, nil
}

// NotifyCheckpointComplete tells tasks that a checkpoint is committed (see notify).
func (s *executorServer) NotifyCheckpointComplete(ctx context.Context, req *pb.NotifyCheckpointCompleteRequest) (*pb.NotifyCheckpointCompleteResponse, error) {
	return notify(ctx, s.tm, req.GetRegistrationId(), req.GetLeaderTerm(), notified(req.GetExecution(), req.GetExecutions()), &pb.NotifyCheckpointCompleteResponse{},
		func(t *task) error { return t.notifyComplete(req.GetCheckpointId()) })
}

// NotifyCheckpointAborted tells tasks that a checkpoint was aborted (see notify).
func (s *executorServer) NotifyCheckpointAborted(ctx context.Context, req *pb.NotifyCheckpointAbortedRequest) (*pb.NotifyCheckpointAbortedResponse, error) {
	return notify(ctx, s.tm, req.GetRegistrationId(), req.GetLeaderTerm(), notified(req.GetExecution(), req.GetExecutions()), &pb.NotifyCheckpointAbortedResponse{},
		func(t *task) error { return t.notifyAborted(req.GetCheckpointId(), req.GetLatestCompletedId()) })
}

// notified is the tasks a notification names: its execution, if set, and its executions.
func notified(one *pb.ExecutionAttemptID, more []*pb.ExecutionAttemptID) []*pb.ExecutionAttemptID {
	if one == nil {
		return more
	}
	return append([]*pb.ExecutionAttemptID{one}, more...)
}

// notify runs a checkpoint notification on the goroutine of each task ids names and answers
// resp. Tasks that do not run here are skipped (notifications are best effort: a later
// completion or abort redelivers the latest); a notification of a stale leader term is
// refused, and one that names no task, or an entry without a job ID, is refused before any
// task gets it.
func notify[R any](ctx context.Context, tm *TaskManager, registration string, term uint64, ids []*pb.ExecutionAttemptID, resp *R, f func(t *task) error) (*R, error) {
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "execution is required")
	}
	for i, id := range ids {
		if id.GetJobId() == "" {
			return nil, status.Errorf(codes.InvalidArgument, "execution %d of %d has no job_id", i+1, len(ids))
		}
	}
	tm.mu.Lock()
	err := tm.fenceLocked(registration, term)
	tasks := map[*task]bool{}
	if err == nil && tm.checkCommandLocked(registration, term) == nil {
		for _, id := range ids {
			if t := tm.tasks[execid.Key(id)]; t != nil {
				tasks[t] = true
			}
		}
	}
	tm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Side by side: a task whose mailbox is full (its loop blocked on a slow output) holds up
	// its own notification only, not those of the TaskManager's other tasks.
	var wg sync.WaitGroup
	for t := range tasks {
		wg.Go(func() { _ = t.post(ctx, func() error { return f(t) }) })
	}
	wg.Wait()
	return resp, nil
}

// lockedWriter serializes writes from parallel print sinks; each Write carries whole lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
