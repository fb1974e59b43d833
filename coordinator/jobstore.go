package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goflink/goflink/config"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// jobStoreSweepInterval is how often the leader looks for ended jobs to forget:
// jobstore.expiration-time is in whole seconds, and a sweep that finds nothing only reads the
// FSM.
const jobStoreSweepInterval = time.Second

// jobStoreSettings are the job store's bounds: ended jobs are forgotten expiration after they
// ended, and beyond capacity the oldest ended first (Flink's jobstore.* keys).
type jobStoreSettings struct {
	expiration time.Duration
	capacity   int
}

func jobStoreSettingsFrom(c *config.Config) jobStoreSettings {
	return jobStoreSettings{
		expiration: time.Duration(c.Int(config.JobStoreExpiration)) * time.Second,
		capacity:   c.Limit(config.JobStoreCapacity),
	}
}

// endedJobsToForget returns the IDs of the ended jobs the job store forgets at now: those that
// ended at least s.expiration ago, and the oldest ended beyond s.capacity. It only reads the
// state: the leader proposes their removal (RemoveJobsCommand), so the FSM never reads a clock.
func (f *fsm) endedJobsToForget(now time.Time, s jobStoreSettings) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	type ended struct {
		id  string
		end time.Time
	}
	var all []ended
	for _, id := range f.order {
		j := f.jobs[id]
		if !isTerminalJob(j.GetStatus()) {
			continue
		}
		end := j.GetEndTime()
		if end == nil {
			end = j.GetSubmitTime() // ended before it had an end time (an older record)
		}
		all = append(all, ended{id: id, end: end.AsTime()})
	}
	slices.SortStableFunc(all, func(a, b ended) int { return a.end.Compare(b.end) }) // oldest ended first
	var out []string
	for i, e := range all {
		if now.Sub(e.end) >= s.expiration || len(all)-i > s.capacity {
			out = append(out, e.id)
		}
	}
	return out
}

// sweepJobStore forgets ended jobs past the job store's bounds, every jobStoreSweepInterval
// until ctx (the leadership) ends. It runs on the leader.
func (jm *JobManager) sweepJobStore(ctx context.Context, s jobStoreSettings) {
	tick := time.NewTicker(jobStoreSweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		ids := jm.fsm.endedJobsToForget(time.Now(), s)
		if len(ids) == 0 {
			continue
		}
		if err := jm.disp.forgetJobs(ids); err != nil {
			jm.log.Warn("cannot forget ended jobs; retrying", "jobs", len(ids), "err", err)
		}
	}
}

// forgetJobs removes ended jobs from the replicated state through Raft (in commands of at most
// maxRemoveJobs), drops their job masters and deletes their checkpoint directories, except
// the snapshots still in use (deleteJobFiles). Files are deleted after the commit: a leader
// that fails between the two leaves them behind, never a job whose files are gone.
func (d *dispatcher) forgetJobs(ids []string) error {
	for chunk := range slices.Chunk(ids, maxRemoveJobs) {
		cmd := &pb.RaftCommand{Op: &pb.RaftCommand_RemoveJobs{RemoveJobs: &pb.RemoveJobsCommand{JobIds: chunk}}}
		res, err := d.node.apply(cmd, applyTimeout)
		if err != nil {
			return fmt.Errorf("remove jobs: %w", err)
		}
		removed, _ := res.([]*pb.JobRecord)
		if len(removed) == 0 {
			continue
		}
		d.mu.Lock()
		for _, rec := range removed {
			delete(d.masters, rec.GetId())
		}
		d.mu.Unlock()
		d.notify()
		remaining := d.fsm.list()
		for _, rec := range removed {
			d.log.Info("ended job forgotten", "job_id", rec.GetId(), "status", rec.GetStatus(), "end_time", rec.GetEndTime().AsTime())
			if err := deleteJobFiles(rec, remaining, d.s3); err != nil {
				d.log.Warn("cannot delete the checkpoint directory of a forgotten job", "job_id", rec.GetId(), "err", err)
			}
		}
	}
	return nil
}

// jobCheckpointDir returns a job's checkpoint directory, <execution.checkpointing.dir>/<job-id>
// ("" for a job without checkpointing).
func jobCheckpointDir(rec *pb.JobRecord) string {
	base := rec.GetGraph().GetConfig()[config.CheckpointDir]
	if base == "" {
		return ""
	}
	return storage.JobDir(base, rec.GetId())
}

// snapshotDir returns the directory of a snapshot a job record refers to.
func snapshotDir(rec *pb.JobRecord, cp *pb.CompletedCheckpoint) string {
	return storage.JoinPath(cmp.Or(cp.GetBaseDir(), jobCheckpointDir(rec)), cp.GetPath())
}

// deleteJobFiles deletes a forgotten job's files: its checkpoint directory and the retained
// checkpoints it owns elsewhere (a snapshot it was started from in claim mode), except the
// snapshots that are still in use or that the user owns: every snapshot a remaining job refers
// to (a job started from one of the forgotten job's retained checkpoints restores from it), and
// the forgotten job's savepoints and the snapshots it does not own (not_owned; such snapshots
// are the user's, as in Flink). Those stay until the user disposes of them.
//
// A job directory on S3 (s3://), and a claimed snapshot on S3 elsewhere, are deleted object
// by object with the settings s3.
func deleteJobFiles(rec *pb.JobRecord, remaining []*pb.JobRecord, s3 storage.S3Settings) error {
	var keep []string
	for _, r := range remaining {
		for _, cp := range slices.Concat(r.GetCheckpoints(), r.GetSavepoints()) {
			keep = append(keep, snapshotDir(r, cp))
		}
	}
	for _, cp := range rec.GetSavepoints() {
		keep = append(keep, snapshotDir(rec, cp))
	}
	var owned []string
	for _, cp := range rec.GetCheckpoints() {
		if cp.GetNotOwned() {
			keep = append(keep, snapshotDir(rec, cp))
		} else {
			owned = append(owned, snapshotDir(rec, cp))
		}
	}
	var errs []error
	if dir := jobCheckpointDir(rec); storage.IsURI(dir) {
		errs = append(errs, deleteRemoteJobDir(rec, dir, keep, s3))
	} else if dir != "" {
		errs = append(errs, removeAllExcept(filepath.Clean(dir), keep))
	}
	jobDir := jobCheckpointDir(rec)
	for _, d := range owned { // those in the job's directory are gone already
		if storage.IsURI(d) {
			if d == jobDir || strings.HasPrefix(d, jobDir+"/") || slices.ContainsFunc(keep, func(k string) bool { return k == d || strings.HasPrefix(k, d+"/") }) {
				continue
			}
			// A snapshot on S3 the job claimed (run -s --claim-mode claim), outside its
			// directory.
			ctx, cancel := context.WithTimeout(context.Background(), remoteDeleteTimeout)
			errs = append(errs, storage.DiscardSnapshotDir(ctx, d, s3))
			cancel()
			continue
		}
		if _, err := os.Stat(filepath.Join(d, storage.MetadataFile)); err != nil {
			continue // gone, or not a snapshot's directory: nothing of the job's to delete
		}
		errs = append(errs, removeAllExcept(filepath.Clean(d), keep))
	}
	return errors.Join(errs...)
}

// deleteRemoteJobDir deletes every object of the job directory dir (s3://…/<job-id>) unless a
// snapshot in keep lies in it: then it keeps all of it (a job restores from an S3 snapshot
// only through its own directory for now).
func deleteRemoteJobDir(rec *pb.JobRecord, dir string, keep []string, s3 storage.S3Settings) error {
	for _, k := range keep {
		if k == dir || strings.HasPrefix(k, dir+"/") {
			return nil
		}
	}
	base, err := storage.Open(rec.GetGraph().GetConfig()[config.CheckpointDir], s3)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteDeleteTimeout)
	defer cancel()
	return base.DeleteAll(ctx, rec.GetId())
}

// remoteDeleteTimeout bounds the deletion of a forgotten job's S3 directory.
const remoteDeleteTimeout = time.Minute

// removeAllExcept removes dir with everything in it, except the paths in keep (and the
// directories that lead to them).
func removeAllExcept(dir string, keep []string) error {
	var inside []string
	for _, k := range keep {
		k = filepath.Clean(k)
		if k == dir {
			return nil
		}
		if strings.HasPrefix(k, dir+string(filepath.Separator)) {
			inside = append(inside, k)
		}
	}
	if len(inside) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("delete %s: %w", dir, err)
		}
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, removeAllExcept(filepath.Join(dir, e.Name()), inside))
	}
	return errors.Join(errs...)
}
