//go:build unix

package coordinator

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
)

// The Raft log, stable store and snapshots hold the whole replicated state; they were created
// 0644 in 0755 directories, readable by every local user. Directories are 0700 and files
// 0600, snapshots included, whatever the umask, and an older data dir is tightened on start.
func TestRaftFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0o022) // the usual umask, which the library's modes pass through
	defer syscall.Umask(old)
	dataDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dataDir, "raft", "snapshots"), 0o755); err != nil { // as an older version left it
		t.Fatal(err)
	}
	rpc, raft := sockets(t)
	jm, err := Start(Config{NodeID: "jm-1", DataDir: dataDir, RPCListener: rpc, RaftListener: raft, Logger: discardLog, RaftLogger: discardLog})
	if err != nil {
		t.Fatal(err)
	}
	defer jm.Close()
	poll.Until(t, 10*time.Second, "the JobManager to lead", func() error {
		if !jm.IsLeader() {
			return errors.New("not leading")
		}
		return nil
	})
	if _, err := jm.node.apply(submitCmd("j1", "job", ts(1)), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := jm.node.r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	var files int
	err = filepath.WalkDir(filepath.Join(dataDir, "raft"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v", p, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// raft.db, a snapshot's meta.json and state.bin
	if files < 3 {
		t.Errorf("%d files under the raft dir, want the log store and a snapshot's files", files)
	}
}
