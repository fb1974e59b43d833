package security

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/config"
)

func generate(t *testing.T) Generated {
	t.Helper()
	g, err := Generate(filepath.Join(t.TempDir(), "certs"), []string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func internalOpts(g Generated) Options {
	return Options{Internal: Files{Enabled: true, Cert: g.Cluster, Key: g.ClusterKey, CA: g.CA,
		certKey: "security.ssl.internal", caKey: config.SSLInternalCA}}
}

// TestNewRefusesBadSettings: a side enabled without its files, or with a bad file, fails at
// start with the key's name.
func TestNewRefusesBadSettings(t *testing.T) {
	g := generate(t)
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  map[string]string
		want string
	}{
		{"internal without files", map[string]string{config.SSLInternalEnabled: "true"}, "set security.ssl.internal.cert and security.ssl.internal.key"},
		{"internal without a CA", map[string]string{config.SSLInternalEnabled: "true", config.SSLInternalCert: g.Cluster, config.SSLInternalKey: g.ClusterKey}, "set security.ssl.internal.ca"},
		{"key of another certificate", map[string]string{config.SSLInternalEnabled: "true", config.SSLInternalCert: g.Cluster, config.SSLInternalKey: g.ClientKey, config.SSLInternalCA: g.CA}, "security.ssl.internal.cert/.key"},
		{"CA that is no PEM", map[string]string{config.SSLInternalEnabled: "true", config.SSLInternalCert: g.Cluster, config.SSLInternalKey: g.ClusterKey, config.SSLInternalCA: g.Token}, "security.ssl.internal.ca: no PEM certificate"},
		{"missing token file", map[string]string{config.AuthTokenFile: "/nonexistent/token"}, "security.auth.token-file"},
		{"empty token file", map[string]string{config.AuthTokenFile: empty}, "empty"},
		{"token file a device", map[string]string{config.AuthTokenFile: "/dev/zero"}, "not a regular file"},
		{"client auth without CA", map[string]string{config.SSLRestClientAuth: "true"}, "needs security.ssl.rest.ca"},
		{"REST TLS without internal TLS", map[string]string{config.SSLRestEnabled: "true", config.SSLRestCert: g.Cluster, config.SSLRestKey: g.ClusterKey}, "security.ssl.rest.enabled needs security.ssl.internal.enabled"},
		{"REST TLS without files", map[string]string{config.SSLInternalEnabled: "true", config.SSLInternalCert: g.Cluster, config.SSLInternalKey: g.ClusterKey, config.SSLInternalCA: g.CA, config.SSLRestEnabled: "true"}, "set security.ssl.rest.cert and security.ssl.rest.key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.New()
			for k, v := range tc.set {
				if err := c.Set(k, v); err != nil {
					t.Fatal(err)
				}
			}
			_, err := FromSettings(c, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromSettings = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestInternalHandshake: two cluster processes talk; a client certificate of another CA, or
// none, is refused by the internal server, and a server of another CA by the internal client.
func TestInternalHandshake(t *testing.T) {
	g, other := generate(t), generate(t)
	s, err := New(internalOpts(g), nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(internalOpts(other), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Over loopback TCP, not net.Pipe: with TLS 1.3 the client's handshake ends before the
	// server checks its certificate, and the server's alert must not block on a reader.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	handshake := func(server, client *tls.Config) error {
		errc := make(chan error, 1)
		go func() {
			conn, err := lis.Accept()
			if err != nil {
				errc <- err
				return
			}
			defer conn.Close()
			errc <- tls.Server(conn, server).Handshake()
		}()
		conn, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cerr := tls.Client(conn, client).Handshake()
		return errors.Join(cerr, <-errc)
	}
	if err := handshake(s.InternalServerConfig(), s.InternalClientConfig()); err != nil {
		t.Errorf("cluster processes of one CA: %v", err)
	}
	if err := handshake(s.InternalServerConfig(), o.InternalClientConfig()); err == nil {
		t.Error("a client of another CA was accepted")
	}
	if err := handshake(o.InternalServerConfig(), s.InternalClientConfig()); err == nil {
		t.Error("a server of another CA was accepted")
	}
	noCert := &tls.Config{InsecureSkipVerify: true, ServerName: InternalServerName} //nolint:gosec // the rogue client
	if err := handshake(s.InternalServerConfig(), noCert); err == nil {
		t.Error("a client without a certificate was accepted")
	}
}

// TestAuthorize is the decision table of who may call what.
func TestAuthorize(t *testing.T) {
	g := generate(t)
	opts := internalOpts(g)
	opts.TokenFile = g.Token
	s, err := New(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ReadToken(g.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctxAs := func(role Role, token string) context.Context {
		ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: AuthInfo{TLSInfo: credentials.TLSInfo{}, Role: role}})
		if token != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(AuthorizationHeader, "Bearer "+token))
		}
		return ctx
	}
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		class Class
		want  codes.Code
	}{
		{"health, anonymous", context.Background(), Open, codes.OK},
		{"client RPC, anonymous", ctxAs(RoleAnonymous, ""), Client, codes.Unauthenticated},
		{"client RPC, wrong token", ctxAs(RoleAnonymous, "x"+tok), Client, codes.Unauthenticated},
		{"client RPC, token", ctxAs(RoleAnonymous, tok), Client, codes.OK},
		{"client RPC, client certificate", ctxAs(RoleClient, ""), Client, codes.OK},
		{"client RPC, cluster process", ctxAs(RoleInternal, ""), Client, codes.OK},
		{"cluster RPC, token", ctxAs(RoleAnonymous, tok), Internal, codes.Unauthenticated},
		{"cluster RPC, client certificate", ctxAs(RoleClient, tok), Internal, codes.PermissionDenied},
		{"cluster RPC, cluster process", ctxAs(RoleInternal, ""), Internal, codes.OK},
	} {
		if got := status.Code(s.Authorize(tc.ctx, tc.class, "/m")); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Without any security configured, everything is open (as before).
	var none *Security
	if err := none.Authorize(ctxAs(RoleAnonymous, ""), Internal, "/m"); err != nil {
		t.Errorf("no security: %v", err)
	}
}

// TestWatchedReload: a changed file is parsed again; a bad one keeps the last good value and
// reports the error; nothing is read more often than reloadCheck.
func TestWatchedReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var reported []error
	w, err := newWatched(parseToken, func(err error) { reported = append(reported, err) }, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	w.now = func() time.Time { return now }
	write := func(s string, mod time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	write("two\n", now.Add(time.Second))
	if got := w.get(); got != "one" {
		t.Errorf("within reloadCheck: %q, want the old value", got)
	}
	now = now.Add(reloadCheck)
	if got := w.get(); got != "two" {
		t.Errorf("after a change: %q, want two", got)
	}
	write("", now.Add(2*time.Second))
	now = now.Add(reloadCheck)
	if got := w.get(); got != "two" || len(reported) != 1 {
		t.Errorf("after a bad write: %q (%d errors reported), want two kept and the error reported", got, len(reported))
	}
	write("three", now.Add(3*time.Second))
	now = now.Add(reloadCheck)
	if got := w.get(); got != "three" {
		t.Errorf("after the fix: %q, want three", got)
	}
}

func TestClientOptions(t *testing.T) {
	g := generate(t)
	for _, tc := range []struct {
		o    ClientOptions
		want string
	}{
		{ClientOptions{CA: "/nonexistent"}, "--ca"},
		{ClientOptions{CA: g.Token}, "no PEM certificate"},
		{ClientOptions{CA: g.CA, Cert: g.Client}, "--cert and --key go together"},
		{ClientOptions{CA: g.CA, Cert: g.Client, Key: g.ClusterKey}, "--cert/--key"},
		{ClientOptions{Token: "two words"}, "white space"},
	} {
		if _, err := tc.o.DialOptions(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DialOptions(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
	if _, err := (ClientOptions{CA: g.CA, Cert: g.Client, Key: g.ClientKey, Token: "t"}).DialOptions(); err != nil {
		t.Errorf("good options: %v", err)
	}
}

// TestGenerateModes: keys and the token are private to the user.
func TestGenerateModes(t *testing.T) {
	g := generate(t)
	for _, p := range []string{g.CAKey, g.ClusterKey, g.ClientCAKey, g.ClientKey, g.Token} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
}
