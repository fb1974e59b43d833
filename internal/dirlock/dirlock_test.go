package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSecondAcquireFailsAtOnceNamingTheHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jm1")
	l, err := Acquire(dir, "jobmanager")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Acquire(dir, "jobmanager")
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Acquire = %v, want ErrInUse", err)
	}
	want := fmt.Sprintf("data dir %s is in use by another jobmanager (pid %d)", dir, os.Getpid())
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to say %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Acquire took %v: it must not wait for the lock", d)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir, "jobmanager")
	if err != nil {
		t.Fatalf("Acquire after Release = %v", err)
	}
	if err := l2.Release(); err != nil {
		t.Fatal(err)
	}
}

// A lock held by a process that died is free: the kernel released it.
func TestLockOfDeadProcessIsFree(t *testing.T) {
	if os.Getenv("DIRLOCK_HOLD") != "" {
		if _, err := Acquire(os.Getenv("DIRLOCK_HOLD"), "jobmanager"); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("LOCKED")
		select {} // until the parent kills it
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=TestLockOfDeadProcessIsFree")
	cmd.Env = append(os.Environ(), "DIRLOCK_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "LOCKED") {
		t.Fatalf("child said %q", buf[:n])
	}
	if _, err := Acquire(dir, "jobmanager"); !strings.Contains(fmt.Sprint(err), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Fatalf("Acquire while the child holds it = %v, want the child's pid %d", err, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: it exits with the signal
	l, err := Acquire(dir, "jobmanager")
	if err != nil {
		t.Fatalf("Acquire after the holder was killed = %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}
