package dirowner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func mustAcquire(t *testing.T, dir string, o Owner) *Claim {
	t.Helper()
	c, err := Acquire(dir, o)
	if err != nil {
		t.Fatalf("Acquire(%v) = %v", o, err)
	}
	t.Cleanup(func() { _ = c.Release() })
	return c
}

func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	a, a2 := Owner{Job: "job-a", Operator: "out"}, Owner{Job: "job-a", Operator: "out2"}
	b := Owner{Job: "job-b", Operator: "out"}

	// Every subtask of a sink, in any process, shares the directory.
	c1 := mustAcquire(t, dir, a)
	c2 := mustAcquire(t, dir, a)

	// Another sink of the same job is refused at once.
	if _, err := Acquire(dir, a2); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), `operator "out" of this job`) {
		t.Errorf("Acquire(other sink of the job) = %v, want ErrInUse naming operator out", err)
	}
	// Another job is refused while an instance of the owner holds it, naming the owner.
	if _, err := Acquire(dir, b); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), `operator "out" of job job-a, which is running`) {
		t.Errorf("Acquire(other job while held) = %v, want ErrInUse naming job-a", err)
	}
	if err := c1.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, b); !errors.Is(err, ErrInUse) {
		t.Errorf("Acquire(other job while one instance still holds it) = %v, want ErrInUse", err)
	}
	if err := errors.Join(c2.Release(), c2.Release()); err != nil {
		t.Fatalf("Release (twice) = %v", err)
	}

	// Once no instance holds it (the job ended, its processes died), another job takes over.
	mustAcquire(t, dir, b)
	got, err := readOwner(dir)
	if err != nil || got != b {
		t.Errorf("owner after the takeover = %v, %v; want %v", got, err, b)
	}
	if _, err := Acquire(dir, a); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "job job-b") {
		t.Errorf("Acquire(former owner while the new one holds it) = %v, want ErrInUse naming job-b", err)
	}
}

// TestAcquireConcurrently: the subtasks of a sink that starts in a directory another job left
// all get it; of two jobs starting at once in a free directory exactly one does.
func TestAcquireConcurrently(t *testing.T) {
	dir := t.TempDir()
	old := mustAcquire(t, dir, Owner{Job: "old", Operator: "out"})
	if err := old.Release(); err != nil {
		t.Fatal(err)
	}
	me := Owner{Job: "new", Operator: "out"}
	const subtasks = 8
	errs := make(chan error, subtasks)
	var wg sync.WaitGroup
	for range subtasks {
		wg.Go(func() {
			c, err := Acquire(dir, me)
			if err == nil {
				t.Cleanup(func() { _ = c.Release() })
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Acquire by a subtask = %v", err)
		}
	}

	free := t.TempDir()
	won := make(chan Owner, 2)
	for _, o := range []Owner{{Job: "x", Operator: "out"}, {Job: "y", Operator: "out"}} {
		wg.Go(func() {
			if c, err := Acquire(free, o); err == nil {
				t.Cleanup(func() { _ = c.Release() })
				won <- o
			}
		})
	}
	wg.Wait()
	close(won)
	if n := len(won); n != 1 {
		t.Errorf("%d of two jobs got one directory, want exactly 1", n)
	}
}

func TestAcquireCorruptOwnerFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, OwnerFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, Owner{Job: "j", Operator: "out"}); err == nil || !strings.Contains(err.Error(), OwnerFile) {
		t.Errorf("Acquire(corrupt owner file) = %v, want an error naming %s", err, OwnerFile)
	}
	if _, err := Acquire(filepath.Join(dir, "missing"), Owner{Job: "j"}); err == nil {
		t.Errorf("Acquire(missing directory) = nil error")
	}
}
