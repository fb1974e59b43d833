package systemtest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/faultinject"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/proccluster"
	"github.com/goflink/goflink/internal/s3test"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestChaosExactlyOnceS3 is the exactly-once chaos job with its checkpoints and its file sink
// on a real S3 server (versitygw), on processes that share no disk: each runs in a directory
// of its own (proccluster Isolated) and the job names no local path. Its faults are the ones
// only object storage has:
//
//  1. Both TaskManagers SIGKILL themselves between a pre-commit and its commit (fault point
//     before-commit, at a seeded notification): the sink's pre-committed part file is a
//     pending multipart upload, which the test sees in the bucket while no TaskManager is
//     left, and which the restore must complete.
//  2. Their replacements SIGKILL themselves in the middle of a state file's upload (fault
//     point state-upload, at a seeded state file): that checkpoint never completes.
//  3. The S3 server is killed during the run, and restarted once a checkpoint failed.
//
// At the end the bucket's committed part files hold every (key, seq) exactly once with count
// = seq+1, and no multipart upload is left under the sink's prefix.
func TestChaosExactlyOnceS3(t *testing.T) {
	skipShort(t)
	for _, seed := range chaosSeeds(t)[:2] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { s3ChaosRun(t, seed) })
	}
}

func s3ChaosRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	srv := s3test.Start(t)
	var s3 []string
	for k, v := range map[string]string{
		config.S3Endpoint: srv.Endpoint, config.S3AccessKey: s3test.AccessKey, config.S3SecretKey: s3test.SecretKey,
		config.S3PathStyleAccess: "true", config.S3Region: "us-east-1",
	} {
		s3 = append(s3, "-D", k+"="+v)
	}
	// No spare slot: after a kill the job waits for the test to start a TaskManager, so the
	// bucket can be looked at before any restore.
	c := startClusterOf(t, proccluster.Options{TaskManagers: 0, Slots: 1, Isolated: true, JobManagerArgs: s3, TaskManagerArgs: s3})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := c.newClient()
	bucket := srv.Client(t)

	commitAt := 3 + rng.IntN(6)
	tms := c.startArmed(ctx, fmt.Sprintf("%s@%d", faultinject.BeforeCommit, commitAt), "tm-a0", "tm-a1")
	backend := [...]string{"hashmap", "bbolt"}[seed%2]
	out := "s3://" + srv.Bucket + "/out"
	id := c.submit(keyedSpecAt(t, fmt.Sprintf("s3-chaos-%d", seed), out, "s3://"+srv.Bucket+"/checkpoints",
		chaosRecords, chaosRate, chaosKeys, backend, 200*time.Millisecond, 1000, 100*time.Millisecond))
	var log []string

	// 1. A kill between pre-commit and commit leaves a pending multipart upload.
	dead := waitSelfKilled(t, ctx, tms, faultinject.BeforeCommit, func() {})
	var pending []string
	poll.Until(t, time.Minute, "the job to notice the dead TaskManager", func() error {
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if d.GetRestarts() == 0 && d.GetStatus() == pb.JobStatus_JOB_STATUS_RUNNING {
			return fmt.Errorf("job %v, %d restarts", d.GetStatus(), d.GetRestarts())
		}
		return nil
	})
	pending = pendingUploads(t, ctx, bucket, srv.Bucket, "out/")
	if len(pending) == 0 {
		t.Fatalf("%s killed itself before a commit, but no multipart upload is pending under out/", dead)
	}
	log = append(log, fmt.Sprintf("%s killed before commit %d, leaving pending uploads %v", dead, commitAt, pending))

	// 2. Its replacement (and the other's, if it died too) kills itself during a state upload.
	uploadAt := 2 + rng.IntN(8)
	var next []*proccluster.Proc
	var replace []string
	for i, p := range tms {
		if exited(p) {
			replace = append(replace, fmt.Sprintf("tm-b%d", i))
		} else {
			next = append(next, p)
		}
	}
	// An unarmed TaskManager replaces each of next that died: a survivor of step 1 is still
	// armed for a commit, and may reach it while step 2 waits.
	replaced := 0
	replaceDead := func() {
		for i, p := range next {
			if exited(p) {
				next[i] = c.startTM(fmt.Sprintf("tm-c%d", replaced))
				replaced++
			}
		}
	}
	armed := c.startArmed(ctx, fmt.Sprintf("%s@%d", faultinject.StateUpload, uploadAt), replace...)
	dead = waitSelfKilled(t, ctx, armed, faultinject.StateUpload, replaceDead)
	log = append(log, fmt.Sprintf("%s killed in state upload %d", dead, uploadAt))
	// From now on the armed ones are replaced too (the others may still reach the point).
	next = append(next, armed...)
	replaceDead()

	// 3. The S3 server goes down until a checkpoint failed, then comes back.
	poll.Until(t, 2*time.Minute, "the job running with every task", func() error {
		replaceDead()
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if client.IsTerminal(d.GetStatus()) {
			return poll.Stop(fmt.Errorf("job ended %v: %s (faults: %v)", d.GetStatus(), d.GetFailureCause(), log))
		}
		if !allRunning(d) {
			return fmt.Errorf("job %v", d.GetStatus())
		}
		return nil
	})
	before, err := cl.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	down := time.Now()
	var seen string
	poll.Until(t, time.Minute, "a checkpoint to fail or the job to fail over with the S3 server down", func() error {
		replaceDead()
		d, err := cl.Job(ctx, id)
		if err != nil {
			return err
		}
		if d.GetRestarts() > before.GetRestarts() || d.GetStatus() == pb.JobStatus_JOB_STATUS_RESTARTING {
			// A restart waits for the storage to verify its checkpoint: it cannot finish now.
			seen = fmt.Sprintf("the job failed over (%s)", d.GetStatus())
			return nil
		}
		cps, err := cl.Checkpoints(ctx, id)
		if err != nil {
			return err
		}
		for _, cp := range cps {
			if cp.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED && !cp.GetTriggerTime().AsTime().Before(down) {
				seen = fmt.Sprintf("checkpoint %d failed (%s)", cp.GetId(), cp.GetFailure())
				return nil
			}
		}
		return fmt.Errorf("job %v, no checkpoint failed since %s", d.GetStatus(), down.Format("15:04:05.000"))
	})
	srv.Restart(t)
	log = append(log, fmt.Sprintf("S3 server down for %v: %s", time.Since(down).Round(time.Millisecond), seen))

	var last *pb.JobDetails
	err = poll.Wait(ctx, func() (err error) {
		replaceDead()
		if last, err = cl.Job(ctx, id); err != nil {
			return err
		}
		if !client.IsTerminal(last.GetStatus()) {
			return fmt.Errorf("job %v", last.GetStatus())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed %d: the job did not end: %v\nfaults: %v", seed, err, log)
	}
	if replaced > 0 {
		log = append(log, fmt.Sprintf("%d more TaskManagers replaced", replaced))
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("seed %d: job ended %v: %s\nfaults: %v", seed, last.GetStatus(), last.GetFailureCause(), log)
	}
	if last.GetRestarts() < 2 {
		t.Errorf("seed %d: %d restarts after two self-kills (%v)", seed, last.GetRestarts(), log)
	}
	if left := pendingUploads(t, ctx, bucket, srv.Bucket, "out/"); len(left) > 0 {
		t.Errorf("multipart uploads left under out/ after the job finished: %v", left)
	}
	rows := checkExactlyOnce(t, downloadParts(t, ctx, bucket, srv.Bucket, "out/"))
	t.Logf("seed %d (%s backend): %d restarts: %v; %d committed rows in the bucket, each (key, seq) exactly once with count = seq+1",
		seed, backend, last.GetRestarts(), log, rows)
}

// startArmed starts TaskManagers with the fault injection points armed and waits until they
// registered.
func (c *cluster) startArmed(ctx context.Context, points string, ids ...string) []*proccluster.Proc {
	c.t.Helper()
	var procs []*proccluster.Proc
	for _, id := range ids {
		p, err := c.StartTaskManagerEnv(id, faultinject.Env+"="+points)
		if err != nil {
			c.t.Fatal(err)
		}
		procs = append(procs, p)
	}
	cl := c.newClient()
	err := poll.Wait(ctx, func() error {
		info, err := cl.Cluster(ctx)
		if err != nil {
			return err
		}
		var have []string
		for _, tm := range info.GetTaskmanagers() {
			have = append(have, tm.GetId())
		}
		for _, id := range ids {
			if !slices.Contains(have, id) {
				return fmt.Errorf("taskmanagers %v registered, want %v among them", have, ids)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return procs
}

// waitSelfKilled waits until one of procs died of SIGKILL at its fault point (its log says
// the point fired: not some other death) and returns its name. Each poll calls meanwhile.
func waitSelfKilled(t *testing.T, ctx context.Context, procs []*proccluster.Proc, point string, meanwhile func()) string {
	t.Helper()
	var dead string
	err := poll.Wait(ctx, func() error {
		meanwhile()
		for _, p := range procs {
			if !exited(p) {
				continue
			}
			ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				return poll.Stop(fmt.Errorf("%s exited with %v, not by its fault point's SIGKILL:\n%s", p.Name, p.Cmd.ProcessState, p.Tail(40)))
			}
			if out, _ := p.Output(); !strings.Contains(out, "fault injection: killing the process point="+point) {
				return poll.Stop(fmt.Errorf("%s died of SIGKILL, but not at fault point %s:\n%s", p.Name, point, p.Tail(40)))
			}
			dead = p.Name
			return nil
		}
		return fmt.Errorf("none of %d TaskManagers killed itself", len(procs))
	})
	if err != nil {
		t.Fatal(err)
	}
	return dead
}

// exited reports whether p's process has exited.
func exited(p *proccluster.Proc) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// pendingUploads lists the keys of the multipart uploads in progress under prefix.
func pendingUploads(t *testing.T, ctx context.Context, c *minio.Client, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for u := range c.ListIncompleteUploads(ctx, bucket, prefix, true) {
		if u.Err != nil {
			t.Fatalf("list multipart uploads under %s: %v", prefix, u.Err)
		}
		keys = append(keys, u.Key)
	}
	return keys
}

// downloadParts copies the committed objects under prefix (names not starting with ".") into
// a local directory and returns it.
func downloadParts(t *testing.T, ctx context.Context, c *minio.Client, bucket, prefix string) string {
	t.Helper()
	dir := t.TempDir()
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list %s: %v", prefix, o.Err)
		}
		name := path.Base(o.Key)
		if strings.HasPrefix(name, ".") || strings.Contains(strings.TrimPrefix(o.Key, prefix), "/") {
			continue
		}
		obj, err := c.GetObject(ctx, bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			t.Fatalf("read %s: %v", o.Key, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
