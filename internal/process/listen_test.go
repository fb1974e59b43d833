package process

import (
	"testing"

	"github.com/goflink/goflink/config"
)

// Without internal TLS a process binds loopback unless an address is given (issue 16 F2: every
// port was bound to every interface, unauthenticated).
func TestListenAddr(t *testing.T) {
	plain, secured := config.New(), config.New()
	if err := secured.Set(config.SSLInternalEnabled, "true"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		settings *config.Config
		given    string
		want     string
	}{
		{plain, "", "127.0.0.1:6123"},
		{secured, "", ":6123"},
		{plain, ":7000", ":7000"},
		{plain, "0.0.0.0:7000", "0.0.0.0:7000"},
		{secured, "127.0.0.1:7000", "127.0.0.1:7000"},
	} {
		if got := ListenAddr(tc.settings, tc.given, 6123); got != tc.want {
			t.Errorf("ListenAddr(internal TLS %v, %q) = %q, want %q", tc.settings.Bool(config.SSLInternalEnabled), tc.given, got, tc.want)
		}
	}
}
