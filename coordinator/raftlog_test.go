package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goflink/goflink/internal/poll"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records parses the buffer as slog JSON lines; a line that is not one fails the test.
func (b *lockedBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil || r["level"] == nil || r["msg"] == nil {
			t.Fatalf("log line %q is not a slog JSON record (err %v)", line, err)
		}
		out = append(out, r)
	}
	return out
}

type stringer struct{}

func (stringer) String() string { return "Node at 127.0.0.1:1 [Leader]" }

// hashicorp/raft's logger writes slog records: from WARN at slog's INFO, from DEBUG at
// slog's DEBUG, with the logger's name as "module", its With pairs, and hclog.Fmt and
// Stringer values as text.
func TestRaftLoggerWritesSlogRecords(t *testing.T) {
	var buf lockedBuffer
	l := newRaftLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Info("entering follower state", "follower", stringer{})
	l.Debug("debug detail")
	if l.IsInfo() || !l.IsWarn() {
		t.Errorf("IsInfo() = %v, IsWarn() = %v at slog INFO; want raft from WARN only", l.IsInfo(), l.IsWarn())
	}
	l.With("server-id", "jm1").Warn("heartbeat timeout reached, starting election", "last-leader-id", "", "node", stringer{})
	l.Named("snapshot").Error("failed to take snapshot", "error", errors.New("disk full"), "percent", hclog.Fmt("%0.1f%%", 12.5))
	recs := buf.records(t)
	if len(recs) != 2 {
		t.Fatalf("records %v, want the WARN and the ERROR only", recs)
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "heartbeat timeout reached, starting election", "module": "raft", "server-id": "jm1", "last-leader-id": "",
			"node": "Node at 127.0.0.1:1 [Leader]"},
		{"level": "ERROR", "msg": "failed to take snapshot", "module": "raft.snapshot", "error": "disk full", "percent": "12.5%"},
	}
	for i, w := range want {
		for k, v := range w {
			if recs[i][k] != v {
				t.Errorf("record %d %v: %s = %v, want %v", i, recs[i], k, recs[i][k], v)
			}
		}
	}

	buf = lockedBuffer{}
	l = newRaftLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Trace("trace detail")
	l.Debug("debug detail")
	l.Info("entering leader state")
	recs = buf.records(t)
	if len(recs) != 2 || recs[0]["level"] != "DEBUG" || recs[1]["level"] != "INFO" {
		t.Errorf("at slog DEBUG: records %v, want raft's DEBUG and INFO (no TRACE)", recs)
	}
}

// A JobManager writes one log format: hashicorp/raft's records go through its slog.Logger
// (here JSON), not to a writer of their own.
func TestJobManagerLogsRaftThroughSlog(t *testing.T) {
	var buf lockedBuffer
	jm, err := Start(Config{NodeID: "jm-log", RPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", DataDir: t.TempDir(),
		Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the JobManager to lead", func() error {
		if !jm.IsLeader() {
			return errors.New("not leading")
		}
		return nil
	})
	if err := jm.Close(); err != nil {
		t.Fatal(err)
	}
	var raftRecs []map[string]any
	for _, r := range buf.records(t) {
		if r["module"] == "raft" {
			raftRecs = append(raftRecs, r)
		}
	}
	// A new single-node group elects itself after its heartbeat timeout, which raft logs at WARN.
	found := false
	for _, r := range raftRecs {
		if r["level"] != "WARN" && r["level"] != "ERROR" {
			t.Errorf("raft record %v below WARN at --log-level info", r)
		}
		if r["msg"] == "heartbeat timeout reached, starting election" && r["jm_id"] == "jm-log" {
			found = true
		}
	}
	if !found {
		t.Errorf("raft records %v: want its election warning as a JSON record with jm_id", raftRecs)
	}
}
