package confine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goflink/goflink/config"
)

func TestCheck(t *testing.T) {
	base := t.TempDir()
	allowed := filepath.Join(base, "allowed")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(allowed, "sub"), filepath.Join(outside, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"out-link":  outside,                       // a symlink leaving the allowed directory
		"dir-link":  filepath.Join(outside, "dir"), // its ".." is the outside directory
		"in-link":   filepath.Join(allowed, "sub"), // a symlink staying inside
		"rel-link":  "../outside",                  // relative target, leaving
		"loop-link": filepath.Join(allowed, "loop-link"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(allowed, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The allowed directory itself reached through a symlink is still allowed.
	if err := os.Symlink(allowed, filepath.Join(base, "allowed-link")); err != nil {
		t.Fatal(err)
	}
	d := New(filepath.Join(base, "allowed-link"))
	for _, tc := range []struct {
		name, path string
		want       string // resolved path; "" when it must be refused
	}{
		{"the directory itself", allowed, allowed},
		{"an existing subdirectory", filepath.Join(allowed, "sub"), filepath.Join(allowed, "sub")},
		{"a path that does not exist yet", filepath.Join(allowed, "new", "out"), filepath.Join(allowed, "new", "out")},
		{"dot-dot staying inside", filepath.Join(allowed, "sub") + "/../x", filepath.Join(allowed, "x")},
		{"a symlink staying inside", filepath.Join(allowed, "in-link", "out"), filepath.Join(allowed, "sub", "out")},
		{"dot-dot leaving", allowed + "/../outside/x", ""},
		{"dot-dot of a path that does not exist, leaving", allowed + "/new/../../outside", ""},
		{"an absolute path elsewhere", "/etc/passwd", ""},
		{"a symlink leaving", filepath.Join(allowed, "out-link", "x"), ""},
		{"a relative symlink leaving", filepath.Join(allowed, "rel-link"), ""},
		{"dot-dot after a symlink (applied to its target, not to the text)", allowed + "/dir-link/../x", ""},
		{"a sibling with the allowed directory as prefix", allowed + "-not", ""},
		{"a symlink loop (the kernel refuses it at open)", filepath.Join(allowed, "loop-link", "x"), filepath.Join(allowed, "loop-link", "x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Check(tc.path)
			if tc.want == "" {
				if !errors.Is(err, ErrOutside) {
					t.Fatalf("Check(%q) = %q, %v; want an error wrapping ErrOutside", tc.path, got, err)
				}
				for _, want := range []string{tc.path, config.AllowedPaths, filepath.Join(base, "allowed-link")} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Check(%q) error %q does not name %q", tc.path, err, want)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Check(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
}

func TestCheckRelative(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	if err := os.Mkdir("out", 0o755); err != nil {
		t.Fatal(err)
	}
	resolvedWD, err := filepath.EvalSymlinks(wd)
	if err != nil {
		t.Fatal(err)
	}
	d := New(".")
	if got, err := d.Check("out/odd-even"); err != nil || got != filepath.Join(resolvedWD, "out", "odd-even") {
		t.Errorf("Check(out/odd-even) = %q, %v; want it under the working directory %s", got, err, resolvedWD)
	}
	if _, err := d.Check("../elsewhere"); !errors.Is(err, ErrOutside) {
		t.Errorf("Check(../elsewhere) = %v, want ErrOutside", err)
	}
	if _, err := d.Check(""); err == nil || errors.Is(err, ErrOutside) {
		t.Errorf("Check(\"\") = %v, want an empty-path error", err)
	}
	if _, err := New().Check("out"); !errors.Is(err, ErrOutside) {
		t.Errorf("empty set: Check(out) = %v, want ErrOutside", err)
	}
}

func TestFromSettings(t *testing.T) {
	s := config.New()
	if got := FromSettings(s, "/var/lib/jm/checkpoints").Dirs(); strings.Join(got, ",") != ".,/var/lib/jm/checkpoints" {
		t.Errorf("default = %q, want the working directory and the default checkpoint directory", got)
	}
	_ = s.Set(config.CheckpointDir, "/shared/cp")
	_ = s.Set(config.SavepointDir, "/shared/sp")
	if got := FromSettings(s, "/var/lib/jm/checkpoints").Dirs(); strings.Join(got, ",") != ".,/shared/cp,/shared/sp" {
		t.Errorf("default with checkpoint and savepoint dirs = %q", got)
	}
	_ = s.Set(config.AllowedPaths, "/srv/out;/srv/certs")
	if got := FromSettings(s, "").Dirs(); strings.Join(got, ",") != "/srv/out,/srv/certs" {
		t.Errorf("set = %q, want exactly io.allowed-paths", got)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(small, []byte("pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, 2048), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(small, 1024); err != nil || string(b) != "pem" {
		t.Errorf("ReadFile(small) = %q, %v", b, err)
	}
	for _, tc := range []struct{ path, want string }{
		{big, "has 2048 bytes, more than the limit of 1024"},
		{"/dev/zero", "is not a regular file (it is a character device)"},
		{zeroLink, "is not a regular file (it is a character device)"},
		{fifo, "is not a regular file (it is a FIFO)"},
		{dir, "is not a regular file (it is a directory)"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		if _, err := ReadFile(tc.path, 1024); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadFile(%s) = %v, want an error containing %q", tc.path, err, tc.want)
		}
	}
}
