package storage

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"slices"
	"testing"

	"github.com/goflink/goflink/internal/s3test"
)

// TestS3Multipart: an upload of two parts is invisible until completed, listed while in
// progress, and whole once completed; aborting it again says ErrNoSuchUpload;
// an aborted one leaves nothing.
func TestS3Multipart(t *testing.T) {
	srv := s3test.Start(t)
	t.Cleanup(CloseIdleConnections)
	f, err := Open("s3://"+srv.Bucket+"/mp", s3Settings(srv))
	if err != nil {
		t.Fatal(err)
	}
	s := f.(*S3)
	ctx := t.Context()

	id, err := s.NewUpload(ctx, "a/obj")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.NewUpload(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ups, err := s.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Upload{{"a/obj", id}, {"b", other}}; !slices.Equal(ups, want) {
		t.Fatalf("ListUploads = %v, want %v", ups, want)
	}
	if ups, err := s.ListUploads(ctx, "a/"); err != nil || len(ups) != 1 || ups[0].ID != id {
		t.Fatalf("ListUploads(a/) = %v, %v; want the one of a/obj", ups, err)
	}

	first := bytes.Repeat([]byte{'x'}, MinPartSize)
	p1, err := s.UploadPart(ctx, "a/obj", id, 1, first)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.UploadPart(ctx, "a/obj", id, 2, []byte("tail"))
	if err != nil {
		t.Fatal(err)
	}
	if p1.Number != 1 || p1.ETag == "" || p1.Size != MinPartSize || p2.Size != 4 {
		t.Fatalf("parts %+v %+v", p1, p2)
	}
	if _, err := s.Stat(ctx, "a/obj"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat before the upload completed: %v, want fs.ErrNotExist", err)
	}
	if err := s.CompleteUpload(ctx, "a/obj", id, []Part{p1, p2}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Open(ctx, "a/obj")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, append(first, "tail"...)) {
		t.Fatalf("completed object: %d bytes, %v; want %d", len(got), err, len(first)+4)
	}
	// S3 may answer a repeated completion with success (AWS does for a while; versitygw
	// does) or with NoSuchUpload.
	if err := s.CompleteUpload(ctx, "a/obj", id, []Part{p1, p2}); err != nil && !errors.Is(err, ErrNoSuchUpload) {
		t.Errorf("completing again: %v, want success or ErrNoSuchUpload", err)
	}

	if err := s.AbortUpload(ctx, "b", other); err != nil {
		t.Fatal(err)
	}
	if err := s.AbortUpload(ctx, "b", other); !errors.Is(err, ErrNoSuchUpload) {
		t.Errorf("aborting again: %v, want ErrNoSuchUpload", err)
	}
	if ups, err := s.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Errorf("uploads left: %v, %v", ups, err)
	}
	if objs, err := s.List(ctx, ""); err != nil || len(objs) != 1 || objs[0].Name != "a/obj" {
		t.Errorf("objects: %v, %v; want a/obj only", objs, err)
	}
}
