package web

import (
	"embed"
	"io/fs"
	"log/slog"
	"net"
	"net/http"

	"github.com/goflink/goflink/internal/security"
)

//go:embed assets
var assets embed.FS

// Serve serves the dashboard on lis (which it owns: Close closes it) with cl's data. The API's
// paths need what a client RPC needs (sec.RequireClient); the pages themselves are open, and
// ask for a token when the API answers 401.
func Serve(lis net.Listener, cl Cluster, sec *security.Security, log *slog.Logger) *security.HTTPService {
	mux := http.NewServeMux()
	(&api{cl: cl, log: log}).routes(mux, sec.RequireClient)
	static, _ := fs.Sub(assets, "assets") // the directory is embedded: Sub cannot fail
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", files)
	for _, name := range []string{"/app.js", "/style.css"} {
		mux.Handle("GET "+name, files)
	}
	return sec.StartHTTP(lis, securityHeaders(jsonErrors(mux)), log, "the dashboard", "anyone who reaches it can cancel jobs")
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
