package dirsync

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

func TestMkdirAllSyncsTheParentOfEveryCreatedDirectory(t *testing.T) {
	base := t.TempDir()
	var mu sync.Mutex
	var synced []string
	defer SetSyncHook(func(dir string) { mu.Lock(); synced = append(synced, dir); mu.Unlock() })()
	if err := MkdirAll(filepath.Join(base, "a", "b", "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if want := []string{base, filepath.Join(base, "a"), filepath.Join(base, "a", "b")}; !slices.Equal(synced, want) {
		t.Errorf("synced %q, want %q (the parents of a, a/b and a/b/c, top down)", synced, want)
	}
	synced = nil
	if err := MkdirAll(filepath.Join(base, "a", "b"), 0o755); err != nil || len(synced) != 0 {
		t.Errorf("MkdirAll(existing) = %v, synced %q; want nothing to sync", err, synced)
	}
	if err := os.WriteFile(filepath.Join(base, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(base, "f", "x"), 0o755); err == nil {
		t.Errorf("MkdirAll under a file = nil error")
	}
	if err := Sync(filepath.Join(base, "missing")); err == nil {
		t.Errorf("Sync(missing) = nil error")
	}
}
