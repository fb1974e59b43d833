package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path"
	"strings"
)

// FS is a storage location: a local directory or an S3 bucket and prefix. It holds objects
// by name; a name is slash-separated and relative to the location ("chk-3/_metadata"), and
// is valid as io/fs.ValidPath says (no "..", no leading or trailing slash, not ".").
//
// The contract is what both a directory and S3 can keep:
//   - An object appears whole or not at all. Create's writer commits the object on Close
//     (local: a temporary file fsynced and renamed into place; S3: one PUT, or a multipart
//     upload completed); Abort, a failed write or a failed Close leave nothing behind.
//   - A committed object replaces any earlier one of the same name; there is no rename and no
//     exclusive create, so every writer must use a name of its own.
//   - There are no directories: List and DeleteAll work on name prefixes.
//
// Errors name the location and the object. A missing object is an error wrapping
// fs.ErrNotExist; S3's failures wrap ErrNoSuchBucket, ErrAccessDenied or ErrUnreachable.
// An FS is safe for concurrent use; an ObjectWriter is not.
type FS interface {
	// Create starts writing the object name. ctx governs the whole write, up to Close.
	Create(ctx context.Context, name string) (ObjectWriter, error)
	// Open streams the object name from its start.
	Open(ctx context.Context, name string) (io.ReadCloser, error)
	// Stat describes the object name.
	Stat(ctx context.Context, name string) (ObjectInfo, error)
	// List returns every object whose name starts with prefix ("" for all), sorted by name.
	// A prefix ending in "/" lists what is "under a directory".
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Delete removes the object name; a missing one is fine.
	Delete(ctx context.Context, name string) error
	// DeleteAll removes every object under dir (named dir/...); none is fine. On S3 it also
	// aborts the multipart uploads in progress under dir.
	DeleteAll(ctx context.Context, dir string) error
	// String is the location's URI: a local path or s3://bucket/prefix.
	String() string
}

// ObjectWriter writes one object. Close commits it: only after Close returns nil do readers
// see it, whole. Abort discards it. After either, both are no-ops returning nil, and Write
// fails.
type ObjectWriter interface {
	io.Writer
	Close() error
	Abort() error
}

// ObjectInfo describes a committed object.
type ObjectInfo struct {
	Name string // relative to the FS, slash-separated
	Size int64
}

// Errors of an S3 location, wrapped with the location, the object and the setting to check.
var (
	// ErrNoSuchBucket: the location's bucket does not exist on the endpoint.
	ErrNoSuchBucket = errors.New("no such bucket")
	// ErrAccessDenied: the endpoint refused the credentials (HTTP 403): a wrong access key or
	// secret key, or a key without the permission.
	ErrAccessDenied = errors.New("access denied")
	// ErrUnreachable: the endpoint did not answer (connection refused, unknown host, timeout).
	ErrUnreachable = errors.New("endpoint unreachable")
	// ErrNoSuchUpload: the multipart upload does not exist: it was completed or aborted (or
	// its ID is not one the bucket gave).
	ErrNoSuchUpload = errors.New("no such multipart upload")
)

// Open opens the storage location uri: s3://bucket[/prefix] for S3 (configured by s), a
// file:// URI or a plain path for a local directory (s unused). Opening connects to
// nothing: a wrong endpoint, bucket or credentials show in the first operation.
func Open(uri string, s S3Settings) (FS, error) {
	if uri == "" {
		return nil, errors.New("storage: empty location")
	}
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return NewLocal(uri), nil
	}
	switch strings.ToLower(scheme) {
	case "file":
		u, err := url.Parse(uri)
		if err != nil {
			return nil, fmt.Errorf("storage: location %q: %w", uri, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("storage: location %q: a file URI names no host", uri)
		}
		if u.Path == "" {
			return nil, fmt.Errorf("storage: location %q has no path", uri)
		}
		return NewLocal(u.Path), nil
	case "s3":
		bucket, prefix, err := parseS3(uri, rest)
		if err != nil {
			return nil, err
		}
		return newS3(bucket, prefix, s)
	default:
		return nil, fmt.Errorf("storage: location %q: unsupported scheme %q (a local path, file:// or s3://)", uri, scheme)
	}
}

// Probe checks that fsys can be written, read and deleted: it writes a small object named
// .probe-<random>, reads it back and deletes it. A wrong bucket, key or endpoint fails it
// with the error an operation would (ErrNoSuchBucket, ErrAccessDenied, ErrUnreachable).
func Probe(ctx context.Context, fsys FS) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := ".probe-" + hex.EncodeToString(b[:])
	w, err := fsys.Create(ctx, name)
	if err != nil {
		return err
	}
	if _, err := w.Write(b[:]); err != nil {
		return errors.Join(err, w.Abort())
	}
	if err := w.Close(); err != nil {
		return err
	}
	r, err := fsys.Open(ctx, name)
	if err == nil {
		var got []byte
		got, err = io.ReadAll(r)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err == nil && !bytes.Equal(got, b[:]) {
			err = fmt.Errorf("storage: %s: read back %d bytes that differ from the %d written", joinURI(fsys.String(), name), len(got), len(b))
		}
	}
	return errors.Join(err, fsys.Delete(ctx, name))
}

// CheckLocation checks the form of a location Open takes, without settings: a URI's scheme,
// bucket and prefix.
func CheckLocation(uri string) error {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || !strings.EqualFold(scheme, "s3") {
		_, err := Open(uri, S3Settings{})
		return err
	}
	_, _, err := parseS3(uri, rest)
	return err
}

// CleanS3Location is the canonical form of an s3:// location, s3://bucket or
// s3://bucket/prefix without slashes at the prefix's ends, so that two spellings of one
// location compare equal.
func CleanS3Location(uri string) (string, error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || !strings.EqualFold(scheme, "s3") {
		return "", fmt.Errorf("storage: location %q is not an s3:// URI", uri)
	}
	bucket, prefix, err := parseS3(uri, rest)
	if err != nil {
		return "", err
	}
	if prefix == "" {
		return "s3://" + bucket, nil
	}
	return "s3://" + bucket + "/" + prefix, nil
}

// parseS3 splits the rest of s3://rest into bucket and prefix.
func parseS3(uri, rest string) (bucket, prefix string, err error) {
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("storage: location %q names no bucket (s3://bucket/prefix)", uri)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" && !fs.ValidPath(prefix) {
		return "", "", fmt.Errorf("storage: location %q: invalid prefix %q", uri, prefix)
	}
	return bucket, prefix, nil
}

// checkName validates an object name.
func checkName(name string) error {
	if name == "" || name == "." || !fs.ValidPath(name) {
		return fmt.Errorf("storage: invalid object name %q", name)
	}
	return nil
}

// checkPrefix validates a List prefix: "" or a valid name, optionally ending in "/".
func checkPrefix(prefix string) error {
	if p := strings.TrimSuffix(prefix, "/"); prefix != "" && (p == "" || p == "." || !fs.ValidPath(p)) {
		return fmt.Errorf("storage: invalid prefix %q", prefix)
	}
	return nil
}

// joinURI is the URI of name in the location uri.
func joinURI(uri, name string) string {
	if strings.Contains(uri, "://") {
		return strings.TrimSuffix(uri, "/") + "/" + name
	}
	return path.Join(uri, name)
}
