package coordinator

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/s3test"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/storage"
)

// TestDeleteJobFilesOnS3: forgetting a job with an s3:// checkpoint directory deletes the
// job's objects, and only them; a directory another job still restores from is kept.
func TestDeleteJobFilesOnS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections)
	s3 := storage.S3Settings{Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, PathStyle: true, Region: "us-east-1"}
	client := srv.Client(t)
	ctx := t.Context()
	keys := []string{"cp/a/chk-1/_metadata", "cp/a/chk-1/keyed-v1-s0-a0", "cp/a/chk-2/stray", "cp/ab/chk-1/_metadata", "cp/b/chk-1/_metadata"}
	for _, k := range keys {
		if _, err := client.PutObject(ctx, srv.Bucket, k, nil, 0, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []string {
		var got []string
		for o := range client.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			got = append(got, o.Key)
		}
		return got
	}
	graph := &pb.JobGraph{Config: map[string]string{config.CheckpointDir: "s3://" + srv.Bucket + "/cp"}}
	a := &pb.JobRecord{Id: "a", Graph: graph, Checkpoints: []*pb.CompletedCheckpoint{{Id: 1, Path: "chk-1"}}}
	b := &pb.JobRecord{Id: "b", Graph: graph, Checkpoints: []*pb.CompletedCheckpoint{{Id: 1, Path: "chk-1"}}}
	// c restores from b's checkpoint without claiming it: b's directory stays.
	c := &pb.JobRecord{Id: "c", Graph: graph, Checkpoints: []*pb.CompletedCheckpoint{{Id: 1, BaseDir: "s3://" + srv.Bucket + "/cp/b", Path: "chk-1", NotOwned: true}}}
	if err := deleteJobFiles(a, []*pb.JobRecord{b, c}, s3); err != nil {
		t.Fatal(err)
	}
	if err := deleteJobFiles(b, []*pb.JobRecord{c}, s3); err != nil {
		t.Fatal(err)
	}
	if got, want := list(), []string{"cp/ab/chk-1/_metadata", "cp/b/chk-1/_metadata"}; !slices.Equal(got, want) {
		t.Fatalf("objects after forgetting a and b: %v, want %v", got, want)
	}

	// A savepoint on S3 that job d claimed is deleted with it; one it did not claim, and its
	// savepoints, stay (the user's).
	for _, k := range []string{"sp/savepoint-d-1/_metadata", "sp/savepoint-d-1/keyed", "sp/savepoint-d-10/_metadata", "sp/savepoint-d-2/_metadata", "sp/savepoint-d-3/_metadata"} {
		if _, err := client.PutObject(ctx, srv.Bucket, k, nil, 0, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sp := "s3://" + srv.Bucket + "/sp/"
	d := &pb.JobRecord{Id: "d", Graph: graph, Checkpoints: []*pb.CompletedCheckpoint{
		{Id: 1, BaseDir: sp + "savepoint-d-1", Path: ".", Savepoint: true},
		{Id: 2, BaseDir: sp + "savepoint-d-2", Path: ".", Savepoint: true, NotOwned: true},
	}, Savepoints: []*pb.CompletedCheckpoint{{Id: 3, BaseDir: sp + "savepoint-d-3", Path: ".", Savepoint: true}}}
	if err := deleteJobFiles(d, nil, s3); err != nil {
		t.Fatal(err)
	}
	if got, want := list(), []string{"cp/ab/chk-1/_metadata", "cp/b/chk-1/_metadata", "sp/savepoint-d-10/_metadata", "sp/savepoint-d-2/_metadata", "sp/savepoint-d-3/_metadata"}; !slices.Equal(got, want) {
		t.Fatalf("objects after forgetting d: %v, want %v", got, want)
	}

	// Down endpoint: the deletion fails, naming it.
	srv.Stop()
	err := deleteJobFiles(&pb.JobRecord{Id: "ab", Graph: graph}, nil, s3)
	if err == nil {
		t.Fatal("deleteJobFiles with the endpoint down succeeded")
	}
	t.Log(err)
}

// TestResolveCheckpointDirURI: an s3:// checkpoint directory is kept as given (not made an
// absolute local path), and a malformed or unsupported URI is refused at submit.
func TestResolveCheckpointDirURI(t *testing.T) {
	g := &pb.JobGraph{Config: map[string]string{config.CheckpointInterval: "1 s", config.CheckpointDir: "s3://bucket/cp"}}
	if err := resolveCheckpointDir(g, "/data/checkpoints"); err != nil {
		t.Fatal(err)
	}
	if got := g.GetConfig()[config.CheckpointDir]; got != "s3://bucket/cp" {
		t.Errorf("checkpoint dir resolved to %q", got)
	}
	for _, bad := range []string{"s3://", "s3:///cp", "gs://bucket/cp", "s3://bucket/a/../b"} {
		g := &pb.JobGraph{Config: map[string]string{config.CheckpointInterval: "1 s", config.CheckpointDir: bad}}
		if err := resolveCheckpointDir(g, "/data/checkpoints"); err == nil {
			t.Errorf("resolveCheckpointDir(%q) accepted it", bad)
		}
		g = &pb.JobGraph{Config: map[string]string{config.CheckpointInterval: "1 s", config.SavepointDir: bad}}
		if err := resolveCheckpointDir(g, "/data/checkpoints"); err == nil {
			t.Errorf("resolveCheckpointDir(savepoint-dir %q) accepted it", bad)
		}
	}
	// An s3:// savepoint directory is kept as given too.
	g = &pb.JobGraph{Config: map[string]string{config.CheckpointInterval: "1 s", config.SavepointDir: "s3://bucket/sp"}}
	if err := resolveCheckpointDir(g, "/data/checkpoints"); err != nil {
		t.Fatal(err)
	}
	if got := g.GetConfig()[config.SavepointDir]; got != "s3://bucket/sp" {
		t.Errorf("savepoint dir resolved to %q", got)
	}
}

// TestCheckLocation: requests name s3:// locations or confined local paths; other URIs and
// malformed ones are refused, never panicking.
func TestCheckLocation(t *testing.T) {
	dir := t.TempDir()
	p, err := newJobPaths(dir, config.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"s3://bucket/sp", "s3://bucket", filepath.Join(dir, "checkpoints", "sp")} {
		if err := p.checkLocation("savepoint directory", ok); err != nil {
			t.Errorf("checkLocation(%q) = %v", ok, err)
		}
	}
	for bad, want := range map[string]error{
		"file:///etc": ErrInvalidArgument, "gs://b/x": ErrInvalidArgument, "s3://": ErrInvalidArgument,
		"s3://b/a/../c": ErrInvalidArgument, "/etc": ErrPathNotAllowed, "://": ErrInvalidArgument,
	} {
		if err := p.checkLocation("savepoint directory", bad); !errors.Is(err, want) {
			t.Errorf("checkLocation(%q) = %v, want %v", bad, err, want)
		}
	}
}

// TestProbeSavepointLocation: the probe before a savepoint says what is wrong with an s3://
// target (a missing bucket, refused credentials, an endpoint down), naming the location and
// never the secret key.
func TestProbeSavepointLocation(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections)
	good := storage.S3Settings{Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, PathStyle: true, Region: "us-east-1"}
	badKey, down := good, good
	badKey.SecretKey = "wrong-secret"
	down.Endpoint = "http://127.0.0.1:1"
	ok := "s3://" + srv.Bucket + "/sp"
	if err := (&dispatcher{s3: good}).probeLocation(t.Context(), "savepoint directory", ok); err != nil {
		t.Fatalf("probe of %s = %v", ok, err)
	}
	for _, c := range []struct {
		s   storage.S3Settings
		loc string
		err error
	}{
		{good, "s3://no-such-bucket/sp", storage.ErrNoSuchBucket},
		{badKey, ok, storage.ErrAccessDenied},
		{down, ok, storage.ErrUnreachable},
	} {
		err := (&dispatcher{s3: c.s}).probeLocation(t.Context(), "savepoint directory", c.loc)
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.loc) || !strings.Contains(err.Error(), "savepoint directory") || strings.Contains(err.Error(), "wrong-secret") {
			t.Errorf("probe of %s = %v, want %v naming the location", c.loc, err, c.err)
		}
	}
}

// TestDiscardSavepointOnS3: a failed savepoint's directory, and a claimed savepoint once
// subsumed, are deleted from S3 object by object (discardFiles with "."), and only them.
func TestDiscardSavepointOnS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(storage.CloseIdleConnections)
	s3 := storage.S3Settings{Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, PathStyle: true, Region: "us-east-1"}
	client := srv.Client(t)
	ctx := t.Context()
	for _, k := range []string{"sp/savepoint-a-1/_metadata", "sp/savepoint-a-1/keyed-v1-s0-a0", "sp/savepoint-a-10/_metadata"} {
		if _, err := client.PutObject(ctx, srv.Bucket, k, nil, 0, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m := &jobMaster{ctx: ctx, s3: s3}
	if err := m.discardFiles("s3://"+srv.Bucket+"/sp/savepoint-a-1", "."); err != nil {
		t.Fatal(err)
	}
	var got []string
	for o := range client.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		got = append(got, o.Key)
	}
	if want := []string{"sp/savepoint-a-10/_metadata"}; !slices.Equal(got, want) {
		t.Errorf("objects after the discard: %v, want %v", got, want)
	}
	if err := m.discardFiles("s3://"+srv.Bucket, "."); err == nil {
		t.Error("discardFiles of a bucket's root succeeded")
	}
}
