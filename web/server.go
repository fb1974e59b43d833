package web

import (
	"embed"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/goflink/goflink/internal/netaddr"
	"github.com/goflink/goflink/internal/security"
)

//go:embed assets
var assets embed.FS

// Server serves the dashboard and its API until Close.
type Server struct {
	srv  *http.Server
	addr string
	wg   sync.WaitGroup
}

// Serve serves the dashboard on lis (which it owns: Close closes it) with cl's data. The API's
// paths need what a client RPC needs (sec.RequireClient); the pages themselves are open, and
// ask for a token when the API answers 401.
func Serve(lis net.Listener, cl Cluster, sec *security.Security, log *slog.Logger) *Server {
	mux := http.NewServeMux()
	(&api{cl: cl, log: log}).routes(mux, sec.RequireClient)
	static, _ := fs.Sub(assets, "assets") // the directory is embedded: Sub cannot fail
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", files)
	for _, name := range []string{"/app.js", "/style.css"} {
		mux.Handle("GET "+name, files)
	}
	s := &Server{srv: sec.HTTPServer(securityHeaders(mux), log), addr: lis.Addr().String()}
	s.wg.Go(func() {
		if err := security.ServeHTTP(s.srv, lis); err != nil {
			log.Error("dashboard server stopped", "err", err)
		}
	})
	log.Info("serving the dashboard", "url", sec.HTTPScheme()+"://"+s.addr+"/")
	if !sec.ClientAuthConfigured() && !netaddr.IsLoopback(s.addr) {
		log.Warn("serving the dashboard on a network address without client authentication: anyone who reaches it can cancel jobs", "addr", s.addr)
	}
	return s
}

// securityHeaders keeps the pages from being framed or sniffed, and limits what they load to
// this server.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}

// Addr is the address the dashboard listens on.
func (s *Server) Addr() string { return s.addr }

// Close stops serving and waits for the server's goroutine. A nil Server is a no-op.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	err := s.srv.Close()
	s.wg.Wait()
	return err
}
