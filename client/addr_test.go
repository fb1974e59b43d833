package client

import (
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/goflink/goflink/internal/grpctest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

func TestParseAddrs(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"localhost:6123"}, []string{"localhost:6123"}},
		{[]string{"127.0.0.1"}, []string{"127.0.0.1:6123"}},
		{[]string{"jm1, jm2:6133 ,,jm1:6123"}, []string{"jm1:6123", "jm2:6133"}},
		{[]string{"a:1", "b:2,a:1"}, []string{"a:1", "b:2"}},
		{[]string{":6123"}, []string{"localhost:6123"}},
		{[]string{"[::1]:7000"}, []string{"[::1]:7000"}},
		{[]string{"::1"}, []string{"[::1]:6123"}},
		{[]string{"[::1]"}, []string{"[::1]:6123"}},
		{[]string{"jm-1.example.com."}, []string{"jm-1.example.com.:6123"}},
		{[]string{"goflink_jm1:6123"}, []string{"goflink_jm1:6123"}},
	} {
		got, err := ParseAddrs(tc.in...)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseAddrs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want string // in the error
	}{
		{"localhost:6123x", `jobmanager address "localhost:6123x": port "6123x": want a number from 1 to 65535`},
		{"localhost:0", `port "0"`},
		{"localhost:70000", `port "70000"`},
		{"localhost:", `port ""`},
		{"a:b:c", `jobmanager address "a:b:c": want host:port: too many colons in address`},
		{"http://localhost:6123", "without a scheme"},
		{"local host:6123", `host "local host"`},
		{"jm1:6123,jm2:x", `jobmanager address "jm2:x"`},
		{" , ", "no jobmanager address given"},
	} {
		if got, err := ParseAddrs(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseAddrs(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := New("127.0.0.1:6123x"); err == nil {
		t.Error("New(127.0.0.1:6123x) succeeded, want the address's error")
	}
}

// rawTCP listens on loopback like a Raft transport: it accepts connections, reads what the
// client sends and closes them without a word of gRPC.
func rawTCP(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_, _ = conn.Read(make([]byte, 64))
				conn.Close()
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	return lis.Addr().String()
}

// grpcWithoutJobs is a gRPC server without the JobManager's services, like a TaskManager.
func grpcWithoutJobs(t *testing.T) string {
	t.Helper()
	addr, _ := grpctest.Serve(t, func(*grpc.Server) {})
	return addr
}

// An address that answers, but not as a goflink JobManager, fails a call at once when it is the
// only one, saying what it probably is; next to a JobManager it is skipped.
func TestNotAJobManager(t *testing.T) {
	raft, tm := rawTCP(t), grpcWithoutJobs(t)
	for _, tc := range []struct {
		addr, prefix, suffix string
	}{
		// The TCP server closes the connection after reading a little: the client sees the end
		// of the stream or, when it had sent more than was read, a reset.
		{raft, raft + " does not answer as a goflink JobManager (error reading server preface: ",
			"); is it the Raft port? the RPC port is 6123 by default"},
		{tm, tm + " does not answer as a goflink JobManager (unknown service goflink.v1.JobService); is it a TaskManager? the JobManager's RPC port is 6123 by default", ""},
	} {
		cl := newClient(t, tc.addr)
		start := time.Now()
		_, err := cl.Job(testContext(t), "j1")
		var nj *NotJobManagerError
		if !errors.As(err, &nj) || nj.Addr != tc.addr || !strings.HasPrefix(err.Error(), tc.prefix) || !strings.HasSuffix(err.Error(), tc.suffix) {
			t.Errorf("Job(j1) at %s = %v; want %q…%q", tc.addr, err, tc.prefix, tc.suffix)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Job(j1) at %s took %v, want an answer at once, not after Wait (%v)", tc.addr, took, cl.Wait)
		}
	}

	c := newFakeCluster(t, 1)
	cl := newClient(t, raft, tm, c.jms[0].addr)
	d, err := cl.Job(testContext(t), "j1")
	servedBy(t, "Job(j1) given the Raft port, a TaskManager and the JobManager", d, err, c.jms[0])
}

// While no JobManager can serve, Retrying is told what was tried and the last error, and the
// call's error says the same once Wait is over.
func TestRetryingNotice(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	cl := newClient(t, dead)
	cl.Wait = 1500 * time.Millisecond
	var notices []Retry
	cl.Retrying = func(r Retry) { notices = append(notices, r) }

	_, err = cl.Job(testContext(t), "j1")
	if len(notices) != 1 {
		t.Fatalf("Retrying was told %d times in %v, want once (after 1 s): %v", len(notices), cl.Wait, notices)
	}
	n := notices[0]
	if !slices.Equal(n.Tried, []string{dead}) || n.LastAddr != dead || n.Waited < retryNoticeAfter/2 {
		t.Errorf("notice = %+v, want the dead address after at least %v", n, retryNoticeAfter/2)
	}
	want := ": no jobmanager could serve the request yet (tried " + dead + "; last error from " + dead + ": dial tcp " + dead + ": connect: connection refused)"
	if !strings.HasPrefix(n.String(), "retrying for up to ") || !strings.HasSuffix(n.String(), want) {
		t.Errorf("notice = %q, want \"retrying for up to …%s\"", n.String(), want)
	}
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.LastAddr != dead {
		t.Fatalf("Job(j1) = %v, want an *UnavailableError", err)
	}
	want = "no jobmanager could serve the request within 1.5s (tried " + dead + "); last error from " + dead + ": dial tcp " + dead + ": connect: connection refused"
	if err.Error() != want {
		t.Errorf("Job(j1) error = %q, want %q", err, want)
	}
}

// learnedAddrs returns the client's learned addresses.
func learnedAddrs(cl *Client) []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return slices.Clone(cl.learned)
}

// Given only the leader's address, a watch learns the other members from the group and resumes
// on the new leader after the old one died; a member advertised under a name this machine
// cannot resolve (a container's name) is left out and does not hold anything up.
func TestWatchResumesOnLearnedMember(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.update(func() {
		c.extra = []*pb.JobManagerInfo{{Id: "jm-elsewhere", Address: "jm-elsewhere.invalid:6123"}}
	})
	a, b := c.jms[0], c.jms[1]
	cl := newClient(t, a.addr)
	cl.Wait = time.Minute
	seen, done := startWatch(testContext(t), cl)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_RUNNING, a)

	deadline := time.Now().Add(testTimeout)
	for !slices.Equal(learnedAddrs(cl), []string{b.addr, c.jms[2].addr}) {
		if time.Now().After(deadline) {
			t.Fatalf("learned %q, want the other members %q", learnedAddrs(cl), []string{b.addr, c.jms[2].addr})
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The leader dies; the others still name it until b is elected.
	a.kill()
	c.waitFor(t, "the watch to ask the learned members", func() bool {
		return b.calls["WatchJob"] >= 1 && c.jms[2].calls["WatchJob"] >= 1
	})
	c.setLeader(1)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_RUNNING, b)
	c.setStatus(pb.JobStatus_JOB_STATUS_FINISHED)
	expectSeen(t, seen, pb.JobStatus_JOB_STATUS_FINISHED, b)
	if r := waitWatch(t, done); r.err != nil || r.last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("Watch = %v, %v; want FINISHED", r.last.GetStatus(), r.err)
	}
	if got := cl.order(""); slices.Contains(got, "jm-elsewhere.invalid:6123") || got[1] != a.addr {
		t.Errorf("order = %q, want the given address kept and the unresolvable member left out", got)
	}
}
