// Package client is a Go client for a goflink cluster: it talks to the JobManagers' public
// gRPC services. Any JobManager serves every call: a follower forwards it to the leader and
// names the leader in its answer. A call goes first to that named leader (while this machine
// can reach it), then to the JobManager that served the last one, follows a NOT_LEADER hint to
// the leader (dialing it even when it was not given), tries every given address and then the
// members a watch learned from the group (GetCluster), and retries with backoff for up to
// Client.Wait while no JobManager can serve it (during a leader election, or while every
// JobManager is unreachable). An address that answers as something other than a goflink
// JobManager (the Raft port, a TaskManager) fails a call at once when no other address is left
// to try.
//
// The Client's mutex is listed, with every lock of the project and its order, in LOCKORDER.md
// at the repository root.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/leaderrpc"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// defaultWait is Client.Wait's initial value.
const defaultWait = 15 * time.Second

// Client talks to a cluster through any of its JobManagers. Safe for concurrent use.
type Client struct {
	// Wait is how long a call keeps retrying while no JobManager can serve it. Set it before
	// the first call.
	Wait time.Duration
	// Retrying, when set, is told when a call has been retrying for about a second because no
	// JobManager could serve it, and again every 5 s while it keeps retrying. It is called on
	// the call's goroutine. Set it before the first call.
	Retrying func(Retry)

	addrs []string // the given addresses, in order
	opts  []grpc.DialOption

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn // every address dialed: given, learned and leader hints
	learned []string                    // members' RPC addresses learned from the group, not given
	served  string                      // the address that served the last call; tried first
	// leader is the leader's address named by a JobManager that forwarded a call to it; calls
	// try it first. One this client could not reach (a name only the cluster's network knows)
	// is not tried again: the forwarding JobManagers serve.
	leader    string
	unreached map[string]bool
	closed    bool
}

// errClosed is returned by calls on a closed Client.
var errClosed = errors.New("client is closed")

// connectParams reconnect to a JobManager that comes back (or a leader that was just elected on
// a restarted one) within a second instead of gRPC's default of up to two minutes, and give up
// on an unreachable host after 5 s instead of 20 s, so that the next JobManager gets its turn.
var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// New connects lazily to the given JobManager addresses ("host:port", comma lists allowed; see
// ParseAddrs), in plaintext without a token.
func New(addrs ...string) (*Client, error) {
	return NewWithOptions(nil, addrs...)
}

// NewWithOptions is New with the dial options of every connection, transport included: TLS
// and the token, as security.ClientOptions.DialOptions makes them. Nil dials in plaintext.
func NewWithOptions(opts []grpc.DialOption, addrs ...string) (*Client, error) {
	list, err := ParseAddrs(addrs...)
	if err != nil {
		return nil, err
	}
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	c := &Client{Wait: defaultWait, addrs: list, conns: map[string]*grpc.ClientConn{}, unreached: map[string]bool{}, opts: opts}
	for _, a := range list {
		if _, err := c.conn(a); err != nil {
			c.Close()
			return nil, fmt.Errorf("jobmanager address %q: %w", a, err)
		}
	}
	return c, nil
}

// DefaultPort is the JobManager's RPC port, which ParseAddrs adds to an address without one.
const DefaultPort = 6123

// ParseAddrs parses JobManager addresses: each argument is one address or a comma-separated
// list of them. An address is host:port, or a host alone for port DefaultPort; an empty host
// (":6123") is localhost, and an IPv6 host is written in brackets ("[::1]:6123") or bare
// without a port ("::1"). The result is in order, without duplicates. A malformed address
// is an error that names it.
func ParseAddrs(addrs ...string) ([]string, error) {
	var out []string
	for _, a := range addrs {
		for _, p := range strings.Split(a, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			norm, err := parseAddr(p)
			if err != nil {
				return nil, fmt.Errorf("jobmanager address %q: %w", p, err)
			}
			if !slices.Contains(out, norm) {
				out = append(out, norm)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no jobmanager address given")
	}
	return out, nil
}

// parseAddr checks one address and returns it as host:port.
func parseAddr(a string) (string, error) {
	if strings.Contains(a, "://") || strings.Contains(a, "/") {
		return "", errors.New("want host:port, without a scheme or path")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		switch {
		case net.ParseIP(strings.Trim(a, "[]")) != nil && strings.Contains(a, ":"): // an IPv6 host without a port
			host, port = strings.Trim(a, "[]"), strconv.Itoa(DefaultPort)
		case !strings.Contains(a, ":"): // a host without a port
			host, port = a, strconv.Itoa(DefaultPort)
		default:
			var ae *net.AddrError
			if errors.As(err, &ae) {
				err = errors.New(ae.Err)
			}
			return "", fmt.Errorf("want host:port: %w", err)
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	if host == "" {
		host = "localhost"
	}
	if net.ParseIP(host) == nil && !validHostname(host) {
		return "", fmt.Errorf("host %q: want a host name or an IP address", host)
	}
	return net.JoinHostPort(host, port), nil
}

// validHostname reports whether h is made of DNS labels: letters, digits, '-' and '_',
// separated by dots.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

func (c *Client) dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, append(slices.Clone(c.opts), grpc.WithConnectParams(connectParams),
		// A watch stream to a JobManager cut off by the network breaks after about 15 s
		// instead of hanging until TCP gives up; Watch then resumes on the new leader.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.WithChainUnaryInterceptor(c.readLeader))...)
}

// readLeader is the connections' unary interceptor: it notes the leader that a JobManager which
// forwarded the call names in its answer's header.
func (c *Client) readLeader(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var header metadata.MD
	err := invoke(ctx, method, req, reply, cc, append(opts, grpc.Header(&header))...)
	c.noteLeader(header)
	return err
}

// noteLeader makes the leader named in a forwarded answer's header the first address to try,
// unless this client could not reach it before.
func (c *Client) noteLeader(header metadata.MD) {
	v := header.Get(leaderrpc.LeaderHeader)
	if len(v) == 0 {
		return
	}
	addr, err := parseAddr(strings.TrimSpace(v[0]))
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.unreached[addr] {
		c.leader = addr
	}
}

// leaderFailed forgets the named leader addr after a call there failed, for good when it could
// not be reached.
func (c *Client) leaderFailed(addr string, unreached bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr != c.leader {
		return
	}
	c.leader = ""
	if unreached {
		c.unreached[addr] = true
	}
}

// Close closes the connections, including those to hinted leaders.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for a, conn := range c.conns {
		conn.Close()
		delete(c.conns, a)
	}
	return nil
}

// conn returns the connection to addr, dialing it on first use.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if conn := c.conns[addr]; conn != nil {
		return conn, nil
	}
	conn, err := c.dial(addr)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = conn
	return conn, nil
}

// order is the order in which a call tries the JobManagers: first (a hint the caller already
// has), the leader a forwarding JobManager named, the one that served the last call, the given
// addresses, then the learned ones. It may repeat an address.
func (c *Client) order(first string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := slices.Concat([]string{first, c.leader, c.served}, c.addrs, c.learned)
	return slices.DeleteFunc(all, func(a string) bool { return a == "" })
}

func (c *Client) setServed(addr string) {
	c.mu.Lock()
	c.served = addr
	c.mu.Unlock()
}

// isLearned reports whether addr was not given but learned: from the group, or as the leader a
// forwarding JobManager named.
func (c *Client) isLearned(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return (slices.Contains(c.learned, addr) || addr == c.leader) && !slices.Contains(c.addrs, addr)
}

// learnTimeout bounds one try to learn the group's members, name lookups included.
const learnTimeout = 3 * time.Second

// learnRetry is how often learnGroup asks again while a member's RPC address is not known
// (a JobManager that just started registers it with the leader within a second or so).
const learnRetry = 2 * time.Second

// learnGroup learns the group's members (learn), closes first, and learns again every
// learnRetry while the answer lacks a member's address, until ctx ends.
func (c *Client) learnGroup(ctx context.Context, first chan<- struct{}) {
	done := c.learn(ctx)
	close(first)
	for !done && pause(ctx, learnRetry) {
		done = c.learn(ctx)
	}
}

// learn asks the JobManager that served the last call for the group's members (GetCluster)
// and adds their RPC addresses as candidates. It reports whether it is done: the answer had
// every member's address, or the JobManager has no ClusterService. Other errors are ignored:
// learning is a help.
func (c *Client) learn(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, learnTimeout)
	defer cancel()
	c.mu.Lock()
	addr := c.served
	c.mu.Unlock()
	if addr == "" {
		return false
	}
	conn, err := c.conn(addr)
	if err != nil {
		return false
	}
	resp, err := pb.NewClusterServiceClient(conn).GetCluster(ctx, &pb.GetClusterRequest{})
	if err != nil {
		return status.Code(err) == codes.Unimplemented
	}
	c.addMembers(ctx, resp)
	return !slices.ContainsFunc(resp.GetJobmanagers(), func(jm *pb.JobManagerInfo) bool { return jm.GetAddress() == "" })
}

// addMembers adds the RPC addresses of a GetCluster answer's JobManagers to the learned
// candidates: extra addresses, tried after the given ones, which they never replace. An address
// whose host this machine cannot resolve is left out: a JobManager may advertise a name only
// its own network knows (a container's name, as in docker compose).
func (c *Client) addMembers(ctx context.Context, resp *pb.GetClusterResponse) {
	for _, jm := range resp.GetJobmanagers() {
		addr, err := parseAddr(strings.TrimSpace(jm.GetAddress()))
		if jm.GetAddress() == "" || err != nil {
			continue
		}
		c.mu.Lock()
		known := slices.Contains(c.addrs, addr) || slices.Contains(c.learned, addr)
		c.mu.Unlock()
		if known {
			continue
		}
		host, _, _ := net.SplitHostPort(addr)
		if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
			continue
		}
		c.mu.Lock()
		if !slices.Contains(c.learned, addr) {
			c.learned = append(c.learned, addr)
		}
		c.mu.Unlock()
	}
}

// learnedConnectWait bounds how long a call waits for a learned address to connect before it
// moves on to the next address (the connection keeps trying for later rounds), so that a member
// this machine cannot reach does not stall a call.
const learnedConnectWait = time.Second

// connects waits up to d for conn to connect or fail; false when it is still connecting.
func connects(ctx context.Context, conn *grpc.ClientConn, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready, connectivity.TransientFailure, connectivity.Shutdown:
			return true // a call fails at once in TransientFailure, with the reason
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, s) {
			return false
		}
	}
}

// Backoff between rounds over the JobManagers while none can serve a call.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// maxHints bounds the leader hints one round follows, so that JobManagers with stale views
// naming each other cannot keep a call going in circles; the next round starts afresh.
const maxHints = 3

// jitter spreads d over ±20 %, so that many clients do not retry in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// pause waits d and reports true, or reports false as soon as ctx is done.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Retry describes a call that is retrying because no JobManager could serve it yet.
type Retry struct {
	Tried    []string      // every address tried, in the order first tried
	LastAddr string        // the address of the last error
	Last     error         // the last error
	Waited   time.Duration // since the call started
	Wait     time.Duration // how long the call retries in all (Client.Wait)
}

func (r Retry) String() string {
	return fmt.Sprintf("retrying for up to %v: no jobmanager could serve the request yet (tried %s; last error from %s: %s)",
		(r.Wait - r.Waited).Round(time.Second), strings.Join(r.Tried, ", "), r.LastAddr, describe(r.Last))
}

// When Client.Retrying is told.
const (
	retryNoticeAfter = time.Second
	retryNoticeEvery = 5 * time.Second
)

// UnavailableError is the error of a call that no JobManager could serve within Client.Wait:
// none was reachable, or none led. It wraps the last error (an UNAVAILABLE status, mostly).
type UnavailableError struct {
	Wait     time.Duration
	Tried    []string // every address tried, in the order first tried
	LastAddr string
	Last     error
	// NotJobManagers are the tried addresses that answered as something other than a goflink
	// JobManager.
	NotJobManagers []*NotJobManagerError
}

func (e *UnavailableError) Error() string {
	msg := fmt.Sprintf("no jobmanager could serve the request within %v (tried %s); last error from %s: %s",
		e.Wait, strings.Join(e.Tried, ", "), e.LastAddr, describe(e.Last))
	for _, n := range e.NotJobManagers {
		msg += "; " + n.Error()
	}
	return msg
}

func (e *UnavailableError) Unwrap() error { return e.Last }

// NotJobManagerError says that an address answers, but not as a goflink JobManager: it is
// another gRPC server (a TaskManager), or no gRPC server at all (the Raft port).
type NotJobManagerError struct {
	Addr string
	Err  error // what the address answered
}

func (e *NotJobManagerError) Error() string {
	guess := "is it the Raft port? the RPC port"
	if status.Code(e.Err) == codes.Unimplemented {
		guess = "is it a TaskManager? the JobManager's RPC port"
	}
	return fmt.Sprintf("%s does not answer as a goflink JobManager (%s); %s is %d by default", e.Addr, describe(e.Err), guess, DefaultPort)
}

func (e *NotJobManagerError) Unwrap() error { return e.Err }

// notGRPCGrace is how long an address must keep answering without speaking gRPC before it
// counts as not a JobManager: a JobManager that is stopping may close a connection before its
// first frame once, but not for this long.
const notGRPCGrace = 500 * time.Millisecond

// notJobManager tells the answers of an address that is not a goflink JobManager: a gRPC
// server without the JobService (UNIMPLEMENTED "unknown service"), or a TCP server that does
// not speak gRPC (the connection ends or is garbage before the server's first HTTP/2 frame),
// for which confirmed waits for notGRPCGrace.
func notJobManager(err error) (is, confirmed bool) {
	st, ok := status.FromError(err)
	if !ok {
		return false, false
	}
	switch {
	case st.Code() == codes.Unimplemented && strings.HasPrefix(st.Message(), "unknown service "):
		return true, true
	case st.Code() == codes.Unavailable && strings.Contains(st.Message(), "error reading server preface"):
		return true, false
	}
	return false, false
}

// describe is an error's text without gRPC's wrapping of connection errors.
func describe(err error) string {
	if err == nil {
		return "none"
	}
	se, ok := err.(interface{ GRPCStatus() *status.Status })
	if !ok {
		return err.Error()
	}
	msg := se.GRPCStatus().Message()
	if m, ok := strings.CutPrefix(msg, `connection error: desc = "`); ok {
		msg = strings.TrimSuffix(m, `"`)
	}
	msg = strings.TrimPrefix(msg, "transport: Error while dialing: ")
	return strings.TrimPrefix(msg, "transport: ")
}

// do runs fn against the JobManagers until one serves it and returns that one's address. Each
// round tries every JobManager once (in c.order(first)) and follows a NOT_LEADER answer's
// hint at once, even to an address not given; an error that is not retryable is the answer.
// While no JobManager can serve, rounds repeat with backoff for up to c.Wait (telling
// c.Retrying); the error is then an *UnavailableError naming every address tried and
// wrapping the last error. When every address of a round answers as something other than a
// JobManager, the error is that at once.
func (c *Client) do(ctx context.Context, first string, fn func(conn *grpc.ClientConn) error) (string, error) {
	start := time.Now()
	deadline := start.Add(c.Wait)
	nextNotice := start.Add(retryNoticeAfter)
	wait := minBackoff
	var tried []string // every address tried, in the order first tried
	var last error
	var lastAddr string
	wrongSince := map[string]time.Time{} // addresses answering without speaking gRPC: since when
	wrong := map[string]*NotJobManagerError{}
	fail := func(err error) error {
		if last == nil {
			return err
		}
		return fmt.Errorf("%w (tried %s; last error from %s: %s)", err, strings.Join(tried, ", "), lastAddr, describe(last))
	}
	for {
		queue := c.order(first)
		seen := map[string]bool{}
		hints := 0
		var roundWrong []error // this round's addresses that are not JobManagers (*NotJobManagerError)
		others := false        // this round tried an address that may yet serve
		for len(queue) > 0 {
			addr := queue[0]
			queue = queue[1:]
			if seen[addr] {
				continue
			}
			seen[addr] = true
			if err := ctx.Err(); err != nil {
				return "", fail(err)
			}
			if !slices.Contains(tried, addr) {
				tried = append(tried, addr)
			}
			conn, err := c.conn(addr)
			if errors.Is(err, errClosed) {
				return "", err
			}
			if err != nil {
				last, lastAddr, others = fmt.Errorf("dial: %w", err), addr, true
				continue
			}
			if c.isLearned(addr) && !connects(ctx, conn, learnedConnectWait) {
				if ctx.Err() == nil {
					last, lastAddr, others = fmt.Errorf("not connected within %v", learnedConnectWait), addr, true
					c.leaderFailed(addr, true)
				}
				continue
			}
			err = fn(conn)
			if err == nil {
				c.setServed(addr)
				return addr, nil
			}
			if is, confirmed := notJobManager(err); is {
				c.leaderFailed(addr, true)
				if _, ok := wrongSince[addr]; !ok {
					wrongSince[addr] = time.Now()
				}
				last, lastAddr = err, addr
				if confirmed || time.Since(wrongSince[addr]) >= notGRPCGrace {
					wrong[addr] = &NotJobManagerError{Addr: addr, Err: err}
					roundWrong = append(roundWrong, wrong[addr])
				} else {
					others = true
				}
				continue
			}
			delete(wrongSince, addr)
			delete(wrong, addr)
			if !leaderrpc.Retryable(err) {
				return addr, err
			}
			c.leaderFailed(addr, leaderrpc.Unreached(err))
			last, lastAddr, others = err, addr, true
			if h, _ := leaderrpc.LeaderHint(err); h != "" && h != addr && hints < maxHints {
				hints++
				delete(seen, h) // newer news than that address's earlier answer in this round
				queue = append([]string{h}, queue...)
			}
		}
		if !others && len(roundWrong) == 1 {
			return "", roundWrong[0]
		}
		if !others && len(roundWrong) > 1 {
			return "", errors.Join(roundWrong...)
		}
		left := time.Until(deadline)
		if left <= 0 {
			e := &UnavailableError{Wait: c.Wait, Tried: tried, LastAddr: lastAddr, Last: last}
			for _, a := range tried {
				if w := wrong[a]; w != nil && a != lastAddr {
					e.NotJobManagers = append(e.NotJobManagers, w)
				}
			}
			return "", e
		}
		sleep := min(jitter(wait), left)
		// Tell before a pause that takes the call past the notice time, not after it.
		if now := time.Now(); c.Retrying != nil && !now.Add(sleep).Before(nextNotice) {
			nextNotice = now.Add(retryNoticeEvery)
			c.Retrying(Retry{Tried: slices.Clone(tried), LastAddr: lastAddr, Last: last, Waited: now.Sub(start), Wait: c.Wait})
		}
		if !pause(ctx, sleep) {
			return "", fail(ctx.Err())
		}
		wait = min(wait*2, maxBackoff)
	}
}

// call runs fn with c.do and returns the result of the JobManager that served it.
func call[T any](ctx context.Context, c *Client, fn func(conn *grpc.ClientConn) (T, error)) (T, error) {
	var res T
	_, err := c.do(ctx, "", func(conn *grpc.ClientConn) (err error) {
		res, err = fn(conn)
		return err
	})
	return res, err
}

// Submit submits a YAML job spec and returns the job ID.
func (c *Client) Submit(ctx context.Context, req *pb.SubmitJobRequest) (string, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.SubmitJobResponse, error) {
		return pb.NewJobServiceClient(conn).SubmitJob(ctx, req)
	})
	return resp.GetJobId(), err
}

// List lists the cluster's jobs, newest first.
func (c *Client) List(ctx context.Context) ([]*pb.JobSummary, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.ListJobsResponse, error) {
		return pb.NewJobServiceClient(conn).ListJobs(ctx, &pb.ListJobsRequest{})
	})
	return resp.GetJobs(), err
}

// Job returns one job's details.
func (c *Client) Job(ctx context.Context, id string) (*pb.JobDetails, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.GetJobResponse, error) {
		return pb.NewJobServiceClient(conn).GetJob(ctx, &pb.GetJobRequest{JobId: id})
	})
	return resp.GetJob(), err
}

// Cancel cancels a job.
func (c *Client) Cancel(ctx context.Context, id string) error {
	_, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.CancelJobResponse, error) {
		return pb.NewJobServiceClient(conn).CancelJob(ctx, &pb.CancelJobRequest{JobId: id})
	})
	return err
}

// Cluster describes the cluster. Any JobManager answers, but only the leader lists the
// TaskManagers: when a follower answered and named a leader with an address, the leader is
// asked once more, and its answer returned (the follower's when the leader does not answer).
func (c *Client) Cluster(ctx context.Context) (*pb.GetClusterResponse, error) {
	get := func(conn *grpc.ClientConn) (*pb.GetClusterResponse, error) {
		return pb.NewClusterServiceClient(conn).GetCluster(ctx, &pb.GetClusterRequest{})
	}
	var resp *pb.GetClusterResponse
	addr, err := c.do(ctx, "", func(conn *grpc.ClientConn) (err error) {
		resp, err = get(conn)
		return err
	})
	if err != nil {
		return nil, err
	}
	leaderID, leader := leaderOf(resp)
	if leaderID == "" {
		// This member knows no leader (it just started, or is cut off): another may.
		for _, a := range c.order("") {
			if a == addr {
				continue
			}
			if conn, err := c.conn(a); err == nil {
				if other, err := get(conn); err == nil {
					if id, la := leaderOf(other); id != "" {
						resp, addr, leaderID, leader = other, a, id, la
						break
					}
				}
			}
		}
	}
	if leaderID == "" || resp.GetAnsweredBy() == leaderID || leader == addr {
		return resp, nil
	}
	// Ask the leader: at the address it advertises, or — when that is an address only its own
	// network knows (a container's name) — at whichever given address it answers on.
	for _, a := range c.order(leader) {
		if a == addr || a == "" {
			continue
		}
		conn, err := c.conn(a)
		if err != nil {
			continue
		}
		if lresp, err := get(conn); err == nil && lresp.GetAnsweredBy() == leaderID {
			c.setServed(a)
			return lresp, nil
		}
	}
	return resp, nil
}

// leaderOf returns the node ID and RPC address of the JobManager a GetCluster answer marks as
// the leader, or "".
func leaderOf(resp *pb.GetClusterResponse) (id, addr string) {
	for _, jm := range resp.GetJobmanagers() {
		if jm.GetLeader() {
			return jm.GetId(), jm.GetAddress()
		}
	}
	return "", ""
}

// Checkpoints returns a job's checkpoint history, newest first: checkpoints in progress,
// completed and failed ones, and the retained completed checkpoints. Entries with ID 0 are
// triggers that could not start a checkpoint.
func (c *Client) Checkpoints(ctx context.Context, id string) ([]*pb.CheckpointInfo, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.ListCheckpointsResponse, error) {
		return pb.NewJobServiceClient(conn).ListCheckpoints(ctx, &pb.ListCheckpointsRequest{JobId: id})
	})
	return resp.GetCheckpoints(), err
}

// TriggerCheckpoint triggers a checkpoint of a running job and waits until it completed or
// failed. A checkpoint that failed is an outcome, not an error: it comes back with status FAILED
// (and ID 0 when it could not even start). The JobManager answers FAILED_PRECONDITION when the
// job does not take checkpoints or is not running. A checkpoint can take minutes
// (execution.checkpointing.timeout, 10 min by default): give ctx a deadline to match.
func (c *Client) TriggerCheckpoint(ctx context.Context, id string) (*pb.CheckpointInfo, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.TriggerCheckpointResponse, error) {
		return pb.NewJobServiceClient(conn).TriggerCheckpoint(ctx, &pb.TriggerCheckpointRequest{JobId: id})
	})
	if err != nil {
		return nil, err
	}
	if resp.GetCheckpoint() == nil {
		return nil, fmt.Errorf("checkpoint job %s: the jobmanager answered without a checkpoint", id)
	}
	return resp.GetCheckpoint(), nil
}

// TriggerSavepoint takes a savepoint of a running job (req.Stop: stops the job with it) and
// waits until it completed, returning its path; a failed savepoint is an error (ABORTED). A
// stop returns once the job ended. Give ctx a deadline to match the job's checkpoint timeout.
func (c *Client) TriggerSavepoint(ctx context.Context, req *pb.TriggerSavepointRequest) (*pb.TriggerSavepointResponse, error) {
	return call(ctx, c, func(conn *grpc.ClientConn) (*pb.TriggerSavepointResponse, error) {
		return pb.NewJobServiceClient(conn).TriggerSavepoint(ctx, req)
	})
}

// DisposeSavepoint deletes a savepoint (an absolute path or an s3:// location); the JobManager refuses a path that
// is not a savepoint.
func (c *Client) DisposeSavepoint(ctx context.Context, path string) error {
	_, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.DisposeSavepointResponse, error) {
		return pb.NewJobServiceClient(conn).DisposeSavepoint(ctx, &pb.DisposeSavepointRequest{SavepointPath: path})
	})
	return err
}

// Rescale changes a running job's parallelism in place and returns the checkpoint it was
// rescaled from, once the job was redeployed (its tasks may still be starting).
func (c *Client) Rescale(ctx context.Context, id string, parallelism int) (int64, error) {
	resp, err := call(ctx, c, func(conn *grpc.ClientConn) (*pb.RescaleJobResponse, error) {
		return pb.NewJobServiceClient(conn).RescaleJob(ctx, &pb.RescaleJobRequest{JobId: id, Parallelism: int32(parallelism)})
	})
	return resp.GetCheckpointId(), err
}

// Watch calls fn with the job's details on every change until the job ends (returning its
// last details), fn returns an error, or ctx is done. A stream that breaks with a retryable
// error (the JobManager lost its leadership, stopped or became unreachable) is resumed on the
// leader, found as every call finds it; fn then sees the job's details again, as the new
// stream's first message. Once the first stream is open, Watch learns the group's members from
// the JobManager that serves it, so that it can resume on another member although only one
// address was given. When no JobManager can serve within Client.Wait, the error is an
// *UnavailableError: the job may still be running.
func (c *Client) Watch(ctx context.Context, id string, fn func(*pb.JobDetails) error) (*pb.JobDetails, error) {
	var last *pb.JobDetails
	hint := ""
	wait := time.Duration(0) // pause before resuming, growing while streams break at once
	// Learning the members runs beside the watch, from the first stream on: learned is closed
	// after its first try.
	var learned chan struct{}
	var learning sync.WaitGroup
	lctx, stopLearning := context.WithCancel(ctx)
	defer func() {
		stopLearning()
		learning.Wait()
	}()
	for {
		if wait > 0 && !pause(ctx, jitter(wait)) {
			return last, ctx.Err()
		}
		w, err := c.openWatch(ctx, id, hint)
		if err != nil {
			return last, err
		}
		if learned == nil {
			learned = make(chan struct{})
			learning.Go(func() { c.learnGroup(lctx, learned) })
		}
		opened := time.Now()
		n, stopped, err := w.run(fn, &last)
		w.cancel()
		switch {
		case stopped != nil:
			return last, stopped
		case err == nil: // the job ended
			return last, nil
		case ctx.Err() != nil:
			return last, ctx.Err()
		case !leaderrpc.Retryable(err):
			return last, err
		}
		// The members may be needed now: the stream's JobManager may be gone for good.
		select {
		case <-learned:
		case <-ctx.Done():
			return last, ctx.Err()
		}
		hint, _ = leaderrpc.LeaderHint(err)
		if n > 1 || time.Since(opened) >= maxBackoff {
			wait = 0
		} else {
			wait = min(max(2*wait, minBackoff), maxBackoff)
		}
	}
}

// watch is one WatchJob stream with its first message.
type watch struct {
	stream pb.JobService_WatchJobClient
	first  *pb.JobDetails
	cancel context.CancelFunc
}

// openWatch opens a WatchJob stream on the leader (trying hint first) and reads its first
// message.
func (c *Client) openWatch(ctx context.Context, id, hint string) (*watch, error) {
	var w *watch
	_, err := c.do(ctx, hint, func(conn *grpc.ClientConn) error {
		sctx, cancel := context.WithCancel(ctx)
		s, err := pb.NewJobServiceClient(conn).WatchJob(sctx, &pb.WatchJobRequest{JobId: id})
		var m *pb.WatchJobResponse
		if err == nil {
			m, err = s.Recv()
		}
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("watch job %s: the jobmanager ended the stream without the job's details", id)
		}
		if err != nil {
			cancel()
			return err
		}
		if header, err := s.Header(); err == nil {
			c.noteLeader(header)
		}
		w = &watch{stream: s, first: m.GetJob(), cancel: cancel}
		return nil
	})
	return w, err
}

// run hands the stream's messages to fn, setting *last, until the job ends (both errors nil),
// fn returns an error (stopped) or the stream breaks (err). It returns how many messages it
// handed over.
func (w *watch) run(fn func(*pb.JobDetails) error, last **pb.JobDetails) (n int, stopped, err error) {
	d := w.first
	for n = 1; ; n++ {
		*last = d
		if err := fn(d); err != nil {
			return n, err, nil
		}
		if IsTerminal(d.GetStatus()) {
			return n, nil, nil
		}
		m, err := w.stream.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil, fmt.Errorf("watch job %s: the jobmanager ended the stream before the job ended (last status %s)",
				d.GetId(), strings.TrimPrefix(d.GetStatus().String(), "JOB_STATUS_"))
		}
		if err != nil {
			return n, nil, err
		}
		d = m.GetJob()
	}
}

// RunningAt reports, as nil, that a job runs at parallelism p (any when p < 1) with every
// task RUNNING; otherwise its error says what does not.
func RunningAt(d *pb.JobDetails, p int32) error {
	switch {
	case d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING:
		return fmt.Errorf("job is %v", d.GetStatus())
	case p > 0 && d.GetParallelism() != p:
		return fmt.Errorf("job runs at parallelism %d", d.GetParallelism())
	case len(d.GetTasks()) == 0:
		return errors.New("job has no tasks")
	}
	for _, t := range d.GetTasks() {
		if t.GetStatus() != pb.ExecutionState_EXECUTION_STATE_RUNNING {
			return fmt.Errorf("task %s %d is %v", t.GetOperator(), t.GetSubtask(), t.GetStatus())
		}
	}
	return nil
}

// IsTerminal reports whether a job status is terminal.
func IsTerminal(s pb.JobStatus) bool {
	return s == pb.JobStatus_JOB_STATUS_FINISHED || s == pb.JobStatus_JOB_STATUS_FAILED || s == pb.JobStatus_JOB_STATUS_CANCELED
}
