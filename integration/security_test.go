package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/security"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// generateCerts makes a CA, a certificate for the cluster's processes (localhost and
// 127.0.0.1), a client CA and certificate and a token into dir.
func generateCerts(t *testing.T, dir string) security.Generated {
	t.Helper()
	gen, err := security.Generate(dir, []string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// setAll sets keys of s.
func setAll(t *testing.T, s *config.Config, keys map[string]string) {
	t.Helper()
	for k, v := range keys {
		if err := s.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// securedSettings generates certificates and a token into dir and returns the settings of a
// cluster with internal TLS, REST client certificates and the token.
func securedSettings(t *testing.T, dir string) (*config.Config, security.Generated) {
	t.Helper()
	gen := generateCerts(t, dir)
	s := config.New()
	setAll(t, s, map[string]string{
		config.SSLInternalEnabled: "true", config.SSLInternalCert: gen.Cluster, config.SSLInternalKey: gen.ClusterKey,
		config.SSLInternalCA: gen.CA, config.SSLRestClientAuth: "true", config.SSLRestCA: gen.ClientCA,
		config.AuthTokenFile: gen.Token,
	})
	return s, gen
}

// dialAs returns a client of addr with the given client options.
func dialAs(t *testing.T, o security.ClientOptions, addr string) *client.Client {
	t.Helper()
	opts, err := o.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.NewWithOptions(opts, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func readToken(t *testing.T, path string) string {
	t.Helper()
	tok, err := security.ReadToken(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// checkClientRefused checks that cl's client RPCs fail — reads (List) and writes (Submit,
// Cancel, Rescale, DisposeSavepoint) — with code want unless want is codes.Unknown (a failed
// handshake, which gRPC reports as Unavailable), and with an error that says wantMsg (unless it
// is empty).
func checkClientRefused(t *testing.T, ctx context.Context, name string, cl *client.Client, want codes.Code, wantMsg string) {
	t.Helper()
	spec := []byte("name: refused\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 10}\n  - {name: out, type: discard}\n")
	calls := []struct {
		rpc  string
		call func() error
	}{
		{"List", func() error { _, err := cl.List(ctx); return err }},
		{"Submit", func() error { _, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: spec}); return err }},
		{"Cancel", func() error { return cl.Cancel(ctx, "0123456789abcdef0123456789abcdef") }},
		{"Rescale", func() error { _, err := cl.Rescale(ctx, "0123456789abcdef0123456789abcdef", 2); return err }},
		{"DisposeSavepoint", func() error { return cl.DisposeSavepoint(ctx, "/tmp") }},
	}
	for _, c := range calls {
		err := c.call()
		switch {
		case err == nil:
			t.Fatalf("%s: %s succeeded, want refused", name, c.rpc)
		case want != codes.Unknown && status.Code(err) != want:
			t.Errorf("%s: %s = %v, want %v", name, c.rpc, err, want)
		case !strings.Contains(err.Error(), wantMsg):
			t.Errorf("%s: %s = %v, want an error saying %q", name, c.rpc, err, wantMsg)
		}
	}
}

// runCountJob submits a keyed count of n values over keys keys through submitter, follows it to
// its end through watcher, checks that it finished without a task's failure and counted every
// value exactly once, and returns the job's ID.
func runCountJob(t *testing.T, ctx context.Context, submitter, watcher *client.Client, dir string, n, keys int, parallelism int32) string {
	t.Helper()
	out := filepath.Join(dir, "out")
	spec := countSpec(n, 0, keys, out, "  execution.checkpointing.dir: "+filepath.Join(dir, "checkpoints"))
	id, err := submitter.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec), Parallelism: parallelism})
	if err != nil {
		t.Fatalf("submit = %v", err)
	}
	last := watchEnd(t, ctx, watcher, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), want FINISHED", last.GetStatus(), last.GetFailureCause())
	}
	// A Raft group on a busy machine may change leaders, which restarts the job: that is no
	// failure of the cluster's TLS. A task's failure is.
	for _, e := range last.GetExceptions() {
		if e.GetTask() != "jobmanager leader change" {
			t.Errorf("the job restarted for %s: %s", e.GetTask(), e.GetCause())
		}
	}
	checkCounts(t, out, n, keys)
	return id
}

// checkRegisterTaskManager calls RegisterTaskManager, a cluster RPC, over conn and checks its
// code; a PermissionDenied must be the authorization's (naming the internal CA).
func checkRegisterTaskManager(t *testing.T, ctx context.Context, name string, conn *grpc.ClientConn, want codes.Code) {
	t.Helper()
	_, err := pb.NewTaskManagerServiceClient(conn).RegisterTaskManager(ctx, &pb.RegisterTaskManagerRequest{
		TaskmanagerId: "rogue", Address: "127.0.0.1:1", Slots: 1})
	checkClusterRPCRefused(t, "RegisterTaskManager with "+name, err, want)
}

func checkClusterRPCRefused(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	switch {
	case status.Code(err) != want:
		t.Errorf("%s = %v, want %v", what, err, want)
	case want == codes.PermissionDenied && !strings.Contains(status.Convert(err).Message(), config.SSLInternalCA):
		t.Errorf("%s = %v, want refused for want of the internal certificate (%s)", what, err, config.SSLInternalCA)
	}
}

// checkTaskManagerRefuses checks that a TaskManager's port refuses a client with options o: the
// connection fails (Unavailable). A TaskManager that served the call would answer it
// InvalidArgument (it names no execution) and change nothing.
func checkTaskManagerRefuses(t *testing.T, ctx context.Context, tmAddr, name string, o security.ClientOptions) {
	t.Helper()
	conn := grpcConn(t, tmAddr, o)
	_, err := pb.NewTaskExecutorServiceClient(conn).CancelTask(ctx, &pb.CancelTaskRequest{LeaderTerm: 1 << 62})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("CancelTask on a TaskManager with %s = %v, want a refused connection (Unavailable)", name, err)
	}
	// The data exchange (security review F11: anyone could subscribe to a producer's
	// subpartition): the stream fails with the connection, before any record is read.
	err = func() error {
		stream, err := pb.NewDataExchangeServiceClient(conn).Subscribe(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Open{Open: &pb.OpenSubpartition{}}}); err != nil {
			_, err = stream.Recv() // Send reports io.EOF; Recv the stream's status
			return err
		}
		_, err = stream.Recv()
		return err
	}()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Subscribe to a TaskManager's data exchange with %s = %v, want a refused connection (Unavailable)", name, err)
	}
}

// checkHandshakeRefused checks that a TLS connection to addr with cfg is refused at the
// handshake: the server's TLS alert, not a timeout and not the application closing an
// accepted connection.
func checkHandshakeRefused(t *testing.T, addr, name string, cfg *tls.Config) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, cfg)
	// With TLS 1.3 the client's handshake ends before the server has checked its certificate:
	// the server's verdict arrives with the first read. Nothing is written, so that a server
	// that accepted the connection waits for a request (and the read times out).
	if err = tc.Handshake(); err == nil {
		_, err = tc.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "remote error: tls") {
		t.Errorf("%s: %v, want the handshake refused by a TLS alert", name, err)
	}
}

// TestSecuredCluster: a 3-JobManager group and TaskManagers with internal mutual TLS (Raft, RPC,
// data exchange) and client authentication. Clients without TLS, without the token or with a
// wrong one are refused; with the token or a client certificate they submit a job, which runs
// exactly once across the TLS data exchange; a client certificate does not open the cluster
// RPCs; the TaskManagers' and Raft ports refuse anyone without the internal certificate.
func TestSecuredCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	settings, gen := securedSettings(t, filepath.Join(dir, "certs"))
	c, member := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2, Settings: settings})
	addr := c.JMs[0].Addr()
	tok := readToken(t, gen.Token)

	// Plaintext: the TLS port does not answer it (gRPC reports the broken handshake as
	// Unavailable).
	plain, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	plain.Wait = 0
	defer plain.Close()
	checkClientRefused(t, ctx, "plaintext", plain, codes.Unknown, "")
	checkClientRefused(t, ctx, "TLS without a token", dialAs(t, security.ClientOptions{CA: gen.CA}, addr), codes.Unauthenticated, "")
	checkClientRefused(t, ctx, "a wrong token", dialAs(t, security.ClientOptions{CA: gen.CA, Token: "not-" + tok}, addr), codes.Unauthenticated, "")
	// A certificate from another CA fails the handshake.
	other := generateCerts(t, filepath.Join(dir, "other"))
	checkClientRefused(t, ctx, "a foreign client certificate", dialAs(t, security.ClientOptions{CA: gen.CA, Cert: other.Client, Key: other.ClientKey, Token: tok}, addr), codes.Unknown, "")

	withToken := dialAs(t, security.ClientOptions{CA: gen.CA, Token: tok}, addr)
	withCert := dialAs(t, security.ClientOptions{CA: gen.CA, Cert: gen.Client, Key: gen.ClientKey}, addr)
	id := runCountJob(t, ctx, withToken, withCert, dir, 3000, 5, 3)
	if _, err := member.Job(ctx, id); err != nil {
		t.Errorf("the cluster's own client: %v", err)
	}

	// A client certificate authorizes client RPCs, not the cluster's: it cannot register a
	// TaskManager.
	checkRegisterTaskManager(t, ctx, "a client certificate",
		grpcConn(t, addr, security.ClientOptions{CA: gen.CA, Cert: gen.Client, Key: gen.ClientKey, Token: tok}), codes.PermissionDenied)
	checkRegisterTaskManager(t, ctx, "the token only", grpcConn(t, addr, security.ClientOptions{CA: gen.CA, Token: tok}), codes.Unauthenticated)

	// A TaskManager's port: plaintext and a client certificate of the REST side both fail.
	tmAddr := c.TMs[0].Addr()
	checkTaskManagerRefuses(t, ctx, tmAddr, "plaintext", security.ClientOptions{})
	checkTaskManagerRefuses(t, ctx, tmAddr, "a client certificate", security.ClientOptions{CA: gen.CA, Cert: gen.Client, Key: gen.ClientKey})

	// Raft: a raw connection is dropped; a TLS one without the internal certificate fails.
	raftAddr := c.JMs[0].RaftAddr()
	raw, err := net.DialTimeout("tcp", raftAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("\x00\x00\x00\x00forged append entries")); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadAll(raw); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a raw Raft connection was not dropped: %v", err)
	}
	checkHandshakeRefused(t, raftAddr, "a TLS Raft connection without a client certificate",
		&tls.Config{InsecureSkipVerify: true, ServerName: security.InternalServerName}) //nolint:gosec // the test's rogue peer
}

// grpcConn dials addr with the given client options.
func grpcConn(t *testing.T, addr string, o security.ClientOptions) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if o != (security.ClientOptions{}) {
		var err error
		if opts, err = o.DialOptions(); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestCertificatesReload: new certificates and token written over the files (a renewal, here
// from a new CA) are used without a restart: clients of the new CA and token are served, and the
// cluster's processes keep talking to each other.
func TestCertificatesReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	settings, gen := securedSettings(t, certs)
	c, member := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1, Settings: settings})
	addr := c.JMs[0].Addr()
	old := readToken(t, gen.Token)
	if _, err := dialAs(t, security.ClientOptions{CA: gen.CA, Token: old}, addr).List(ctx); err != nil {
		t.Fatal(err)
	}
	// Keep the old CA to check the new one differs.
	oldCA, err := os.ReadFile(gen.CA)
	if err != nil {
		t.Fatal(err)
	}
	generateCerts(t, certs)
	newCA, _ := os.ReadFile(gen.CA)
	if string(newCA) == string(oldCA) {
		t.Fatal("the CA did not change")
	}
	tok := readToken(t, gen.Token)
	poll.Until(t, 30*time.Second, "the new CA and token to be served", func() error {
		cl := dialAs(t, security.ClientOptions{CA: gen.CA, Token: tok}, addr)
		cl.Wait = 0
		_, err := cl.List(ctx)
		return err
	})
	if _, err := dialAs(t, security.ClientOptions{CA: gen.CA, Token: old}, addr).List(ctx); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the old token after the reload = %v, want Unauthenticated", err)
	}
	// The processes reloaded too: a TaskManager started now, with the new certificates,
	// registers, and a job runs across both over new connections.
	if _, err := c.AddTaskManager(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the new TaskManager to register", func() error {
		info, err := member.Cluster(ctx)
		if err != nil {
			return err
		}
		if n := len(info.GetTaskmanagers()); n != 2 {
			return fmt.Errorf("%d taskmanagers", n)
		}
		return nil
	})
	cl := dialAs(t, security.ClientOptions{CA: gen.CA, Token: tok}, addr)
	runCountJob(t, ctx, cl, cl, dir, 1000, 3, 2)
}

// servedCertificate returns the leaf certificate the server at addr presents to a client
// asking for serverName ("": none, as when dialing an IP address).
func servedCertificate(t *testing.T, addr, serverName string) []byte {
	t.Helper()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config: &tls.Config{InsecureSkipVerify: true, ServerName: serverName}} //nolint:gosec // only looks at the certificate
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("TLS to %s as %q: %v", addr, serverName, err)
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw
}

// certificateDER returns the first certificate of a PEM file.
func certificateDER(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	return block.Bytes
}

// TestSeparateRESTCertificate: with security.ssl.rest.enabled the JobManagers' RPC port
// presents a REST certificate of its own CA to clients and the internal certificate to cluster
// processes (they ask for InternalServerName). Clients that trust the REST CA are served (with
// the token or a client certificate of security.ssl.rest.ca), clients that trust only the
// internal CA fail the handshake, a client certificate still opens no cluster RPC, and the
// REST certificate passes for a cluster process nowhere. The TaskManagers, the JobManagers'
// forwarding and Raft keep working on the internal certificate.
func TestSeparateRESTCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	settings, gen := securedSettings(t, filepath.Join(dir, "certs"))
	// The REST side: a CA of its own and a server certificate for localhost and 127.0.0.1.
	rest := generateCerts(t, filepath.Join(dir, "rest"))
	setAll(t, settings, map[string]string{
		config.SSLRestEnabled: "true", config.SSLRestCert: rest.Cluster, config.SSLRestKey: rest.ClusterKey,
	})
	// StartT waits until every TaskManager registered: they dial the JobManagers' port as
	// cluster processes and verify its certificate against the internal CA (6).
	c, member := miniclustertest.StartT(t, minicluster.Options{JobManagers: 3, TaskManagers: 2, Slots: 2, Settings: settings})
	tok := readToken(t, gen.Token)
	var leader int
	poll.Until(t, 30*time.Second, "a leader", func() error {
		if leader = c.Leader(); leader < 0 {
			return errors.New("no leader")
		}
		return nil
	})
	addr, followerAddr := c.JMs[leader].Addr(), c.JMs[(leader+1)%len(c.JMs)].Addr()

	// The SNI switch on every JobManager: the REST certificate to clients, the internal one to
	// cluster processes.
	restDER, internalDER := certificateDER(t, rest.Cluster), certificateDER(t, gen.Cluster)
	for _, jm := range c.JMs {
		for _, name := range []string{"", "localhost"} {
			if !bytes.Equal(servedCertificate(t, jm.Addr(), name), restDER) {
				t.Errorf("%s asked for %q: not the REST certificate", jm.Addr(), name)
			}
		}
		if !bytes.Equal(servedCertificate(t, jm.Addr(), security.InternalServerName), internalDER) {
			t.Errorf("%s asked for %q: not the internal certificate", jm.Addr(), security.InternalServerName)
		}
	}

	// (2) A client that trusts only the internal CA is served the REST certificate, which it
	// cannot verify: the handshake fails, the token notwithstanding.
	internalOnly := dialAs(t, security.ClientOptions{CA: gen.CA, Token: tok}, addr)
	internalOnly.Wait = 0
	checkClientRefused(t, ctx, "a client trusting only the internal CA", internalOnly, codes.Unavailable, "certificate signed by unknown authority")
	// (4) The REST CA alone: TLS works, the call is not authorized.
	checkClientRefused(t, ctx, "the REST CA without a token or certificate", dialAs(t, security.ClientOptions{CA: rest.CA}, addr), codes.Unauthenticated, "")

	// (1) The REST CA and the token, through a follower (which forwards to the leader over an
	// internal connection): a job submitted runs on the TaskManagers (6), across their TLS
	// data exchange, to its end.
	withToken := dialAs(t, security.ClientOptions{CA: rest.CA, Token: tok}, followerAddr)
	// (3) The REST CA and a client certificate, no token.
	withCert := dialAs(t, security.ClientOptions{CA: rest.CA, Cert: gen.Client, Key: gen.ClientKey}, addr)
	for name, cl := range map[string]*client.Client{"the token": withToken, "a client certificate": withCert} {
		if _, err := cl.List(ctx); err != nil {
			t.Fatalf("List with the REST CA and %s = %v", name, err)
		}
	}
	id := runCountJob(t, ctx, withToken, withCert, dir, 2000, 4, 3)
	jobs, err := withToken.List(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].GetId() != id {
		t.Errorf("List with the token = %v, %v; want job %s", jobs, err, id)
	}
	if _, err := member.Job(ctx, id); err != nil {
		t.Errorf("the cluster's own client: %v", err)
	}
	info, err := member.Cluster(ctx)
	if err != nil || len(info.GetTaskmanagers()) != 2 {
		t.Errorf("Cluster = %v, %v; want 2 TaskManagers", info, err)
	}

	// (5) A client certificate opens client RPCs only: the cluster's RPCs are PermissionDenied.
	conn := grpcConn(t, addr, security.ClientOptions{CA: rest.CA, Cert: gen.Client, Key: gen.ClientKey, Token: tok})
	checkRegisterTaskManager(t, ctx, "a client certificate", conn, codes.PermissionDenied)
	_, err = pb.NewClusterServiceClient(conn).RegisterJobManager(ctx, &pb.RegisterJobManagerRequest{NodeId: "rogue", RpcAddress: "127.0.0.1:1"})
	checkClusterRPCRefused(t, "RegisterJobManager with a client certificate", err, codes.PermissionDenied)

	// (7) The REST certificate does not pass for a cluster process: not on the JobManagers'
	// port (asking for the internal certificate, as a JobManager forwarding a call does), not on
	// a TaskManager's, not on Raft.
	restKeyPair, err := tls.LoadX509KeyPair(rest.Cluster, rest.ClusterKey)
	if err != nil {
		t.Fatal(err)
	}
	asPeer := &tls.Config{Certificates: []tls.Certificate{restKeyPair}, InsecureSkipVerify: true, ServerName: security.InternalServerName} //nolint:gosec // the test's rogue peer
	checkHandshakeRefused(t, addr, "the JobManagers' port with the REST certificate", asPeer)
	checkHandshakeRefused(t, c.JMs[leader].RaftAddr(), "Raft with the REST certificate", asPeer)
	checkHandshakeRefused(t, c.TMs[0].Addr(), "a TaskManager with the REST certificate", asPeer)
}
