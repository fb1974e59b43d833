package security

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/config"
)

// Class is who may call an RPC.
type Class int

const (
	// Open RPCs need nothing (health checks).
	Open Class = iota
	// Client RPCs need the token, a client certificate or the internal certificate, when any
	// client authentication is configured.
	Client
	// Internal RPCs need the internal certificate, when internal TLS is on.
	Internal
)

// AuthorizationHeader is the metadata key of the bearer token.
const AuthorizationHeader = "authorization"

// InternalServerCreds is the server option of a port only cluster processes use.
func (s *Security) InternalServerCreds() []grpc.ServerOption {
	if c := s.InternalServerConfig(); c != nil {
		return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(c))}
	}
	return nil
}

// JobManagerServerCreds is the server option of the JobManager's RPC port. Each connection's
// role is decided once, at its handshake: a connection keeps it when the CA files change later
// (new connections are verified against the new ones).
func (s *Security) JobManagerServerCreds() []grpc.ServerOption {
	if c := s.JobManagerConfig(); c != nil {
		return []grpc.ServerOption{grpc.Creds(roleCreds{TransportCredentials: credentials.NewTLS(c), s: s})}
	}
	return nil
}

// AuthInfo is a TLS connection's authentication with the role its certificate proved.
type AuthInfo struct {
	credentials.TLSInfo
	Role Role
}

// roleCreds are TLS server credentials that classify the client's certificate at the
// handshake.
type roleCreds struct {
	credentials.TransportCredentials
	s *Security
}

func (c roleCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		return nil, nil, err
	}
	tlsInfo, ok := info.(credentials.TLSInfo)
	if !ok {
		conn.Close()
		return nil, nil, fmt.Errorf("unexpected auth info %T", info)
	}
	raw := make([][]byte, len(tlsInfo.State.PeerCertificates))
	for i, cert := range tlsInfo.State.PeerCertificates {
		raw[i] = cert.Raw
	}
	role, err := c.s.peerRole(raw)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, AuthInfo{TLSInfo: tlsInfo, Role: role}, nil
}

func (c roleCreds) Clone() credentials.TransportCredentials {
	return roleCreds{TransportCredentials: c.TransportCredentials.Clone(), s: c.s}
}

// InternalDialOption is the transport of a connection to another cluster process.
func (s *Security) InternalDialOption() grpc.DialOption {
	if c := s.InternalClientConfig(); c != nil {
		return grpc.WithTransportCredentials(credentials.NewTLS(c))
	}
	return grpc.WithTransportCredentials(insecure.NewCredentials())
}

// Authorize checks that the caller of an RPC of class c may call it: the error is
// Unauthenticated (no or wrong credentials) or PermissionDenied (a client calling a cluster
// RPC).
func (s *Security) Authorize(ctx context.Context, c Class, method string) error {
	if c == Open || s == nil {
		return nil
	}
	role := RoleAnonymous
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(AuthInfo); ok {
			role = info.Role
		}
	}
	switch {
	case role == RoleInternal:
		return nil
	case c == Internal && !s.InternalTLS():
		return nil // nothing proves who a cluster process is (warned at start)
	case c == Internal && role == RoleClient:
		return status.Errorf(codes.PermissionDenied, "%s is for cluster processes, which present the internal certificate (%s)", method, config.SSLInternalCA)
	case c == Internal:
		return status.Errorf(codes.Unauthenticated, "%s is for cluster processes, which present the internal certificate (%s)", method, config.SSLInternalCA)
	case role == RoleClient || !s.ClientAuthConfigured():
		return nil
	}
	if s.token != nil {
		got, ok := bearer(ctx)
		if !ok {
			return status.Errorf(codes.Unauthenticated, "%s needs a token: flinkctl --token-file FILE or FLINKCTL_TOKEN (the JobManager's %s)", method, config.AuthTokenFile)
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.token.get())) == 1 {
			return nil
		}
		return status.Errorf(codes.Unauthenticated, "%s: the token is wrong", method)
	}
	return status.Errorf(codes.Unauthenticated, "%s needs a client certificate that chains to %s", method, config.SSLRestCA)
}

// bearer returns the request's bearer token.
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(AuthorizationHeader) {
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "bearer") && tok != "" {
			return tok, true
		}
	}
	return "", false
}

// IncomingToken returns the authorization header of a request, to pass on with a call it
// forwards.
func IncomingToken(ctx context.Context) []string {
	md, _ := metadata.FromIncomingContext(ctx)
	return md.Get(AuthorizationHeader)
}

// UnaryInterceptor authorizes unary RPCs by classify's class of their method.
func (s *Security) UnaryInterceptor(classify func(method string) Class) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := s.Authorize(ctx, classify(info.FullMethod), info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor authorizes streaming RPCs by classify's class of their method.
func (s *Security) StreamInterceptor(classify func(method string) Class) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := s.Authorize(ss.Context(), classify(info.FullMethod), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// ClientOptions are what a client (flinkctl) brings: a CA to verify the JobManager by, an
// optional client certificate, and a token.
type ClientOptions struct {
	CA, Cert, Key string // PEM files
	Token         string
}

// DialOptions turns client options into gRPC dial options: TLS when a CA or a certificate is
// given (the server's host name verified), the token on every call.
func (o ClientOptions) DialOptions() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if o.CA == "" && o.Cert == "" && o.Key == "" {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		c, err := o.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	}
	if o.Token != "" {
		t, err := parseToken([][]byte{[]byte(o.Token)})
		if err != nil {
			return nil, fmt.Errorf("token: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds(t)))
	}
	return opts, nil
}

// MemberDialOptions are the dial options of a client that belongs to the cluster (an embedded
// cluster's own client, a process's health check): the internal transport, and the token of
// security.auth.token-file when one is set (it authorizes client RPCs without internal TLS).
func (s *Security) MemberDialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{s.InternalDialOption()}
	if s != nil && s.token != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds(s.token.get())))
	}
	return opts
}

func (o ClientOptions) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{MinVersion: minVersion}
	if o.CA != "" {
		b, _, err := readFile(o.CA)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		if c.RootCAs, err = parsePool([][]byte{b}); err != nil {
			return nil, fmt.Errorf("--ca %s: %w", o.CA, err)
		}
	}
	if (o.Cert == "") != (o.Key == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if o.Cert != "" {
		cert, _, err := readFile(o.Cert)
		if err != nil {
			return nil, fmt.Errorf("--cert: %w", err)
		}
		key, _, err := readFile(o.Key)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		kp, err := parseKeyPair([][]byte{cert, key})
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		c.Certificates = []tls.Certificate{*kp}
	}
	if c.RootCAs == nil {
		pool, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("system CA certificates: %w (give --ca)", err)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// ReadToken reads a token file (a flinkctl --token-file).
func ReadToken(path string) (string, error) {
	b, _, err := readFile(path)
	if err != nil {
		return "", err
	}
	return parseToken([][]byte{b})
}

// tokenCreds sends the bearer token with every call. It does not require TLS: a cluster
// without TLS but with a token is the operator's choice (the JobManager warns).
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{AuthorizationHeader: "Bearer " + string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return false }
