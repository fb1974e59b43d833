package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/s3test"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// TestCheckpointsOnS3: the founding example with execution.checkpointing.dir on a real S3
// server (versitygw): the job's checkpoints are objects in the bucket (state files and
// _metadata), the injected failure restarts it from one of them, and the output is exactly
// once; the subsumed checkpoints are deleted from the bucket.
func TestCheckpointsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections) // after the cluster closed (cleanups run last first)
	settings := config.New()
	for k, v := range map[string]string{
		config.S3Endpoint: srv.Endpoint, config.S3AccessKey: s3test.AccessKey, config.S3SecretKey: s3test.SecretKey,
		config.S3PathStyleAccess: "true", config.S3Region: "us-east-1",
	} {
		if err := settings.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1, Settings: settings})
	out := filepath.Join(t.TempDir(), "out")
	base := "s3://" + srv.Bucket + "/checkpoints"
	spec := foundingSpec(120, 40, 31, out, `  execution.checkpointing.interval: 50ms
  execution.checkpointing.num-retained: 2
  restart-strategy.fixed-delay.delay: 50ms
  restart-strategy.type: fixed-delay
  execution.checkpointing.dir: `+base)
	id := submit(t, ctx, cl, spec)
	// What a task leaves when it commits a state file after its checkpoint was aborted (and
	// the directory deleted), and is cancelled before it acknowledges: the JobManager deletes
	// it when the job ends.
	client := srv.Client(t)
	late := "checkpoints/" + id + "/chk-1000000/keyed-v9-s0-a0"
	if _, err := client.PutObject(ctx, srv.Bucket, late, strings.NewReader("late"), 4, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), want FINISHED", last.GetStatus(), last.GetFailureCause())
	}
	if last.GetRestarts() != 1 || last.GetRestoredCheckpointId() <= 0 {
		t.Fatalf("restarts = %d, restored checkpoint %d: want one restart from a checkpoint", last.GetRestarts(), last.GetRestoredCheckpointId())
	}
	cps, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	completed := 0
	for _, c := range cps {
		if c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			completed++
			if !strings.HasPrefix(c.GetPath(), base+"/"+id+"/chk-") {
				t.Errorf("checkpoint %d path %q, want under %s/%s/", c.GetId(), c.GetPath(), base, id)
			}
		}
	}

	// The bucket holds the two retained checkpoints, each with its _metadata and keyed state;
	// the subsumed ones and the late file were deleted (asynchronously, hence the wait).
	var keys []string
	poll.Until(t, testTimeout, "the bucket to hold the 2 retained checkpoints", func() error {
		keys = keys[:0]
		for o := range client.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: "checkpoints/" + id + "/", Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			keys = append(keys, o.Key)
		}
		chks := map[string]bool{}
		for _, k := range keys {
			if chk, ok := strings.CutSuffix(k, "/"+storage.MetadataFile); ok {
				chks[chk] = true
			}
		}
		if len(chks) != 2 {
			return fmt.Errorf("checkpoints with _metadata: %v; objects %v", chks, keys)
		}
		for _, k := range keys {
			if !chks[path.Dir(k)] {
				return fmt.Errorf("object %s is in no retained checkpoint", k)
			}
		}
		if !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "/keyed-") }) {
			return fmt.Errorf("no keyed state in %v", keys)
		}
		return nil
	})
	t.Logf("restored from checkpoint %d; %d completed checkpoints; the bucket holds %v",
		last.GetRestoredCheckpointId(), completed, keys)

	got, n := committedOutput(t, out)
	checkExactlyOnce(t, got, n, 120)
}

// s3Settings configures a cluster's processes for srv.
func s3Settings(t *testing.T, srv *s3test.Server, secret string) *config.Config {
	t.Helper()
	settings := config.New()
	for k, v := range map[string]string{
		config.S3Endpoint: srv.Endpoint, config.S3AccessKey: s3test.AccessKey, config.S3SecretKey: secret,
		config.S3PathStyleAccess: "true", config.S3Region: "us-east-1",
	} {
		if err := settings.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	return settings
}

// TestCheckpointsOnS3RefusedAtSubmit: the JobManager probes an s3:// checkpoint directory at
// submit; a missing bucket, a wrong secret key and an endpoint that is down each refuse the
// job with a status and a message that say which, and nothing is scheduled.
func TestCheckpointsOnS3RefusedAtSubmit(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, good := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Settings: s3Settings(t, srv, s3test.SecretKey)})
	_, badKey := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Settings: s3Settings(t, srv, "wrong-secret")})
	spec := func(dir string) string {
		return foundingSpec(100, 100, 99, filepath.Join(t.TempDir(), "out"), "  execution.checkpointing.interval: 50ms\n  execution.checkpointing.dir: "+dir)
	}
	refused := func(cl *client.Client, dir string, code codes.Code, mentions ...string) {
		t.Helper()
		_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec(dir))})
		t.Logf("%s: %v", dir, err)
		if status.Code(err) != code {
			t.Errorf("Submit with %s = %v, want %v", dir, err, code)
		}
		for _, m := range append(mentions, config.CheckpointDir, dir) {
			if err != nil && !strings.Contains(err.Error(), m) {
				t.Errorf("Submit with %s: %q does not mention %q", dir, err, m)
			}
		}
		if err != nil && strings.Contains(err.Error(), "wrong-secret") {
			t.Errorf("the secret key shows in %q", err)
		}
	}
	refused(good, "s3://no-such-bucket/cp", codes.FailedPrecondition, "no such bucket", `"no-such-bucket"`)
	refused(badKey, "s3://"+srv.Bucket+"/cp", codes.PermissionDenied, "access denied", config.S3SecretKey)
	refused(good, "gs://"+srv.Bucket+"/cp", codes.InvalidArgument, "unsupported scheme")
	for _, cl := range []*client.Client{good, badKey} {
		if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
			t.Errorf("jobs after the refusals: %v, %v; want none", jobs, err)
		}
	}
	srv.Stop()
	refused(good, "s3://"+srv.Bucket+"/cp", codes.FailedPrecondition, "endpoint unreachable", config.S3Endpoint)
}

// TestCheckpointsOnS3Outage: when the S3 server goes away during a run, checkpoints fail
// (here tolerated), the checkpoint history says why, and the job keeps running; once the
// server is back checkpoints complete again and the output is exactly once.
func TestCheckpointsOnS3Outage(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Settings: s3Settings(t, srv, s3test.SecretKey)})
	dir := "s3://" + srv.Bucket + "/cp"
	out := filepath.Join(t.TempDir(), "out")
	// About 10 s of input, and no injected failure (the fail operator's sum is never reached).
	const n = 3000
	id := submit(t, ctx, cl, foundingSpec(n, 300, 2*n+1, out, `  execution.checkpointing.interval: 50ms
  execution.checkpointing.tolerable-failed-checkpoints: 1000
  execution.checkpointing.dir: `+dir))
	// checkpoint waits for a checkpoint of the given status and returns it.
	checkpoint := func(want pb.CheckpointStatus) *pb.CheckpointInfo {
		t.Helper()
		var found *pb.CheckpointInfo
		poll.Until(t, testTimeout, "a checkpoint "+want.String(), func() error {
			cps, err := cl.Checkpoints(ctx, id)
			if err != nil {
				return err
			}
			for _, c := range cps {
				if c.GetStatus() == want {
					found = c
					return nil
				}
			}
			return fmt.Errorf("checkpoints %v", cps)
		})
		return found
	}
	ok := checkpoint(pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED)
	srv.Stop()
	failed := checkpoint(pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED)
	t.Logf("checkpoint %d completed, then with the server down checkpoint %d failed: %s", ok.GetId(), failed.GetId(), failed.GetFailure())
	for _, want := range []string{"endpoint unreachable", srv.Endpoint, dir + "/" + id} {
		if !strings.Contains(failed.GetFailure(), want) {
			t.Errorf("checkpoint failure %q does not mention %s", failed.GetFailure(), want)
		}
	}
	if d, err := cl.Job(ctx, id); err != nil || client.IsTerminal(d.GetStatus()) || d.GetRestarts() != 0 {
		t.Errorf("job after failed checkpoints: %v (%d restarts), %v; want it running on", d.GetStatus(), d.GetRestarts(), err)
	}

	// The server comes back on its endpoint: checkpoints complete again, and the job
	// finishes with its output exactly once.
	srv.Restart(t)
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED || last.GetRestarts() != 0 {
		t.Fatalf("job ended %v after %d restarts (%s), want FINISHED without restarts", last.GetStatus(), last.GetRestarts(), last.GetFailureCause())
	}
	cps, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var after []int64 // completed after the failure, in the history's (bounded) window
	for _, c := range cps {
		if c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && c.GetId() > failed.GetId() {
			after = append(after, c.GetId())
		}
	}
	if len(after) == 0 {
		t.Fatalf("no checkpoint completed after checkpoint %d failed: %v", failed.GetId(), cps)
	}
	got, records := committedOutput(t, out)
	checkExactlyOnce(t, got, records, n)
	t.Logf("the server restarted: checkpoints up to %d completed after it (%d in the history); %d records exactly once", slices.Max(after), len(after), records)
}

// TestFileSinkOnS3: the founding example with its file sink writing to s3://bucket/out (and
// its checkpoints on S3 too): the injected failure restarts the job from a checkpoint, the
// restored sinks complete their pre-committed uploads and abort the failed attempt's, and at
// the end the bucket's committed objects hold each record exactly once, with no multipart
// upload left over.
func TestFileSinkOnS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections) // after the cluster closed (cleanups run last first)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1, Settings: s3Settings(t, srv, s3test.SecretKey)})
	out := "s3://" + srv.Bucket + "/out"
	spec := foundingSpec(120, 40, 31, out, `  execution.checkpointing.interval: 50ms
  restart-strategy.fixed-delay.delay: 50ms
  restart-strategy.type: fixed-delay
  execution.checkpointing.dir: s3://`+srv.Bucket+`/checkpoints`)
	id := submit(t, ctx, cl, spec)
	last := watchEnd(t, ctx, cl, id)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), want FINISHED", last.GetStatus(), last.GetFailureCause())
	}
	if last.GetRestarts() != 1 || last.GetRestoredCheckpointId() <= 0 {
		t.Fatalf("restarts = %d, restored checkpoint %d: want one restart from a checkpoint", last.GetRestarts(), last.GetRestoredCheckpointId())
	}

	client := srv.Client(t)
	poll.Until(t, testTimeout, "no multipart upload left under out/", func() error {
		var left []string
		for u := range client.ListIncompleteUploads(ctx, srv.Bucket, "out/", true) {
			if u.Err != nil {
				return u.Err
			}
			left = append(left, u.Key+" "+u.UploadID)
		}
		if len(left) > 0 {
			return fmt.Errorf("uploads in progress: %v", left)
		}
		return nil
	})

	got, n, objects := committedS3Output(t, ctx, client, srv.Bucket, "out/")
	checkExactlyOnce(t, got, n, 120)
	t.Logf("restored from checkpoint %d; committed objects %v", last.GetRestoredCheckpointId(), objects)
}

// committedS3Output reads the committed part files under prefix of a bucket, per key; it
// also returns the objects' names.
func committedS3Output(t *testing.T, ctx context.Context, client *minio.Client, bucket, prefix string) (map[string]map[int64]int, int, []string) {
	t.Helper()
	got := map[string]map[int64]int{}
	n := 0
	var names []string
	for o := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		name := strings.TrimPrefix(o.Key, prefix)
		if !strings.HasPrefix(name, "part-") || !strings.HasSuffix(name, ".jsonl") {
			t.Errorf("object %s is no part file", o.Key)
			continue
		}
		names = append(names, name)
		obj, err := client.GetObject(ctx, bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			var row struct {
				Parity string `json:"parity"`
				Value  int64  `json:"value"`
			}
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("%s: bad line %q: %v", o.Key, line, err)
			}
			if got[row.Parity] == nil {
				got[row.Parity] = map[int64]int{}
			}
			got[row.Parity][row.Value]++
			n++
		}
	}
	return got, n, names
}

// TestFileSinkOnS3RefusedAtSubmit: the JobManager probes a file sink's s3:// path at submit,
// as it does an s3:// checkpoint directory: a missing bucket and a wrong secret key refuse the
// job with a status and a message naming the operator, the field and the location, a bad
// location is refused when the spec is checked, two sinks of a job may not share a location,
// nor a sink a running job's, and nothing is scheduled.
func TestFileSinkOnS3RefusedAtSubmit(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, good := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Settings: s3Settings(t, srv, s3test.SecretKey)})
	_, badKey := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Settings: s3Settings(t, srv, "wrong-secret")})
	refused := func(cl *client.Client, spec string, code codes.Code, mentions ...string) {
		t.Helper()
		_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
		t.Logf("%v", err)
		if status.Code(err) != code {
			t.Errorf("Submit = %v, want %v", err, code)
		}
		for _, m := range mentions {
			if err != nil && !strings.Contains(err.Error(), m) {
				t.Errorf("Submit: %q does not mention %q", err, m)
			}
		}
		if err != nil && strings.Contains(err.Error(), "wrong-secret") {
			t.Errorf("the secret key shows in %q", err)
		}
	}
	spec := func(path string) string {
		return foundingSpec(100, 100, 99, path, "  execution.checkpointing.interval: 50ms")
	}
	refused(good, spec("s3://no-such-bucket/out"), codes.FailedPrecondition, "no such bucket", `"no-such-bucket"`, `operator "out"`, "field path", "s3://no-such-bucket/out")
	refused(badKey, spec("s3://"+srv.Bucket+"/out"), codes.PermissionDenied, "access denied", config.S3SecretKey, `operator "out"`, "field path")
	refused(good, spec("s3:///out"), codes.InvalidArgument, "names no bucket", `"out".path`)
	twoSinks := spec("s3://"+srv.Bucket+"/out") + "  - {name: out2, type: file, inputs: [fail_at], path: \"s3://" + srv.Bucket + "/out/\"}\n"
	refused(good, twoSinks, codes.FailedPrecondition, "s3://"+srv.Bucket+"/out", `operator "out"`)
	for _, cl := range []*client.Client{good, badKey} {
		if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
			t.Errorf("jobs after the refusals: %v, %v; want none", jobs, err)
		}
	}
	// A location a running job's sink writes into is refused, however it is spelled.
	busy := submit(t, ctx, good, foundingSpec(100000, 100, 99999, "s3://"+srv.Bucket+"/busy", "  execution.checkpointing.interval: 50ms"))
	refused(good, spec("s3://"+srv.Bucket+"/busy/"), codes.FailedPrecondition, "s3://"+srv.Bucket+"/busy", "of job "+busy)
	if err := good.Cancel(ctx, busy); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, good, busy)
	srv.Stop()
	refused(good, spec("s3://"+srv.Bucket+"/out"), codes.FailedPrecondition, "endpoint unreachable", config.S3Endpoint, `operator "out"`)
}
