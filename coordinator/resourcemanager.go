package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/execid"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// reasonShutdown is the loss reason of a TaskManager that said goodbye.
const reasonShutdown = "it shut down"

// taskManager is one registration of a TaskManager process. A TaskManager that registers
// again (after it lost us, or restarted) is a new registration; the old one is lost.
type taskManager struct {
	regID string
	// term is the Raft term of the leadership the registration belongs to: the fencing token
	// on every command sent to it (a registration does not outlive its leadership).
	term uint64
	id   string
	// instance is the TaskManager process's random instance ID ("" from an older one).
	instance string
	addr     string
	slots    int
	seq      int
	client   pb.TaskExecutorServiceClient
	conn     *grpc.ClientConn
	// lost is closed when the registration is declared lost.
	lost chan struct{}

	// guarded by resourceManager.mu
	// ready is set by the first heartbeat: the TaskManager has stored its registration ID and
	// accepts tasks for it, so only then are its slots offered.
	ready         bool
	used          []string // job ID per slot, "" when free
	lastHeartbeat time.Time
	reports       map[string]*pb.TaskReport
}

// describe names the TaskManager in failure causes.
func (t *taskManager) describe() string { return fmt.Sprintf("TaskManager %s (%s)", t.id, t.addr) }

// resourceManager tracks registered TaskManagers, their slots and heartbeats. It declares a
// TaskManager lost when its heartbeat stream breaks or stays silent for the heartbeat timeout,
// and tells onLost (outside its lock). Safe for concurrent use.
type resourceManager struct {
	log      *slog.Logger
	interval time.Duration
	timeout  time.Duration
	now      func() time.Time
	onLost   func(tm *taskManager, reason string)
	dial     grpc.DialOption // the transport to TaskManagers (internal TLS)

	mu      sync.Mutex
	tms     map[string]*taskManager
	seq     int
	changed chan struct{} // closed and replaced when slots may have become free
	// open is true while this JobManager leads; registrations are refused otherwise.
	open bool
}

func newResourceManager(log *slog.Logger, interval, timeout time.Duration, onLost func(*taskManager, string)) *resourceManager {
	return &resourceManager{
		log: log, interval: interval, timeout: timeout, now: time.Now, onLost: onLost,
		dial: grpc.WithTransportCredentials(insecure.NewCredentials()),
		tms:  map[string]*taskManager{}, changed: make(chan struct{}),
	}
}

// watch returns a channel closed when slots may have become available.
func (rm *resourceManager) watch() <-chan struct{} {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return rm.changed
}

// Bounds of a TaskManager registration, which is network input: the JobManager sizes its
// bookkeeping by it and logs and shows its strings.
const (
	// maxTaskManagerIDLen bounds a TaskManager ID (the default, "tm-<host>:<port>", fits).
	maxTaskManagerIDLen = 255
	// maxInstanceIDLen bounds a TaskManager's instance ID (16 hex digits from this version).
	maxInstanceIDLen = 64
)

// checkRegistration checks a registration's values, naming the first that is wrong.
func checkRegistration(req *pb.RegisterTaskManagerRequest) error {
	id := req.GetTaskmanagerId()
	if id == "" {
		return fmt.Errorf("register: taskmanager_id is required")
	}
	if len(id) > maxTaskManagerIDLen {
		return fmt.Errorf("register: taskmanager_id is %d bytes long, the limit is %d", len(id), maxTaskManagerIDLen)
	}
	if i := strings.IndexFunc(id, unicode.IsControl); i >= 0 {
		return fmt.Errorf("register: taskmanager_id %q has a control character", id)
	}
	if n := req.GetSlots(); n < 1 || n > config.MaxTaskSlots {
		return fmt.Errorf("register %s: slots must be from 1 to %d (%s), got %d", id, config.MaxTaskSlots, config.TaskSlots, n)
	}
	if err := checkHostPort(req.GetAddress()); err != nil {
		return fmt.Errorf("register %s: address: %w", id, err)
	}
	if n := len(req.GetInstanceId()); n > maxInstanceIDLen {
		return fmt.Errorf("register %s: instance_id is %d bytes long, the limit is %d", id, n, maxInstanceIDLen)
	}
	return nil
}

// register adds a registration. A TaskManager ID belongs to one live TaskManager: while a
// registration under it heartbeats (its last heartbeat is within heartbeat.timeout), a
// registration of the ID from another address is refused with ErrTaskManagerIDInUse, so
// that neither a second process started with the same --id nor anyone who sends a
// registration knocks it out of the cluster. A registration from the same address replaces it
// (the TaskManager registers again after it lost us, or restarted), as does any registration
// once it fell silent (it is lost, the monitor just did not say so yet).
func (rm *resourceManager) register(req *pb.RegisterTaskManagerRequest, term uint64) (*taskManager, error) {
	if err := checkRegistration(req); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(req.GetAddress(), rm.dial)
	if err != nil {
		return nil, fmt.Errorf("register %s: dial %s: %w", req.GetTaskmanagerId(), req.GetAddress(), err)
	}
	tm := &taskManager{
		regID: randomHex(8), term: term, id: req.GetTaskmanagerId(), instance: req.GetInstanceId(),
		addr: req.GetAddress(), slots: int(req.GetSlots()),
		client: pb.NewTaskExecutorServiceClient(conn), conn: conn, lost: make(chan struct{}),
		used: make([]string, req.GetSlots()), reports: map[string]*pb.TaskReport{},
	}
	rm.mu.Lock()
	if !rm.open {
		rm.mu.Unlock()
		conn.Close()
		return nil, fmt.Errorf("register %s: %w", req.GetTaskmanagerId(), ErrNotLeader)
	}
	var previous *taskManager
	for _, old := range rm.tms {
		if old.id == tm.id {
			previous = old
		}
	}
	if previous != nil && previous.addr != tm.addr {
		if silence := rm.now().Sub(previous.lastHeartbeat); silence <= rm.timeout {
			rm.mu.Unlock()
			conn.Close()
			return nil, fmt.Errorf("register %s at %s: %w: the TaskManager at %s holds it (last heartbeat %v ago); give each TaskManager its own --id",
				tm.id, tm.addr, ErrTaskManagerIDInUse, previous.addr, silence.Round(time.Millisecond))
		}
	}
	rm.seq++
	tm.seq = rm.seq
	tm.lastHeartbeat = rm.now()
	rm.tms[tm.regID] = tm
	broadcast(&rm.changed)
	rm.mu.Unlock()
	if previous != nil {
		rm.markLost(previous.regID, "it registered again as a new TaskManager")
	}
	rm.log.Info("taskmanager registered", "tm_id", tm.id, "addr", tm.addr, "slots", tm.slots, "registration_id", tm.regID,
		"instance", tm.instance)
	return tm, nil
}

// get returns a live registration.
func (rm *resourceManager) get(regID string) (*taskManager, bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	tm, ok := rm.tms[regID]
	return tm, ok
}

// ready returns the registrations that heartbeat, in the order they registered.
func (rm *resourceManager) ready() []*taskManager {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	var out []*taskManager
	for _, t := range rm.sortedLocked() {
		if t.ready {
			out = append(out, t)
		}
	}
	return out
}

// heartbeat records a heartbeat and its task counters.
func (rm *resourceManager) heartbeat(regID string, reports []*pb.TaskReport) error {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	tm, ok := rm.tms[regID]
	if !ok {
		return fmt.Errorf("heartbeat from %s: %w", regID, ErrUnknownTaskManager)
	}
	tm.lastHeartbeat = rm.now()
	if !tm.ready {
		tm.ready = true
		broadcast(&rm.changed)
	}
	clear(tm.reports)
	for _, r := range reports {
		tm.reports[execid.Key(r.GetExecution())] = r
	}
	return nil
}

// lastReport returns the last heartbeat report of an execution (counters and load), nil
// when there is none. It is shared: do not modify it.
func (rm *resourceManager) lastReport(regID, execKey string) *pb.TaskReport {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if tm, found := rm.tms[regID]; found {
		return tm.reports[execKey]
	}
	return nil
}

// markLost removes a registration, releases its slots and tells onLost. It is idempotent.
func (rm *resourceManager) markLost(regID, reason string) {
	rm.mu.Lock()
	tm, ok := rm.tms[regID]
	if ok {
		delete(rm.tms, regID)
		broadcast(&rm.changed)
	}
	rm.mu.Unlock()
	if !ok {
		return
	}
	close(tm.lost)
	tm.conn.Close()
	level := slog.LevelWarn
	if reason == reasonShutdown {
		level = slog.LevelInfo
	}
	rm.log.Log(context.Background(), level, "taskmanager lost", "tm_id", tm.id, "addr", tm.addr, "reason", reason)
	if rm.onLost != nil {
		rm.onLost(tm, reason)
	}
}

// monitor declares TaskManagers lost after heartbeat.timeout of silence, until ctx is done.
func (rm *resourceManager) monitor(ctx context.Context) {
	tick := time.NewTicker(max(min(rm.timeout/10, rm.interval), 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		now := rm.now()
		var silent []string
		rm.mu.Lock()
		for id, tm := range rm.tms {
			if now.Sub(tm.lastHeartbeat) > rm.timeout {
				silent = append(silent, id)
			}
		}
		rm.mu.Unlock()
		for _, id := range silent {
			rm.markLost(id, fmt.Sprintf("no heartbeat for %v (heartbeat.timeout)", rm.timeout))
		}
	}
}

// allocate reserves n slots for a job, spread across TaskManagers, or returns nil.
func (rm *resourceManager) allocate(jobID string, n int) []slotRef {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	var free []freeSlots
	for _, tm := range rm.sortedLocked() {
		if tm.ready {
			free = append(free, freeSlots{tm: tm.regID, free: tm.freeLocked()})
		}
	}
	refs := assignSlots(free, n)
	for _, r := range refs {
		rm.tms[r.tm].used[r.slot] = jobID
	}
	return refs
}

// freeCount returns the number of free and total slots.
func (rm *resourceManager) freeCount() (free, total int) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	for _, tm := range rm.tms {
		if tm.ready {
			free += len(tm.freeLocked())
			total += tm.slots
		}
	}
	return free, total
}

// release frees every slot held by a job.
func (rm *resourceManager) release(jobID string) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	for _, tm := range rm.tms {
		for i, j := range tm.used {
			if j == jobID {
				tm.used[i] = ""
			}
		}
	}
	broadcast(&rm.changed)
}

// releaseSlots frees the given slots where the job holds them.
func (rm *resourceManager) releaseSlots(jobID string, refs []slotRef) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	for _, r := range refs {
		if tm, ok := rm.tms[r.tm]; ok && r.slot >= 0 && r.slot < len(tm.used) && tm.used[r.slot] == jobID {
			tm.used[r.slot] = ""
		}
	}
	broadcast(&rm.changed)
}

// sortedLocked returns the registrations in the order they registered.
func (rm *resourceManager) sortedLocked() []*taskManager {
	return slices.SortedFunc(maps.Values(rm.tms), func(a, b *taskManager) int { return cmp.Compare(a.seq, b.seq) })
}

// freeLocked returns the indexes of the registration's free slots, ascending.
func (t *taskManager) freeLocked() []int {
	var free []int
	for i, j := range t.used {
		if j == "" {
			free = append(free, i)
		}
	}
	return free
}

// infos describes the registered TaskManagers (those that heartbeat) for ClusterService.
func (rm *resourceManager) infos() []*pb.TaskManagerInfo {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	var out []*pb.TaskManagerInfo
	for _, tm := range rm.sortedLocked() {
		if !tm.ready {
			continue // registering: not offering slots yet
		}
		out = append(out, &pb.TaskManagerInfo{Id: tm.id, Address: tm.addr, Slots: int32(tm.slots), FreeSlots: int32(len(tm.freeLocked())),
			LastHeartbeat: timestamppb.New(tm.lastHeartbeat)})
	}
	return out
}

// start accepts registrations (leadership established).
func (rm *resourceManager) start() {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.open = true
}

// close refuses registrations and forgets every registration (on leadership loss or shutdown)
// without notifying jobs.
func (rm *resourceManager) close() {
	rm.mu.Lock()
	rm.open = false
	tms := rm.tms
	rm.tms = map[string]*taskManager{}
	broadcast(&rm.changed)
	rm.mu.Unlock()
	for _, tm := range tms {
		close(tm.lost)
		tm.conn.Close()
	}
}
