package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc/codes"

	"github.com/goflink/goflink/client/clienttest"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/s3test"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// TestSavepointsOnS3: a keyed count with checkpoints on S3 takes a savepoint into its default
// s3:// savepoint directory and stops with one into another; a new job resumes from the stop's
// savepoint at another parallelism with exactly-once output, another from a retained
// checkpoint on S3, a third claims the stop's savepoint and its retention deletes it; dispose
// deletes a savepoint's objects. A savepoint into a bucket that does not exist fails at once,
// naming it, and the job keeps running; a corrupt snapshot on S3 is refused at submit.
func TestSavepointsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 2, Settings: s3Settings(t, srv, s3test.SecretKey)})
	settings := storage.S3Settings{Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, PathStyle: true, Region: "us-east-1"}
	bucket := "s3://" + srv.Bucket
	out := filepath.Join(t.TempDir(), "out")
	const n, keys = 6000, 7
	cfg := fmt.Sprintf("  execution.checkpointing.dir: %s/checkpoints\n  execution.checkpointing.savepoint-dir: %s/savepoints\n  execution.checkpointing.num-retained: 3", bucket, bucket)
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1500, keys, out, cfg)), Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, out, 300)
	objects := s3Objects(t, srv)

	// Into a bucket that does not exist: refused before anything is triggered.
	for _, stop := range []bool{false, true} {
		_, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: "s3://no-such-bucket/sp", Stop: stop})
		t.Logf("savepoint (stop %v) into a missing bucket: %v", stop, err)
		checkRefused(t, "TriggerSavepoint(missing bucket)", err, codes.FailedPrecondition, "no such bucket", "s3://no-such-bucket/sp", "savepoint directory")
	}
	for _, bad := range []string{"s3://", "file:///tmp/sp", "gs://b/sp"} {
		_, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: bad})
		checkRefused(t, "TriggerSavepoint("+bad+")", err, codes.InvalidArgument, bad)
	}
	clienttest.WaitRunningAt(t, ctx, cl, id, 2)
	if cps, err := cl.Checkpoints(ctx, id); err != nil || slices.ContainsFunc(cps, func(c *pb.CheckpointInfo) bool { return c.GetSavepoint() }) {
		t.Errorf("checkpoints after the refused savepoints: %v, %v; want no savepoint", cps, err)
	}

	// Into the job's default s3:// savepoint directory.
	sp, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id})
	if err != nil {
		t.Fatalf("TriggerSavepoint = %v", err)
	}
	if want := bucket + "/savepoints/savepoint-" + id[:6] + "-"; !strings.HasPrefix(sp.GetSavepointPath(), want) {
		t.Errorf("savepoint path %q, want %s<random>", sp.GetSavepointPath(), want)
	}
	snap, err := storage.OpenSnapshotAt(ctx, sp.GetSavepointPath(), settings)
	if err != nil {
		t.Fatalf("savepoint %s does not verify: %v", sp.GetSavepointPath(), err)
	}
	spKey := strings.TrimPrefix(sp.GetSavepointPath(), bucket+"/") + "/"
	keysIn := objects(spKey)
	if !slices.Contains(keysIn, spKey+storage.MetadataFile) || !slices.ContainsFunc(keysIn, func(k string) bool { return strings.HasPrefix(k, spKey+"keyed-") }) {
		t.Errorf("savepoint objects %v, want _metadata and keyed state", keysIn)
	}
	for _, st := range snap.Metadata.GetStates() {
		if p := st.GetKeyed().GetFile().GetPath(); p != "" && strings.Contains(p, "/") {
			t.Errorf("keyed state path %q in the savepoint's _metadata is not relative to its directory", p)
		}
	}

	// Stop with a savepoint into another s3:// directory.
	stop, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: bucket + "/stops/", Stop: true})
	if err != nil {
		t.Fatalf("stop with savepoint = %v", err)
	}
	if !strings.HasPrefix(stop.GetSavepointPath(), bucket+"/stops/savepoint-") {
		t.Errorf("stop savepoint path %q, want under %s/stops/", stop.GetSavepointPath(), bucket)
	}
	if d, err := cl.Job(ctx, id); err != nil || d.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job after stop is %v (%v), want FINISHED", d.GetStatus(), err)
	}
	stopped := len(committedRows[countRow](t, out))
	if stopped >= n {
		t.Fatalf("the job finished its input (%d rows) before the stop; slow it down", stopped)
	}
	var chk string // the newest retained checkpoint of the stopped job
	cps, err := cl.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if c.GetStatus() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED && !c.GetSavepoint() && chk == "" {
			if _, err := storage.OpenSnapshotAt(ctx, c.GetPath(), settings); err == nil {
				chk = c.GetPath()
			}
		}
	}

	// Resumed from the stop's savepoint (its _metadata) at parallelism 3: exactly once.
	id2, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1500, keys, out, cfg)), Parallelism: 3,
		RestorePath: stop.GetSavepointPath() + "/" + storage.MetadataFile})
	if err != nil {
		t.Fatalf("resume from %s = %v", stop.GetSavepointPath(), err)
	}
	clienttest.WaitRunningAt(t, ctx, cl, id2, 3)
	last := watchFinished(t, ctx, cl, id2, -1)
	if last.GetRestoredCheckpointId() <= 0 {
		t.Errorf("the resumed job restored checkpoint %d, want the savepoint's", last.GetRestoredCheckpointId())
	}
	checkCounts(t, out, n, keys)

	// From a retained checkpoint on S3 (s3://…/<job>/chk-<n>).
	if !strings.HasPrefix(chk, bucket+"/checkpoints/"+id+"/chk-") {
		t.Fatalf("no retained checkpoint of job %s on S3 to restore from (%q)", id, chk)
	}
	// Into the same sink directory: the restored sink re-commits the checkpoint's transactions,
	// whose files are there (committed already).
	id3, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1500, keys, out, cfg)), Parallelism: 2, RestorePath: chk})
	if err != nil {
		t.Fatalf("resume from checkpoint %s = %v", chk, err)
	}
	clienttest.WaitRunningAt(t, ctx, cl, id3, 2)
	if d, err := cl.Job(ctx, id3); err != nil || d.GetRestoredCheckpointId() <= 0 || d.GetRestarts() != 0 {
		t.Errorf("the job resumed from %s: restored checkpoint %d after %d restarts (%v), want that checkpoint and none", chk, d.GetRestoredCheckpointId(), d.GetRestarts(), err)
	}
	if err := cl.Cancel(ctx, id3); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id3)

	// Dispose: a checkpoint and a missing bucket are refused, a savepoint's objects deleted.
	checkRefused(t, "DisposeSavepoint(checkpoint)", cl.DisposeSavepoint(ctx, chk), codes.InvalidArgument, "not a savepoint")
	if _, err := storage.OpenSnapshotAt(ctx, chk, settings); err != nil {
		t.Errorf("the refused dispose touched checkpoint %s: %v", chk, err)
	}
	checkRefused(t, "DisposeSavepoint(missing bucket)", cl.DisposeSavepoint(ctx, "s3://no-such-bucket/sp/savepoint-x"), codes.FailedPrecondition, "no such bucket")
	checkRefused(t, "DisposeSavepoint(nothing)", cl.DisposeSavepoint(ctx, bucket+"/savepoints/nothing"), codes.InvalidArgument, "has no _metadata")
	if err := cl.DisposeSavepoint(ctx, sp.GetSavepointPath()); err != nil {
		t.Fatalf("DisposeSavepoint(%s) = %v", sp.GetSavepointPath(), err)
	}
	if left := objects(spKey); len(left) != 0 {
		t.Errorf("after dispose the bucket still holds %v", left)
	}
	stopKey := strings.TrimPrefix(stop.GetSavepointPath(), bucket+"/") + "/"
	if len(objects(stopKey)) == 0 {
		t.Errorf("the dispose of %s deleted the stop savepoint %s too", sp.GetSavepointPath(), stop.GetSavepointPath())
	}

	// Resumed from the stop's savepoint in claim mode: the job's retention deletes the
	// savepoint's objects once newer checkpoints subsumed it.
	id4, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1500, keys, out, cfg)), Parallelism: 2,
		RestorePath: stop.GetSavepointPath(), ClaimMode: pb.ClaimMode_CLAIM_MODE_CLAIM})
	if err != nil {
		t.Fatalf("resume in claim mode from %s = %v", stop.GetSavepointPath(), err)
	}
	poll.Until(t, testTimeout, "the claimed savepoint's objects to be deleted", func() error {
		if left := objects(stopKey); len(left) > 0 {
			return fmt.Errorf("the claimed savepoint still holds %v", left)
		}
		return nil
	})
	if err := cl.Cancel(ctx, id4); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id4)

	// Bad restore locations are refused at submit, naming what is wrong, with nothing recorded.
	before, err := cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t)
	var keyed string
	for _, k := range objects(strings.TrimPrefix(chk, bucket+"/") + "/") {
		if strings.Contains(k, "/keyed-") {
			keyed = k
		}
	}
	o, err := c.GetObject(ctx, srv.Bucket, keyed, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(o)
	o.Close()
	if err != nil || len(b) == 0 {
		t.Fatalf("read %s: %d bytes, %v", keyed, len(b), err)
	}
	b[len(b)/2] ^= 0x40
	if _, err := c.PutObject(ctx, srv.Bucket, keyed, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		path string
		code codes.Code
		want []string
	}{
		{chk, codes.InvalidArgument, []string{"crc32c", path.Base(keyed)}},
		{bucket + "/savepoints/nothing", codes.InvalidArgument, []string{"has no _metadata"}},
		{"s3://no-such-bucket/sp/savepoint-x", codes.InvalidArgument, []string{"no such bucket", "no-such-bucket"}},
		{"file:///tmp/sp", codes.InvalidArgument, []string{"only s3://"}},
	} {
		_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(countSpec(n, 1500, keys, out, cfg)), RestorePath: r.path})
		checkRefused(t, "Submit -s "+r.path, err, r.code, r.want...)
	}
	if after, err := cl.List(ctx); err != nil || len(after) != len(before) {
		t.Errorf("jobs after the refused submissions: %d (%v), want %d", len(after), err, len(before))
	}
}

// s3Objects returns a function listing the keys under a prefix of srv's bucket.
func s3Objects(t *testing.T, srv *s3test.Server) func(prefix string) []string {
	c := srv.Client(t)
	return func(prefix string) []string {
		t.Helper()
		var keys []string
		for o := range c.ListObjects(t.Context(), srv.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				t.Fatalf("list %s: %v", prefix, o.Err)
			}
			keys = append(keys, o.Key)
		}
		return keys
	}
}
