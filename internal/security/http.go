package security

import (
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/netaddr"
)

// HTTP limits of a process's HTTP ports (metrics, the dashboard and its JSON API): requests
// are small GETs and POSTs without bodies of note.
const (
	httpMaxHeaderBytes    = 16 << 10
	httpReadHeaderTimeout = 10 * time.Second
	httpIdleTimeout       = 2 * time.Minute
)

// HTTPServer is the server of a process's HTTP port: TLS as on the JobManager's RPC port when
// TLS is on (the REST certificate, else the internal one; a client certificate optional),
// with bounded headers and timeouts. Routes that serve data go through RequireClient.
func (s *Security) HTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         s.JobManagerConfig(),
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		IdleTimeout:       httpIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// ServeHTTP serves srv (from HTTPServer) on lis until it is closed: with TLS when srv has a
// TLS configuration.
func ServeHTTP(srv *http.Server, lis net.Listener) error {
	if srv.TLSConfig != nil {
		lis = tls.NewListener(lis, srv.TLSConfig)
	}
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// HTTPScheme is "https" when the process's HTTP ports serve TLS, else "http".
func (s *Security) HTTPScheme() string {
	if s.TLS() {
		return "https"
	}
	return "http"
}

// RequireClient serves h to requests that AuthorizeHTTP accepts, and 401 to others.
func (s *Security) RequireClient(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.AuthorizeHTTP(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="goflink"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// AuthorizeHTTP checks an HTTP request as Authorize checks a client RPC: a client or internal
// certificate, or the bearer token, when client authentication is configured.
func (s *Security) AuthorizeHTTP(r *http.Request) error {
	if s == nil || !s.ClientAuthConfigured() {
		return nil
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		raw := make([][]byte, len(r.TLS.PeerCertificates))
		for i, c := range r.TLS.PeerCertificates {
			raw[i] = c.Raw
		}
		if role, err := s.peerRole(raw); err == nil && role != RoleAnonymous {
			return nil
		}
	}
	if s.token == nil {
		return fmt.Errorf("%s needs a client certificate that chains to %s", r.URL.Path, config.SSLRestCA)
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || tok == "" {
		return fmt.Errorf("%s needs a token: the header Authorization: Bearer <the JobManager's %s>", r.URL.Path, config.AuthTokenFile)
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.token.get())) != 1 {
		return fmt.Errorf("%s: the token is wrong", r.URL.Path)
	}
	return nil
}

// HTTPService is an HTTP port being served (StartHTTP) until Close.
type HTTPService struct {
	srv  *http.Server
	addr string
	wg   sync.WaitGroup
}

// StartHTTP serves h on lis (which it owns: Close closes it) with HTTPServer's settings, on a
// goroutine of its own. what names the port in logs ("metrics", "dashboard"); one on a network
// address without client authentication is logged as a warning, with risk saying what anyone
// who reaches it can do.
func (s *Security) StartHTTP(lis net.Listener, h http.Handler, log *slog.Logger, what, risk string) *HTTPService {
	svc := &HTTPService{srv: s.HTTPServer(h, log), addr: lis.Addr().String()}
	svc.wg.Go(func() {
		if err := ServeHTTP(svc.srv, lis); err != nil {
			log.Error(what+" server stopped", "err", err)
		}
	})
	log.Info("serving "+what, "url", s.HTTPScheme()+"://"+svc.addr+"/")
	if !s.ClientAuthConfigured() && !netaddr.IsLoopback(svc.addr) {
		log.Warn("serving "+what+" on a network address without client authentication: "+risk, "addr", svc.addr)
	}
	return svc
}

// Addr is the address the port listens on.
func (svc *HTTPService) Addr() string { return svc.addr }

// Close stops serving and waits for the server's goroutine. A nil HTTPService is a no-op.
func (svc *HTTPService) Close() error {
	if svc == nil {
		return nil
	}
	err := svc.srv.Close()
	svc.wg.Wait()
	return err
}
