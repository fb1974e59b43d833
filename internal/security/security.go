// Package security holds goflink's transport security, Flink's way: mutual TLS between cluster
// processes (security.ssl.internal.*: JobManager and TaskManager RPCs, the data exchange, Raft),
// TLS for clients on the JobManager's RPC port (security.ssl.rest.*), and bearer tokens or
// client certificates for client RPCs (security.auth.token-file,
// security.ssl.rest.authentication-enabled). Certificates and tokens are PEM and text files,
// read again when they change.
//
// The JobManager serves clients and cluster processes on one port. Cluster processes ask for
// the server name InternalServerName and get the internal certificate; clients get the REST
// certificate (the internal one when REST TLS is off). Internal peers are verified against the
// internal CA without host names (as Flink, so containers may move); clients verify the
// server's host name as usual.
package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/goflink/goflink/config"
)

// InternalServerName is the TLS server name cluster processes ask for when they dial each
// other: it selects the internal certificate on the JobManager's shared port.
const InternalServerName = "goflink-internal"

// Options are the security settings of a process.
type Options struct {
	Internal   Files // security.ssl.internal.*
	REST       Files // security.ssl.rest.*
	ClientAuth bool  // security.ssl.rest.authentication-enabled
	TokenFile  string
}

// Files name a TLS side's PEM files; Enabled turns it on.
type Files struct {
	Enabled        bool
	Cert, Key, CA  string
	certKey, caKey string // the config keys, for errors
}

// FromConfig reads the security keys of a process's configuration.
func FromConfig(c *config.Config) Options {
	return Options{
		Internal: Files{Enabled: c.Bool(config.SSLInternalEnabled), Cert: c.String(config.SSLInternalCert),
			Key: c.String(config.SSLInternalKey), CA: c.String(config.SSLInternalCA), certKey: "security.ssl.internal", caKey: config.SSLInternalCA},
		REST: Files{Enabled: c.Bool(config.SSLRestEnabled), Cert: c.String(config.SSLRestCert),
			Key: c.String(config.SSLRestKey), CA: c.String(config.SSLRestCA), certKey: "security.ssl.rest", caKey: config.SSLRestCA},
		ClientAuth: c.Bool(config.SSLRestClientAuth),
		TokenFile:  c.String(config.AuthTokenFile),
	}
}

// Security is a process's loaded security: its certificates, CAs and token, each read again
// when its files change. The zero of each part is off. It is safe for concurrent use.
type Security struct {
	opts       Options
	internal   *watched[*tls.Certificate]
	internalCA *watched[*x509.CertPool]
	rest       *watched[*tls.Certificate]
	restCA     *watched[*x509.CertPool]
	token      *watched[string]
}

// New loads what opts name; a missing, unreadable or malformed file, or a side enabled without
// its files, is an error naming the key. log receives failed reloads.
func New(opts Options, log *slog.Logger) (*Security, error) {
	if log == nil {
		log = slog.Default()
	}
	onError := func(err error) { log.Error("security files", "err", err) }
	s := &Security{opts: opts}
	var err error
	if opts.Internal.Enabled {
		if s.internal, s.internalCA, err = loadSide(opts.Internal, true, onError); err != nil {
			return nil, err
		}
	}
	if opts.REST.Enabled {
		// The JobManager's one port serves cluster processes too, and they dial it with TLS only
		// when internal TLS is on: a port that is TLS for clients alone would refuse them all.
		if !opts.Internal.Enabled {
			return nil, fmt.Errorf("%s needs %s: the JobManager's RPC port serves TaskManagers and the other JobManagers too, and they speak TLS to it only with the internal certificate", config.SSLRestEnabled, config.SSLInternalEnabled)
		}
		if s.rest, _, err = loadSide(opts.REST, false, onError); err != nil {
			return nil, err
		}
	}
	if opts.ClientAuth {
		if opts.REST.CA == "" {
			return nil, fmt.Errorf("%s needs %s, the CA client certificates chain to", config.SSLRestClientAuth, config.SSLRestCA)
		}
		if s.restCA, err = newWatched(parsePool, onError, opts.REST.CA); err != nil {
			return nil, fmt.Errorf("%s: %w", config.SSLRestCA, err)
		}
	}
	if opts.TokenFile != "" {
		if s.token, err = newWatched(parseToken, onError, opts.TokenFile); err != nil {
			return nil, fmt.Errorf("%s: %w", config.AuthTokenFile, err)
		}
	}
	return s, nil
}

// FromSettings is New(FromConfig(c), log).
func FromSettings(c *config.Config, log *slog.Logger) (*Security, error) {
	return New(FromConfig(c), log)
}

func loadSide(f Files, needCA bool, onError func(error)) (*watched[*tls.Certificate], *watched[*x509.CertPool], error) {
	if f.Cert == "" || f.Key == "" {
		return nil, nil, fmt.Errorf("%s.enabled is true: set %s.cert and %s.key (PEM files)", f.certKey, f.certKey, f.certKey)
	}
	cert, err := newWatched(parseKeyPair, onError, f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("%s.cert/.key: %w", f.certKey, err)
	}
	if !needCA {
		return cert, nil, nil
	}
	if f.CA == "" {
		return nil, nil, fmt.Errorf("%s.enabled is true: set %s (PEM CA file)", f.certKey, f.caKey)
	}
	ca, err := newWatched(parsePool, onError, f.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.caKey, err)
	}
	return cert, ca, nil
}

func parseKeyPair(data [][]byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(data[0], data[1])
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func parsePool(data [][]byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data[0]) {
		return nil, errors.New("no PEM certificate in it")
	}
	return p, nil
}

// maxTokenBytes bounds a token: long enough for any generated secret.
const maxTokenBytes = 4096

func parseToken(data [][]byte) (string, error) {
	t := strings.TrimSpace(string(data[0]))
	switch {
	case t == "":
		return "", errors.New("the token is empty")
	case len(t) > maxTokenBytes:
		return "", fmt.Errorf("the token is longer than %d bytes", maxTokenBytes)
	case strings.ContainsAny(t, " \t\r\n"):
		return "", errors.New("the token holds white space (one token on one line)")
	}
	return t, nil
}

// InternalTLS reports whether cluster processes talk over mutual TLS.
func (s *Security) InternalTLS() bool { return s != nil && s.internal != nil }

// TLS reports whether the JobManager's RPC port serves TLS (internal or REST).
func (s *Security) TLS() bool { return s != nil && (s.internal != nil || s.rest != nil) }

// ClientAuthConfigured reports whether client RPCs need a token or a client certificate.
func (s *Security) ClientAuthConfigured() bool {
	return s != nil && (s.token != nil || s.restCA != nil)
}

// verifyChain checks a peer's certificate chain (leaf first) against pool for usage, without a
// host name.
func verifyChain(raw [][]byte, pool *x509.CertPool, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, errors.New("no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", i, err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, err
	}
	return certs[0], nil
}

// minVersion is TLS 1.2, Flink's default protocol; Go negotiates 1.3 between its own ends.
const minVersion = tls.VersionTLS12

// InternalServerConfig is the TLS configuration of a port only cluster processes use (a
// TaskManager's RPC and data port, the Raft port): the internal certificate, and a client
// certificate that chains to the internal CA is required. Nil when internal TLS is off.
func (s *Security) InternalServerConfig() *tls.Config {
	if !s.InternalTLS() {
		return nil
	}
	return &tls.Config{
		MinVersion:     minVersion,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.internal.get(), nil },
		ClientAuth:     tls.RequireAnyClientCert, // verified below, against the CA as it is now
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if _, err := verifyChain(raw, s.internalCA.get(), x509.ExtKeyUsageClientAuth); err != nil {
				return fmt.Errorf("peer is not a cluster process (%s): %w", config.SSLInternalCA, err)
			}
			return nil
		},
	}
}

// InternalClientConfig is the TLS configuration to dial another cluster process: the internal
// certificate as client certificate, the server verified against the internal CA. Nil when
// internal TLS is off.
func (s *Security) InternalClientConfig() *tls.Config {
	if !s.InternalTLS() {
		return nil
	}
	return &tls.Config{
		MinVersion: minVersion,
		ServerName: InternalServerName,
		// The chain is verified below, against the internal CA as it is now and without a host
		// name: cluster processes are known by their certificate, not their address.
		InsecureSkipVerify:   true, //nolint:gosec // verified by VerifyPeerCertificate
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return s.internal.get(), nil },
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if _, err := verifyChain(raw, s.internalCA.get(), x509.ExtKeyUsageServerAuth); err != nil {
				return fmt.Errorf("server is not a cluster process (%s): %w", config.SSLInternalCA, err)
			}
			return nil
		},
	}
}

// JobManagerConfig is the TLS configuration of the JobManager's RPC port, which serves cluster
// processes and clients: the internal certificate to those asking for InternalServerName, the
// REST one (else the internal one) to others. A client certificate is optional; one given
// must chain to the internal CA or (with client authentication) the REST CA. Nil when the port
// is plaintext.
func (s *Security) JobManagerConfig() *tls.Config {
	if !s.TLS() {
		return nil
	}
	return &tls.Config{
		MinVersion: minVersion,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if s.rest != nil && (s.internal == nil || hello.ServerName != InternalServerName) {
				return s.rest.get(), nil
			}
			return s.internal.get(), nil
		},
		ClientAuth: tls.RequestClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return nil // a client without a certificate: its RPCs need the token
			}
			if _, err := s.peerRole(raw); err != nil {
				return err
			}
			return nil
		},
	}
}

// Role is who a caller of the JobManager's port proved to be.
type Role int

const (
	// RoleAnonymous gave no certificate (a token may still authorize its client RPCs).
	RoleAnonymous Role = iota
	// RoleClient gave a client certificate that chains to the REST CA.
	RoleClient
	// RoleInternal gave a certificate that chains to the internal CA: a cluster process.
	RoleInternal
)

// peerRole classifies a verified handshake's client certificate chain.
func (s *Security) peerRole(raw [][]byte) (Role, error) {
	if len(raw) == 0 {
		return RoleAnonymous, nil
	}
	var errs []error
	if s.internalCA != nil {
		_, err := verifyChain(raw, s.internalCA.get(), x509.ExtKeyUsageClientAuth)
		if err == nil {
			return RoleInternal, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", config.SSLInternalCA, err))
	}
	if s.restCA != nil {
		_, err := verifyChain(raw, s.restCA.get(), x509.ExtKeyUsageClientAuth)
		if err == nil {
			return RoleClient, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", config.SSLRestCA, err))
	}
	if len(errs) == 0 {
		errs = append(errs, fmt.Errorf("no CA for client certificates is configured (%s)", config.SSLRestClientAuth))
	}
	return RoleAnonymous, fmt.Errorf("client certificate not accepted: %w", errors.Join(errs...))
}

// Listen wraps lis in the internal server TLS when internal TLS is on.
func (s *Security) Listen(lis net.Listener) net.Listener {
	if c := s.InternalServerConfig(); c != nil {
		return tls.NewListener(lis, c)
	}
	return lis
}
