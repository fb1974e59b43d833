package coordinator

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/goflink/goflink/config"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

func removeCmd(ids ...string) *pb.RaftCommand {
	return &pb.RaftCommand{Op: &pb.RaftCommand_RemoveJobs{RemoveJobs: &pb.RemoveJobsCommand{JobIds: ids}}}
}

// RemoveJobsCommand forgets the listed jobs that ended, and only those; applying it again
// changes nothing, and every replica ends with the same state.
func TestFSMRemoveJobs(t *testing.T) {
	a, b := populated(t), populated(t) // two replicas
	for _, r := range []*applier{a, b} {
		res := r.applyResult(removeCmd("live", "done", "nope", "bad", "new"))
		removed, ok := res.([]*pb.JobRecord)
		if !ok {
			t.Fatalf("RemoveJobs = %T %v, want the removed records", res, res)
		}
		if got := jobIDs(removed); !slices.Equal(got, []string{"done", "bad"}) {
			t.Errorf("removed %v, want the ended jobs [done bad] in submission order", got)
		}
		if got := jobIDs(r.f.list()); !slices.Equal(got, []string{"live", "new"}) {
			t.Errorf("jobs after RemoveJobs = %v, want [live new]", got)
		}
		before := r.f.state()
		if res := r.applyResult(removeCmd("done", "bad")); len(res.([]*pb.JobRecord)) != 0 {
			t.Errorf("RemoveJobs again removed %v", res)
		}
		if !proto.Equal(before, r.f.state()) {
			t.Error("RemoveJobs again changed the state")
		}
	}
	if !proto.Equal(a.f.state(), b.f.state()) {
		t.Error("two replicas differ after the same commands")
	}
}

// The leader forgets ended jobs by its clock: those that ended expiration ago, and the oldest
// ended beyond the capacity; jobs that run are never chosen.
func TestEndedJobsToForget(t *testing.T) {
	a := newApplier(t)
	ended := map[string]int{"e10": 10, "e30": 30, "e20": 20} // job → second it ended
	for _, id := range []string{"e10", "run", "e30", "e20"} {
		if err := a.apply(submitCmd(id, id, ts(0))); err != nil {
			t.Fatal(err)
		}
		if err := a.apply(statusCmd(id, running, "", ts(1))); err != nil {
			t.Fatal(err)
		}
		if at, ok := ended[id]; ok {
			if err := a.apply(statusCmd(id, canceled, "", ts(at))); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := ts(40).AsTime()
	for _, tc := range []struct {
		name       string
		expiration time.Duration
		capacity   int
		want       []string
	}{
		{"none expired, within capacity", time.Hour, 10, nil},
		{"expired", 15 * time.Second, 10, []string{"e10", "e20"}},
		{"expired at the second", 20 * time.Second, 10, []string{"e10", "e20"}},
		{"beyond capacity, oldest ended first", time.Hour, 1, []string{"e10", "e20"}},
		{"capacity exactly", time.Hour, 3, nil},
		{"both", 25 * time.Second, 2, []string{"e10"}},
		{"all ended", time.Second, config.Infinite, []string{"e10", "e20", "e30"}},
	} {
		got := a.f.endedJobsToForget(now, jobStoreSettings{expiration: tc.expiration, capacity: tc.capacity})
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: endedJobsToForget = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A forgotten job's files are deleted, except the snapshots still in use or owned by the user:
// a retained checkpoint another job was started from, the job's savepoints, and a snapshot it
// was started from without claiming it. A snapshot it claimed goes with it.
func TestDeleteJobFiles(t *testing.T) {
	base := t.TempDir()
	cpDir, spDir := filepath.Join(base, "checkpoints"), filepath.Join(base, "savepoints")
	mkSnapshot := func(dir string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"_metadata", "state-0"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	graph := &pb.JobGraph{Config: map[string]string{config.CheckpointDir: cpDir}}
	aDir := filepath.Join(cpDir, "a")
	chk1, chk2, chk3 := mkSnapshot(filepath.Join(aDir, "chk-1")), mkSnapshot(filepath.Join(aDir, "chk-2")), mkSnapshot(filepath.Join(aDir, "chk-3"))
	inside := mkSnapshot(filepath.Join(aDir, "savepoint-a-1")) // a savepoint taken into the checkpoint directory
	outside := mkSnapshot(filepath.Join(spDir, "savepoint-a-2"))
	unclaimed := mkSnapshot(filepath.Join(spDir, "savepoint-x-1"))
	claimed := mkSnapshot(filepath.Join(spDir, "savepoint-y-1"))
	stray := filepath.Join(aDir, "chk-4") // an aborted checkpoint's leftovers
	if err := os.MkdirAll(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	a := &pb.JobRecord{Id: "a", Graph: graph, Status: canceled,
		Checkpoints: []*pb.CompletedCheckpoint{
			{Id: 1, BaseDir: spDir, Path: "savepoint-x-1", Savepoint: true, NotOwned: true},
			{Id: 2, BaseDir: spDir, Path: "savepoint-y-1", Savepoint: true},
			{Id: 2, Path: "chk-2"}, {Id: 3, Path: "chk-3"}},
		Savepoints: []*pb.CompletedCheckpoint{
			{Id: 5, BaseDir: inside, Path: ".", Savepoint: true, NotOwned: true},
			{Id: 6, BaseDir: outside, Path: ".", Savepoint: true, NotOwned: true}}}
	b := &pb.JobRecord{Id: "b", Graph: graph, Status: running, // started from a's chk-2 without claim
		Checkpoints: []*pb.CompletedCheckpoint{{Id: 2, BaseDir: aDir, Path: "chk-2", NotOwned: true}}}
	if err := deleteJobFiles(a, []*pb.JobRecord{b}, storage.S3Settings{}); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	for _, p := range []string{chk2, inside, outside, unclaimed, filepath.Join(chk2, "state-0")} {
		if !exists(p) {
			t.Errorf("%s was deleted, want it kept", p)
		}
	}
	for _, p := range []string{chk1, chk3, stray, claimed} {
		if exists(p) {
			t.Errorf("%s was kept, want it deleted", p)
		}
	}
	// A job without checkpointing has no directory to delete.
	if err := deleteJobFiles(&pb.JobRecord{Id: "c", Graph: &pb.JobGraph{}}, nil, storage.S3Settings{}); err != nil {
		t.Errorf("deleteJobFiles(no checkpointing) = %v", err)
	}
}
