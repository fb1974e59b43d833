package storage

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"
)

// The multipart operations of S3, for a writer that needs what FS.Create hides: an object
// written in parts over a long time (across processes, even), and committed by whoever holds
// the upload ID and the parts' ETags. The exactly-once file sink writes a transaction as a
// multipart upload, keeps the upload in its checkpoint state, and completes it when the
// checkpoint completes (Flink's S3 recoverable writer). An upload in progress is invisible
// to readers of the bucket; completing it makes the object appear whole.

// MinPartSize is the smallest part S3 takes, except for an upload's last part.
const MinPartSize = 5 << 20

// PartSize is the size of the parts the clients of the multipart operations should upload:
// s3PartSize, as S3's own writer does.
const PartSize = s3PartSize

// Part is an uploaded part of a multipart upload: what completing the upload needs.
type Part struct {
	Number int    `json:"n"`
	ETag   string `json:"etag"`
	Size   int64  `json:"size"`
}

// Upload is a multipart upload in progress.
type Upload struct {
	Name string // the object name, relative to the location
	ID   string
}

// NewUpload starts a multipart upload of the object name and returns its ID.
func (s *S3) NewUpload(ctx context.Context, name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	id, err := s.core().NewMultipartUpload(ctx, s.bucket, s.key(name), minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return "", s.fail("start upload of", name, err)
	}
	return id, nil
}

// UploadPart uploads data as part number of the upload id of name (numbers start at 1; every
// part but the last must hold at least MinPartSize bytes).
func (s *S3) UploadPart(ctx context.Context, name, id string, number int, data []byte) (Part, error) {
	if err := checkName(name); err != nil {
		return Part{}, err
	}
	p, err := s.core().PutObjectPart(ctx, s.bucket, s.key(name), id, number, bytes.NewReader(data), int64(len(data)), minio.PutObjectPartOptions{})
	if err != nil {
		return Part{}, s.fail(fmt.Sprintf("upload part %d of", number), name, err)
	}
	return Part{Number: number, ETag: p.ETag, Size: int64(len(data))}, nil
}

// CompleteUpload commits the upload id of name from parts, in order: the object appears,
// replacing any earlier one. An upload that does not exist (it was completed or aborted)
// is an error wrapping ErrNoSuchUpload.
func (s *S3) CompleteUpload(ctx context.Context, name, id string, parts []Part) error {
	if err := checkName(name); err != nil {
		return err
	}
	cps := make([]minio.CompletePart, len(parts))
	for i, p := range parts {
		cps[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
	}
	if _, err := s.core().CompleteMultipartUpload(ctx, s.bucket, s.key(name), id, cps, minio.PutObjectOptions{}); err != nil {
		return s.fail("complete upload of", name, err)
	}
	return nil
}

// AbortUpload discards the upload id of name and its parts. One that does not exist is an
// error wrapping ErrNoSuchUpload.
func (s *S3) AbortUpload(ctx context.Context, name, id string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.core().AbortMultipartUpload(ctx, s.bucket, s.key(name), id); err != nil {
		return s.fail("abort upload of", name, err)
	}
	return nil
}

// ListUploads returns the multipart uploads in progress of objects whose names start with
// prefix ("" for all), in the server's order (by name, then by start).
func (s *S3) ListUploads(ctx context.Context, prefix string) ([]Upload, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	var out []Upload
	keyMarker, idMarker := "", ""
	for {
		res, err := s.core().ListMultipartUploads(ctx, s.bucket, s.key(prefix), keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, s.fail("list uploads", prefix, err)
		}
		for _, u := range res.Uploads {
			name := u.Key
			if s.prefix != "" {
				var ok bool
				if name, ok = strings.CutPrefix(u.Key, s.prefix+"/"); !ok {
					continue
				}
			}
			out = append(out, Upload{Name: name, ID: u.UploadID})
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			return out, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

func (s *S3) core() minio.Core { return minio.Core{Client: s.client} }
