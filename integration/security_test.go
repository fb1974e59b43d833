package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
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

// securedSettings generates certificates and a token into dir and returns the settings of a
// cluster with internal TLS, REST client certificates and the token.
func securedSettings(t *testing.T, dir string) (*config.Config, security.Generated) {
	t.Helper()
	gen, err := security.Generate(dir, []string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := config.New()
	for k, v := range map[string]string{
		config.SSLInternalEnabled: "true", config.SSLInternalCert: gen.Cluster, config.SSLInternalKey: gen.ClusterKey,
		config.SSLInternalCA: gen.CA, config.SSLRestClientAuth: "true", config.SSLRestCA: gen.ClientCA,
		config.AuthTokenFile: gen.Token,
	} {
		if err := s.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
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

	refused := func(name string, cl *client.Client, want codes.Code) {
		t.Helper()
		_, err := cl.List(ctx)
		if err == nil {
			t.Fatalf("%s: List succeeded, want refused", name)
		}
		if want != codes.Unknown && status.Code(err) != want {
			t.Errorf("%s: List = %v, want %v", name, err, want)
		}
	}
	// Plaintext: the TLS port does not answer it (gRPC reports the broken handshake as
	// Unavailable).
	plain, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	plain.Wait = 0
	defer plain.Close()
	refused("plaintext", plain, codes.Unknown)
	refused("TLS without a token", dialAs(t, security.ClientOptions{CA: gen.CA}, addr), codes.Unauthenticated)
	refused("a wrong token", dialAs(t, security.ClientOptions{CA: gen.CA, Token: "not-" + tok}, addr), codes.Unauthenticated)
	// A certificate from another CA fails the handshake.
	other, err := security.Generate(filepath.Join(dir, "other"), []string{"localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	refused("a foreign client certificate", dialAs(t, security.ClientOptions{CA: gen.CA, Cert: other.Client, Key: other.ClientKey, Token: tok}, addr), codes.Unknown)

	withToken := dialAs(t, security.ClientOptions{CA: gen.CA, Token: tok}, addr)
	withCert := dialAs(t, security.ClientOptions{CA: gen.CA, Cert: gen.Client, Key: gen.ClientKey}, addr)
	out := filepath.Join(dir, "out")
	const n, keys = 3000, 5
	spec := countSpec(n, 0, keys, out, "  execution.checkpointing.dir: "+filepath.Join(dir, "checkpoints"))
	id, err := withToken.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec), Parallelism: 3})
	if err != nil {
		t.Fatalf("submit with the token = %v", err)
	}
	watchFinished(t, ctx, withCert, id, 0)
	checkCounts(t, out, n, keys)
	if _, err := member.Job(ctx, id); err != nil {
		t.Errorf("the cluster's own client: %v", err)
	}

	// A client certificate authorizes client RPCs, not the cluster's: it cannot register a
	// TaskManager.
	conn := grpcConn(t, addr, security.ClientOptions{CA: gen.CA, Cert: gen.Client, Key: gen.ClientKey, Token: tok})
	_, err = pb.NewTaskManagerServiceClient(conn).RegisterTaskManager(ctx, &pb.RegisterTaskManagerRequest{
		TaskmanagerId: "rogue", Address: "127.0.0.1:1", Slots: 1})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterTaskManager with a client certificate = %v, want PermissionDenied", err)
	}
	conn = grpcConn(t, addr, security.ClientOptions{CA: gen.CA, Token: tok})
	_, err = pb.NewTaskManagerServiceClient(conn).RegisterTaskManager(ctx, &pb.RegisterTaskManagerRequest{
		TaskmanagerId: "rogue", Address: "127.0.0.1:1", Slots: 1})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("RegisterTaskManager with the token only = %v, want Unauthenticated", err)
	}

	// A TaskManager's port: plaintext and a client certificate of the REST side both fail.
	tmAddr := c.TMs[0].Addr()
	for name, o := range map[string]security.ClientOptions{
		"plaintext":          {},
		"client certificate": {CA: gen.CA, Cert: gen.Client, Key: gen.ClientKey},
	} {
		conn := grpcConn(t, tmAddr, o)
		_, err := pb.NewTaskExecutorServiceClient(conn).CancelTask(ctx, &pb.CancelTaskRequest{LeaderTerm: 1 << 62})
		if err == nil || status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.OK {
			t.Errorf("CancelTask on a TaskManager with %s = %v, want a refused connection", name, err)
		}
	}

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
	tc, err := tls.Dial("tcp", raftAddr, &tls.Config{InsecureSkipVerify: true, ServerName: security.InternalServerName}) //nolint:gosec // the test's rogue peer
	if err == nil {
		_, err = tc.Write([]byte("x"))
		if err == nil {
			_, err = tc.Read(make([]byte, 1))
		}
		tc.Close()
	}
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a TLS Raft connection without a client certificate = %v, want it refused", err)
	}
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
	if _, err := security.Generate(certs, []string{"localhost", "127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
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
	out := filepath.Join(dir, "out")
	spec := countSpec(1000, 0, 3, out, "  execution.checkpointing.dir: "+filepath.Join(dir, "checkpoints"))
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec), Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	watchFinished(t, ctx, cl, id, 0)
	checkCounts(t, out, 1000, 3)
}
