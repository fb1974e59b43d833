package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flinkctl cert writes a set once; a second run refuses to replace it (a cluster's CA
// replaced by accident locks its processes out) unless --if-missing keeps a complete set;
// a partial set is refused either way.
func TestCertKeepsExistingFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if code, _, stderr := execute(t, "cert", "--dir", dir, "--host", "localhost"); code != ExitOK {
		t.Fatalf("first cert: exit %d: %s", code, stderr)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := execute(t, "cert", "--dir", dir, "--host", "localhost")
	if code == ExitOK || !strings.Contains(stderr, "does not replace certificates") {
		t.Errorf("second cert without --if-missing: exit %d: %s, want refused", code, stderr)
	}
	code, stdout, stderr := execute(t, "cert", "--dir", dir, "--host", "localhost", "--if-missing")
	if code != ExitOK || !strings.Contains(stdout, filepath.Join(dir, "cluster.pem")) {
		t.Errorf("cert --if-missing on a complete set: exit %d: %s %s, want the configuration printed", code, stdout, stderr)
	}
	if again, err := os.ReadFile(filepath.Join(dir, "ca.pem")); err != nil || string(again) != string(ca) {
		t.Errorf("the CA changed (%v): a kept set must not be rewritten", err)
	}
	if err := os.Remove(filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = execute(t, "cert", "--dir", dir, "--host", "localhost", "--if-missing")
	if code == ExitOK || !strings.Contains(stderr, "but not token") {
		t.Errorf("cert --if-missing on a partial set: exit %d: %s, want refused naming the missing file", code, stderr)
	}
}
