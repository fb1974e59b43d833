package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/goflink/goflink/internal/grpctest"
	"github.com/goflink/goflink/internal/leaderrpc"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Every test closes its clients and stops its servers: no connection or stream outlives it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait of these tests.
const testTimeout = 10 * time.Second

// fakeCluster is a group of fake JobManagers on loopback that share one view of who leads and
// one job, "j1". Every change, and every call a JobManager receives, is broadcast on changed,
// so that tests wait for events instead of sleeping.
type fakeCluster struct {
	mu      sync.Mutex
	jms     []*fakeJM
	leader  int                  // index into jms; -1 during an election
	noHints bool                 // followers do not name the leader
	stale   map[int]int          // a follower's own idea of the leader (index), overriding leader
	job     *pb.JobDetails       // nil: the job is unknown
	extra   []*pb.JobManagerInfo // members GetCluster lists before the fake JobManagers
	changed chan struct{}        // closed and replaced on every change
}

// fakeJM is one JobManager of a fakeCluster: the leader serves, a follower answers NOT_LEADER
// naming the leader, and during an election every JobManager answers UNAVAILABLE.
type fakeJM struct {
	pb.UnimplementedJobServiceServer
	pb.UnimplementedClusterServiceServer
	c     *fakeCluster
	idx   int
	id    string
	addr  string
	kill  func()         // stops the server at once, breaking its streams
	calls map[string]int // by method; guarded by c.mu
}

func newFakeCluster(t *testing.T, n int) *fakeCluster {
	t.Helper()
	c := &fakeCluster{leader: 0, changed: make(chan struct{}), stale: map[int]int{},
		job: &pb.JobDetails{Id: "j1", Status: pb.JobStatus_JOB_STATUS_RUNNING}}
	for i := range n {
		jm := &fakeJM{c: c, idx: i, id: "jm" + string(rune('a'+i)), calls: map[string]int{}}
		jm.addr, jm.kill = serveJM(t, jm)
		c.jms = append(c.jms, jm)
	}
	return c
}

func serveJM(t *testing.T, jm *fakeJM) (string, func()) {
	t.Helper()
	return grpctest.Serve(t, func(srv *grpc.Server) {
		pb.RegisterJobServiceServer(srv, jm)
		pb.RegisterClusterServiceServer(srv, jm)
	})
}

// update changes the cluster under its lock and broadcasts the change.
func (c *fakeCluster) update(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn()
	c.broadcastLocked()
}

func (c *fakeCluster) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *fakeCluster) setLeader(i int) { c.update(func() { c.leader = i }) }

func (c *fakeCluster) setStatus(s pb.JobStatus) {
	c.update(func() {
		c.job = proto.Clone(c.job).(*pb.JobDetails)
		c.job.Status = s
	})
}

// waitFor waits until cond, called under the cluster's lock, holds.
func (c *fakeCluster) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// callsOf returns jm's calls of method.
func (c *fakeCluster) callsOf(jm *fakeJM, method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return jm.calls[method]
}

// errLocked is the answer of jm while it does not lead, or nil when it leads.
func (jm *fakeJM) errLocked() error {
	c := jm.c
	leader := c.leader
	if l, ok := c.stale[jm.idx]; ok {
		leader = l
	}
	switch {
	case leader == jm.idx:
		return nil
	case leader < 0:
		st, _ := status.New(codes.Unavailable, "no jobmanager leader is known").
			WithDetails(&errdetails.ErrorInfo{Reason: "NO_LEADER", Domain: "goflink"})
		return st.Err()
	}
	info := &errdetails.ErrorInfo{Reason: leaderrpc.ReasonNotLeader, Domain: "goflink"}
	if !c.noHints {
		info.Metadata = map[string]string{"leader": c.jms[leader].addr, "leader_id": c.jms[leader].id}
	}
	st, _ := status.New(codes.FailedPrecondition, "this jobmanager is not the leader").WithDetails(info)
	return st.Err()
}

// received counts a call and returns the answer for a JobManager that does not lead.
func (jm *fakeJM) received(method string) error {
	c := jm.c
	c.mu.Lock()
	defer c.mu.Unlock()
	jm.calls[method]++
	c.broadcastLocked()
	return jm.errLocked()
}

// jobLocked is the job as jm serves it: its name says who served it.
func (jm *fakeJM) jobLocked(id string) (*pb.JobDetails, error) {
	if jm.c.job == nil || id != jm.c.job.GetId() {
		return nil, status.Errorf(codes.NotFound, "job %s: job not found", id)
	}
	d := proto.Clone(jm.c.job).(*pb.JobDetails)
	d.Name = "served by " + jm.id
	return d, nil
}

func (jm *fakeJM) GetJob(_ context.Context, req *pb.GetJobRequest) (*pb.GetJobResponse, error) {
	if err := jm.received("GetJob"); err != nil {
		return nil, err
	}
	jm.c.mu.Lock()
	defer jm.c.mu.Unlock()
	d, err := jm.jobLocked(req.GetJobId())
	return &pb.GetJobResponse{Job: d}, err
}

// WatchJob streams the job while jm leads, like the JobManager's: it ends after a terminal
// status, and with NOT_LEADER (or UNAVAILABLE) once jm no longer leads.
func (jm *fakeJM) WatchJob(req *pb.WatchJobRequest, stream pb.JobService_WatchJobServer) error {
	if err := jm.received("WatchJob"); err != nil {
		return err
	}
	var last *pb.JobDetails
	for {
		jm.c.mu.Lock()
		err, ch := jm.errLocked(), jm.c.changed
		var d *pb.JobDetails
		if err == nil {
			d, err = jm.jobLocked(req.GetJobId())
		}
		jm.c.mu.Unlock()
		if err != nil {
			return err
		}
		if !proto.Equal(d, last) {
			if err := stream.Send(&pb.WatchJobResponse{Job: d}); err != nil {
				return err
			}
			last = d
		}
		if IsTerminal(d.GetStatus()) {
			return nil
		}
		select {
		case <-ch:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// GetCluster is answered by every JobManager; only the leader lists the TaskManagers.
func (jm *fakeJM) GetCluster(context.Context, *pb.GetClusterRequest) (*pb.GetClusterResponse, error) {
	_ = jm.received("GetCluster")
	c := jm.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &pb.GetClusterResponse{AnsweredBy: c.jms[jm.idx].id, Jobmanagers: slices.Clone(c.extra)}
	for i, m := range c.jms {
		info := &pb.JobManagerInfo{Id: m.id, Address: m.addr, RaftAddress: "raft-" + m.id, Role: "Follower", Term: 2, LastIndex: 7}
		switch {
		case c.leader < 0:
			info.Role = "Candidate"
		case c.leader == i:
			info.Role, info.Leader = "Leader", true
		}
		resp.Jobmanagers = append(resp.Jobmanagers, info)
	}
	if c.leader == jm.idx {
		resp.Taskmanagers = []*pb.TaskManagerInfo{{Id: "tm-0", Address: "127.0.0.1:6122", Slots: 2, FreeSlots: 1,
			LastHeartbeat: timestamppb.New(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC))}}
	}
	return resp, nil
}

func newClient(t *testing.T, addrs ...string) *Client {
	t.Helper()
	cl, err := New(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// servedBy asserts that a job came from the JobManager named want.
func servedBy(t *testing.T, what string, d *pb.JobDetails, err error, want *fakeJM) {
	t.Helper()
	if err != nil || d.GetName() != "served by "+want.id {
		t.Fatalf("%s = %q, %v; want the job served by %s", what, d.GetName(), err, want.id)
	}
}

// Given only a follower's address, a call lands on the leader the follower names.
func TestFollowsLeaderHint(t *testing.T) {
	c := newFakeCluster(t, 3)
	leader, follower := c.jms[0], c.jms[2]
	cl := newClient(t, follower.addr)
	ctx := testContext(t)

	d, err := cl.Job(ctx, "j1")
	servedBy(t, "Job(j1) given a follower's address", d, err, leader)
	if f, l, o := c.callsOf(follower, "GetJob"), c.callsOf(leader, "GetJob"), c.callsOf(c.jms[1], "GetJob"); f != 1 || l != 1 || o != 0 {
		t.Errorf("follower, leader, other follower got %d, %d, %d calls; want 1, 1, 0", f, l, o)
	}
}

// The JobManager that served a call is tried first by the next one, and a new leader takes
// its place once a call has followed the hint to it.
func TestStickyLeader(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.setLeader(2)
	a, b, leader := c.jms[0], c.jms[1], c.jms[2]
	cl := newClient(t, a.addr, b.addr, leader.addr)
	ctx := testContext(t)

	for i := range 3 {
		d, err := cl.Job(ctx, "j1")
		servedBy(t, "Job(j1)", d, err, leader)
		if got := c.callsOf(leader, "GetJob"); got != i+1 {
			t.Errorf("after call %d the leader got %d calls, want %d", i+1, got, i+1)
		}
	}
	if ca, cb := c.callsOf(a, "GetJob"), c.callsOf(b, "GetJob"); ca != 1 || cb != 0 {
		t.Errorf("followers got %d, %d calls; want 1, 0 (only the first call went to the first address, and its hint to the leader)", ca, cb)
	}

	// Leadership moves to b: the next call asks the old leader, which names b.
	c.setLeader(1)
	d, err := cl.Job(ctx, "j1")
	servedBy(t, "Job(j1) after the leader changed", d, err, b)
	d, err = cl.Job(ctx, "j1")
	servedBy(t, "Job(j1) again", d, err, b)
	if ca, cb, co := c.callsOf(a, "GetJob"), c.callsOf(b, "GetJob"), c.callsOf(leader, "GetJob"); ca != 1 || cb != 2 || co != 4 {
		t.Errorf("a, b, old leader got %d, %d, %d calls; want 1, 2, 4", ca, cb, co)
	}
}

// Calls from many goroutines, while leadership moves around, all land on a leader.
func TestConcurrentCallsFollowLeader(t *testing.T) {
	c := newFakeCluster(t, 3)
	cl := newClient(t, c.jms[0].addr, c.jms[1].addr, c.jms[2].addr)
	ctx := testContext(t)

	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				if _, err := cl.Job(ctx, "j1"); err != nil {
					errs <- err
				}
			}
		})
	}
	served := func() int {
		n := 0
		for _, jm := range c.jms {
			n += jm.calls["GetJob"]
		}
		return n
	}
	for i, next := range []int{1, 2, 0} {
		c.waitFor(t, "more calls", func() bool { return served() >= (i+1)*workers })
		c.setLeader(next)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Job(j1) while the leader moved: %v", err)
	}
}

// During an election the call waits, backing off, and succeeds once a leader is known.
func TestRetriesUntilLeaderElected(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.setLeader(-1)
	cl := newClient(t, c.jms[0].addr, c.jms[1].addr, c.jms[2].addr)
	ctx := testContext(t)

	type result struct {
		d   *pb.JobDetails
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := cl.Job(ctx, "j1")
		done <- result{d, err}
	}()
	// Let it go round all three twice, then elect jm c.
	c.waitFor(t, "two rounds over the JobManagers", func() bool {
		for _, jm := range c.jms {
			if jm.calls["GetJob"] < 2 {
				return false
			}
		}
		return true
	})
	c.setLeader(2)
	select {
	case r := <-done:
		servedBy(t, "Job(j1) across an election", r.d, r.err, c.jms[2])
	case <-ctx.Done():
		t.Fatal("Job(j1) did not return after a leader was elected")
	}
}

// A JobManager that is down is skipped: the others serve.
func TestSkipsJobManagerThatIsDown(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.jms[0].kill()
	c.setLeader(1)
	cl := newClient(t, c.jms[0].addr, c.jms[1].addr, c.jms[2].addr)
	d, err := cl.Job(testContext(t), "j1")
	servedBy(t, "Job(j1) with the first JobManager down", d, err, c.jms[1])
}

// When no leader appears within Wait, the error names every address tried and the last error.
func TestElectionOutlastsWait(t *testing.T) {
	c := newFakeCluster(t, 2)
	c.setLeader(-1)
	dead := c.jms[1].addr
	c.jms[1].kill()
	cl := newClient(t, c.jms[0].addr, dead)
	cl.Wait = 300 * time.Millisecond

	start := time.Now()
	_, err := cl.Job(testContext(t), "j1")
	if took := time.Since(start); took < cl.Wait {
		t.Errorf("Job(j1) gave up after %v, want at least Wait (%v)", took, cl.Wait)
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Job(j1) error code = %v, want Unavailable: %v", status.Code(err), err)
	}
	for _, want := range []string{"within 300ms", c.jms[0].addr, dead, "last error from " + dead} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Job(j1) error = %v, want it to contain %q", err, want)
		}
	}
	if n := c.callsOf(c.jms[0], "GetJob"); n < 2 {
		t.Errorf("the live JobManager got %d calls, want the call retried", n)
	}
}

// Followers with stale views naming each other do not keep a call going: it ends after Wait.
func TestStaleHintsNamingEachOther(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.update(func() {
		c.leader = 2
		c.stale[0], c.stale[1] = 1, 0
	})
	cl := newClient(t, c.jms[0].addr)
	cl.Wait = 200 * time.Millisecond
	_, err := cl.Job(testContext(t), "j1")
	if err == nil || !strings.Contains(err.Error(), c.jms[0].addr) || !strings.Contains(err.Error(), c.jms[1].addr) {
		t.Fatalf("Job(j1) = %v, want an error naming both followers", err)
	}
	if n := c.callsOf(c.jms[2], "GetJob"); n != 0 {
		t.Errorf("the leader nobody names got %d calls, want 0", n)
	}
}

// The context ends a call that is waiting for a leader, however long Wait is.
func TestContextEndsWaitForLeader(t *testing.T) {
	c := newFakeCluster(t, 1)
	c.setLeader(-1)
	cl := newClient(t, c.jms[0].addr)
	cl.Wait = time.Hour
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		_, err := cl.Job(ctx, "j1")
		done <- err
	}()
	c.waitFor(t, "three tries", func() bool { return c.jms[0].calls["GetJob"] >= 3 })
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(testTimeout):
		t.Fatal("Job(j1) did not return after its context was canceled")
	}
	switch {
	case errors.Is(err, context.Canceled):
		if !strings.Contains(err.Error(), "no jobmanager leader is known") {
			t.Errorf("Job(j1) = %v, want the last error with the context's", err)
		}
	case status.Code(err) == codes.Canceled: // the cancellation ended an RPC under way
	default:
		t.Errorf("Job(j1) = %v, want context.Canceled", err)
	}
}

// An error that is not about leadership is the answer: no other JobManager is asked.
func TestNonRetryableErrorReturnedAtOnce(t *testing.T) {
	c := newFakeCluster(t, 3)
	cl := newClient(t, c.jms[0].addr, c.jms[1].addr, c.jms[2].addr)
	ctx := testContext(t)
	_, err := cl.Job(ctx, "missing")
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "job missing: job not found" {
		t.Errorf("Job(missing) = %v, want the leader's NOT_FOUND as it is", err)
	}
	if a, b, cc := c.callsOf(c.jms[0], "GetJob"), c.callsOf(c.jms[1], "GetJob"), c.callsOf(c.jms[2], "GetJob"); a != 1 || b != 0 || cc != 0 {
		t.Errorf("JobManagers got %d, %d, %d calls; want 1, 0, 0", a, b, cc)
	}
}

// A follower that does not know the leader's address makes the client try the others.
func TestNotLeaderWithoutHint(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.update(func() { c.leader, c.noHints = 2, true })
	cl := newClient(t, c.jms[0].addr, c.jms[1].addr, c.jms[2].addr)
	d, err := cl.Job(testContext(t), "j1")
	servedBy(t, "Job(j1) without hints", d, err, c.jms[2])
}

// Cluster asks the leader when a follower answered: only the leader lists the TaskManagers.
func TestClusterAsksLeader(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.setLeader(1)
	cl := newClient(t, c.jms[0].addr)
	ctx := testContext(t)
	// GetCluster needs no leader: jm a answers, naming b.
	resp, err := cl.Cluster(ctx)
	if err != nil || len(resp.GetJobmanagers()) != 3 || len(resp.GetTaskmanagers()) != 1 {
		t.Fatalf("Cluster() = %v, %v; want 3 JobManagers and the leader's TaskManager", resp, err)
	}
	if a, b := c.callsOf(c.jms[0], "GetCluster"), c.callsOf(c.jms[1], "GetCluster"); a != 1 || b != 1 {
		t.Errorf("follower, leader got %d, %d GetCluster calls; want 1, 1", a, b)
	}
	// The leader is now the one asked first.
	if _, err := cl.Cluster(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := c.callsOf(c.jms[0], "GetCluster"), c.callsOf(c.jms[1], "GetCluster"); a != 1 || b != 2 {
		t.Errorf("after a second call follower, leader got %d, %d GetCluster calls; want 1, 2", a, b)
	}

	// The leader is down: the follower's answer is the answer.
	c.jms[1].kill()
	resp, err = cl.Cluster(ctx)
	if err != nil || len(resp.GetJobmanagers()) != 3 || len(resp.GetTaskmanagers()) != 0 {
		t.Errorf("Cluster() with the leader down = %v, %v; want the follower's answer", resp, err)
	}
}

// watchResult is what Watch returned.
type watchResult struct {
	last *pb.JobDetails
	err  error
}

// startWatch watches j1 in the background, sending every message fn sees on seen.
func startWatch(ctx context.Context, cl *Client) (seen chan *pb.JobDetails, done chan watchResult) {
	seen, done = make(chan *pb.JobDetails, 100), make(chan watchResult, 1)
	go func() {
		last, err := cl.Watch(ctx, "j1", func(d *pb.JobDetails) error {
			seen <- d
			return nil
		})
		done <- watchResult{last, err}
	}()
	return seen, done
}

func nextSeen(t *testing.T, seen chan *pb.JobDetails) *pb.JobDetails {
	t.Helper()
	select {
	case d := <-seen:
		return d
	case <-time.After(testTimeout):
		t.Fatal("the watch saw nothing more")
		return nil
	}
}

func expectSeen(t *testing.T, seen chan *pb.JobDetails, status pb.JobStatus, from *fakeJM) {
	t.Helper()
	d := nextSeen(t, seen)
	if d.GetStatus() != status || d.GetName() != "served by "+from.id {
		t.Fatalf("the watch saw %v %q, want %v served by %s", d.GetStatus(), d.GetName(), status, from.id)
	}
}

func waitWatch(t *testing.T, done chan watchResult) watchResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(testTimeout):
		t.Fatal("Watch did not return")
		return watchResult{}
	}
}

// The leader steps down: its stream ends with NOT_LEADER naming the new leader, which the
// watch resumes on although only the old leader's address was given.
func TestWatchResumesOnNewLeader(t *testing.T) {
	c := newFakeCluster(t, 3)
	a, b := c.jms[0], c.jms[1]
	cl := newClient(t, a.addr)
	seen, done := startWatch(testContext(t), cl)

	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_RUNNING, a)
	c.setLeader(1)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_RUNNING, b)
	c.setStatus(pb.JobStatus_JOB_STATUS_FINISHED)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_FINISHED, b)

	r := waitWatch(t, done)
	if r.err != nil || r.last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("Watch = %v, %v; want FINISHED", r.last.GetStatus(), r.err)
	}
	if wa, wb := c.callsOf(a, "WatchJob"), c.callsOf(b, "WatchJob"); wa != 1 || wb != 1 {
		t.Errorf("old, new leader got %d, %d WatchJob calls; want 1, 1 (the hint is tried first)", wa, wb)
	}
}

// The leader dies mid-stream and an election follows: the watch waits for the new leader and
// resumes there.
func TestWatchResumesAfterLeaderDies(t *testing.T) {
	c := newFakeCluster(t, 3)
	cl := newClient(t, c.jms[0].addr, c.jms[1].addr, c.jms[2].addr)
	seen, done := startWatch(testContext(t), cl)

	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_RUNNING, c.jms[0])
	c.setLeader(-1)
	c.jms[0].kill()
	c.waitFor(t, "the watch to ask the remaining JobManagers during the election", func() bool {
		return c.jms[1].calls["WatchJob"] >= 1 && c.jms[2].calls["WatchJob"] >= 1
	})
	c.setLeader(2)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_RUNNING, c.jms[2])
	c.setStatus(pb.JobStatus_JOB_STATUS_CANCELED)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_CANCELED, c.jms[2])
	if r := waitWatch(t, done); r.err != nil || r.last.GetStatus() != pb.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("Watch = %v, %v; want CANCELED", r.last.GetStatus(), r.err)
	}
}

// A watch of a job that has ended returns with its one message; the stream is not resumed.
func TestWatchEndsWithJob(t *testing.T) {
	c := newFakeCluster(t, 1)
	c.setStatus(pb.JobStatus_JOB_STATUS_FAILED)
	cl := newClient(t, c.jms[0].addr)
	seen, done := startWatch(testContext(t), cl)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_FAILED, c.jms[0])
	if r := waitWatch(t, done); r.err != nil || r.last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED {
		t.Errorf("Watch = %v, %v; want FAILED", r.last.GetStatus(), r.err)
	}
	if n := c.callsOf(c.jms[0], "WatchJob"); n != 1 {
		t.Errorf("WatchJob calls = %d, want 1", n)
	}
}

// A stream that breaks with an error that is not about leadership ends the watch with it.
func TestWatchNonRetryableError(t *testing.T) {
	c := newFakeCluster(t, 2)
	cl := newClient(t, c.jms[0].addr, c.jms[1].addr)
	seen, done := startWatch(testContext(t), cl)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_RUNNING, c.jms[0])
	c.update(func() { c.job = nil })
	r := waitWatch(t, done)
	if status.Code(r.err) != codes.NotFound || r.last.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("Watch = %v, %v; want the last details (RUNNING) and NOT_FOUND", r.last.GetStatus(), r.err)
	}
	if a, b := c.callsOf(c.jms[0], "WatchJob"), c.callsOf(c.jms[1], "WatchJob"); a != 1 || b != 0 {
		t.Errorf("WatchJob calls = %d, %d; want 1, 0", a, b)
	}
}

// fn's error ends the watch as it is, and so does the context.
func TestWatchStoppedByCallback(t *testing.T) {
	c := newFakeCluster(t, 1)
	cl := newClient(t, c.jms[0].addr)
	stop := errors.New("enough")
	last, err := cl.Watch(testContext(t), "j1", func(*pb.JobDetails) error { return stop })
	if !errors.Is(err, stop) || last.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("Watch = %v, %v; want RUNNING and fn's error", last.GetStatus(), err)
	}

	ctx, cancel := context.WithCancel(testContext(t))
	last, err = cl.Watch(ctx, "j1", func(*pb.JobDetails) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || last.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("Watch with its context canceled = %v, %v; want RUNNING and context.Canceled", last.GetStatus(), err)
	}
}
