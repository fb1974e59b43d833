package security

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestHTTPServer serves a data route through HTTPServer and RequireClient on a real TLS
// listener: it needs the token, a client certificate of the clients' CA or the internal
// certificate; a plaintext request and a wrong token are refused.
func TestHTTPServer(t *testing.T) {
	defer goleak.VerifyNone(t)
	g := generate(t)
	opts := internalOpts(g)
	opts.TokenFile = g.Token
	opts.ClientAuth = true
	opts.REST.CA = g.ClientCA
	s, err := New(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ReadToken(g.Token)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /data", s.RequireClient(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "secret") })))
	mux.HandleFunc("GET /open", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "open") })
	srv := s.HTTPServer(mux, slog.New(slog.DiscardHandler))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ServeHTTP(srv, lis) }()
	defer func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	}()
	if s.HTTPScheme() != "https" {
		t.Fatalf("scheme %q, want https", s.HTTPScheme())
	}
	caPEM, err := os.ReadFile(g.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	client := func(certFile, keyFile string) *http.Client {
		c := &tls.Config{RootCAs: roots, ServerName: "localhost"}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: c, DisableKeepAlives: true}}
	}
	url := "https://" + lis.Addr().String()
	for _, tc := range []struct {
		name   string
		c      *http.Client
		path   string
		token  string
		status int
	}{
		{"open route, anonymous", client("", ""), "/open", "", http.StatusOK},
		{"data, anonymous", client("", ""), "/data", "", http.StatusUnauthorized},
		{"data, wrong token", client("", ""), "/data", "x" + tok, http.StatusUnauthorized},
		{"data, token", client("", ""), "/data", tok, http.StatusOK},
		{"data, client certificate", client(g.Client, g.ClientKey), "/data", "", http.StatusOK},
		{"data, cluster certificate", client(g.Cluster, g.ClusterKey), "/data", "", http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodGet, url+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := tc.c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %s %q, want %d", tc.name, resp.Status, body, tc.status)
		}
		if resp.StatusCode == http.StatusUnauthorized && !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without a Bearer challenge", tc.name)
		}
	}
	// Plaintext on the TLS port gets no data.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + lis.Addr().String() + "/data")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plaintext request served")
		}
	}
}
