package storage

// The S3 client is github.com/minio/minio-go/v7 rather than the AWS SDK for Go v2: its
// dependency tree is a handful of small modules (the SDK brings dozens), PutObject of a
// stream of unknown length uploads it as a multipart upload one part at a time (so a large
// object is never held whole in memory), and it speaks to any S3-compatible server (MinIO,
// versitygw, Ceph, cloud providers) with path-style or virtual-host addressing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/goflink/goflink/config"
)

// S3Settings configure the S3 client, from Flink's s3.* keys (S3SettingsFrom).
type S3Settings struct {
	// Endpoint is the server, "host[:port]" (HTTPS) or "http://host:port" or
	// "https://host:port"; empty means AWS (s3.amazonaws.com).
	Endpoint string
	// AccessKey and SecretKey are the credentials; both empty means AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY from the environment.
	AccessKey, SecretKey string
	// Region is the bucket's region; empty means AWS_REGION, else asked of the server.
	Region string
	// PathStyle addresses buckets as http://endpoint/bucket instead of
	// http://bucket.endpoint, as most S3-compatible servers need.
	PathStyle bool
}

// S3SettingsFrom reads the s3.* keys of c.
func S3SettingsFrom(c *config.Config) S3Settings {
	return S3Settings{
		Endpoint:  c.String(config.S3Endpoint),
		AccessKey: c.String(config.S3AccessKey),
		SecretKey: c.String(config.S3SecretKey),
		Region:    c.String(config.S3Region),
		PathStyle: c.Bool(config.S3PathStyleAccess),
	}
}

// String describes s without the secret key.
func (s S3Settings) String() string {
	secret := "unset"
	if s.SecretKey != "" {
		secret = "set"
	}
	return fmt.Sprintf("endpoint=%q access-key=%q secret-key=%s region=%q path-style=%t", s.Endpoint, s.AccessKey, secret, s.Region, s.PathStyle)
}

// s3PartSize is the size of a multipart upload's parts: an object is uploaded in one PUT up
// to it and as a multipart upload of such parts beyond, so a writer holds one part in memory
// (S3's minimum part is 5 MiB; 10,000 parts of 8 MiB make objects of up to 80 GiB).
const s3PartSize = 8 << 20

// s3SmallBuffer is the buffer a writer starts with; it takes one of s3PartSize when it
// outgrows it.
const s3SmallBuffer = 64 << 10

// s3MaxRetries bounds the client's retries of a failed request, so an endpoint that is down
// fails an operation within seconds.
const s3MaxRetries = 3

// credentialCodes are the S3 error codes of refused credentials. versitygw answers an
// unknown access key with XAdminUserNotFound and HTTP 404 rather than S3's 403.
var credentialCodes = map[string]bool{
	"AccessDenied":          true,
	"InvalidAccessKeyId":    true,
	"SignatureDoesNotMatch": true,
	"InvalidToken":          true,
	"ExpiredToken":          true,
	"XAdminUserNotFound":    true,
}

// s3Transport is the HTTP transport of every S3 client of the process: its connections are
// pooled across locations, so opening one per operation costs no new connections.
var s3Transport = sync.OnceValues(func() (*http.Transport, error) { return minio.DefaultTransport(true) })

// CloseIdleConnections closes the S3 clients' idle connections: for a process that is done
// with S3, and for tests that check no goroutine is left behind.
func CloseIdleConnections() {
	if tr, err := s3Transport(); err == nil {
		tr.CloseIdleConnections()
	}
}

// S3 is an FS under a prefix of an S3 bucket; object name is the key <prefix>/<name>.
type S3 struct {
	client   *minio.Client
	bucket   string
	prefix   string // without slashes at either end; "" for the bucket's root
	uri      string
	endpoint string // for errors
}

var _ FS = (*S3)(nil)

func newS3(bucket, prefix string, s S3Settings) (*S3, error) {
	uri := "s3://" + bucket
	if prefix != "" {
		uri += "/" + prefix
	}
	access, secret := s.AccessKey, s.SecretKey
	if access == "" && secret == "" {
		access, secret = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	}
	if access == "" || secret == "" {
		return nil, fmt.Errorf("storage: %s: no S3 credentials: set %s and %s, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
			uri, config.S3AccessKey, config.S3SecretKey)
	}
	region := s.Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	host, secure := "s3.amazonaws.com", true
	if s.Endpoint != "" {
		e := s.Endpoint
		if !strings.Contains(e, "://") {
			e = "https://" + e
		}
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("storage: %s: invalid %s %q: want host[:port] or http(s)://host[:port]", uri, config.S3Endpoint, s.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	lookup := minio.BucketLookupAuto
	if s.PathStyle {
		lookup = minio.BucketLookupPath
	}
	tr, err := s3Transport()
	if err != nil {
		return nil, fmt.Errorf("storage: %s: S3 client transport: %w", uri, err)
	}
	client, err := minio.New(host, &minio.Options{
		Transport:    tr,
		Creds:        credentials.NewStaticV4(access, secret, os.Getenv("AWS_SESSION_TOKEN")),
		Secure:       secure,
		Region:       region,
		BucketLookup: lookup,
		MaxRetries:   s3MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("storage: %s: S3 client for %s %q: %w", uri, config.S3Endpoint, s.Endpoint, err)
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	return &S3{client: client, bucket: bucket, prefix: prefix, uri: uri, endpoint: scheme + "://" + host}, nil
}

// String is the location's URI.
func (s *S3) String() string { return s.uri }

func (s *S3) key(name string) string {
	if s.prefix == "" {
		return name
	}
	return s.prefix + "/" + name
}

// fail wraps err of op on name (an object name, a prefix, or "" for the location) with the
// location and, for the errors a setting causes, the sentinel and the setting to check.
func (s *S3) fail(op, name string, err error) error {
	what := s.uri
	if name != "" {
		what = joinURI(s.uri, name)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("storage: %s %s: %w", op, what, err)
	}
	var resp minio.ErrorResponse
	errors.As(err, &resp)
	switch {
	case credentialCodes[resp.Code] || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("storage: %s %s: %w by %s (check %s and %s, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): %s: %s",
			op, what, ErrAccessDenied, s.endpoint, config.S3AccessKey, config.S3SecretKey, resp.Code, resp.Message)
	case resp.Code == minio.NoSuchBucket:
		return fmt.Errorf("storage: %s %s: %w: bucket %q does not exist at %s (%s)", op, what, ErrNoSuchBucket, s.bucket, s.endpoint, config.S3Endpoint)
	case resp.Code == minio.NoSuchUpload:
		return fmt.Errorf("storage: %s %s: %w", op, what, ErrNoSuchUpload)
	case resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound:
		// A HEAD (Stat) has no body: a missing bucket or an unknown access key also shows here.
		return fmt.Errorf("storage: %s %s: %w", op, what, fs.ErrNotExist)
	}
	// A failed dial or name lookup, or a timeout; not an HTTP or TLS failure of a server that
	// answered.
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return fmt.Errorf("storage: %s %s: %w: %s (%s): %w", op, what, ErrUnreachable, s.endpoint, config.S3Endpoint, err)
	}
	return fmt.Errorf("storage: %s %s: %w", op, what, err)
}

// Create starts writing the object name; see FS.
func (s *S3) Create(ctx context.Context, name string) (ObjectWriter, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, s.fail("create", name, err)
	}
	return &s3Writer{s: s, ctx: ctx, name: name}, nil
}

// s3Writer buffers up to one part. An object that fits is sent by Close in one PUT; once
// the buffer is full, the writer streams the object through a pipe into PutObject of unknown
// length, which uploads it part by part as a multipart upload and completes it when Close
// ends the stream. Abort, or a failed Write or Close, ends the stream with an error, and
// PutObject aborts the multipart upload: nothing is committed.
type s3Writer struct {
	s     *S3
	ctx   context.Context
	name  string
	buf   []byte // until the stream starts
	pw    *io.PipeWriter
	res   chan error // PutObject's result once streaming, until wait takes it
	upErr error      // PutObject's result, once wait took it
	err   error      // the first failure
	done  bool
}

// errAborted ends the stream of an aborted write.
var errAborted = errors.New("write aborted")

func (w *s3Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("storage: write to %s after Close or Abort", joinURI(w.s.uri, w.name))
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.pw == nil {
		if need := len(w.buf) + len(p); need <= s3PartSize {
			if need > cap(w.buf) {
				// Most objects are small: a small buffer first, then one of a whole part.
				c := s3SmallBuffer
				if need > c {
					c = s3PartSize
				}
				w.buf = append(make([]byte, 0, c), w.buf...)
			}
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.startStream()
	}
	n, err := w.pw.Write(p)
	if err != nil {
		// The upload ended early: its own error says why.
		w.err = w.s.fail("write", w.name, w.wait())
		return n, w.err
	}
	return n, nil
}

// wait returns PutObject's result, once.
func (w *s3Writer) wait() error {
	if w.res == nil {
		return w.upErr
	}
	w.upErr = <-w.res
	w.res = nil
	return w.upErr
}

// startStream starts PutObject on a pipe and hands it the buffered bytes first.
func (w *s3Writer) startStream() {
	pr, pw := io.Pipe()
	w.pw, w.res = pw, make(chan error, 1)
	head := w.buf
	w.buf = nil
	go func() {
		_, err := w.s.client.PutObject(w.ctx, w.s.bucket, w.s.key(w.name), io.MultiReader(bytes.NewReader(head), pr), -1,
			minio.PutObjectOptions{PartSize: s3PartSize, ContentType: "application/octet-stream"})
		// Unblock a Write waiting on the pipe when the upload failed early.
		pr.CloseWithError(errors.Join(err, errUploadEnded))
		if err != nil {
			w.abortUpload()
		}
		w.res <- err
	}()
}

// abortUpload aborts what is left of a failed multipart upload. PutObject aborts it itself
// unless its context ended; this does it under a context of its own. Only this writer
// uploads its name, so every incomplete upload of the name is this one.
func (w *s3Writer) abortUpload() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), s3AbortTimeout)
	defer cancel()
	if err := w.s.client.RemoveIncompleteUpload(ctx, w.s.bucket, w.s.key(w.name)); err != nil {
		slog.Warn("storage: cannot abort the multipart upload of a failed write; the bucket's lifecycle rule for incomplete uploads must remove it",
			"object", joinURI(w.s.uri, w.name), "err", w.s.fail("abort", w.name, err))
	}
}

// s3AbortTimeout bounds the abort of a failed write's multipart upload.
const s3AbortTimeout = 10 * time.Second

// errUploadEnded is what a Write into a finished upload returns.
var errUploadEnded = errors.New("upload ended")

func (w *s3Writer) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	if w.err != nil {
		return w.err
	}
	if w.pw == nil {
		_, err := w.s.client.PutObject(w.ctx, w.s.bucket, w.s.key(w.name), bytes.NewReader(w.buf), int64(len(w.buf)),
			minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
		w.buf = nil
		if err != nil {
			return w.s.fail("commit", w.name, err)
		}
		return nil
	}
	w.pw.Close()
	if err := w.wait(); err != nil {
		return w.s.fail("commit", w.name, err)
	}
	return nil
}

func (w *s3Writer) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.buf = nil
	if w.pw != nil {
		w.pw.CloseWithError(errAborted)
		// The upload ends with errAborted, as asked; PutObject has aborted it.
		_ = w.wait()
	}
	return nil
}

// Open streams the object name; see FS.
func (s *S3) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	// One GET whose body is streamed to the reader.
	body, _, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, s.key(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, s.fail("open", name, err)
	}
	return &s3Reader{s: s, name: name, body: body}, nil
}

type s3Reader struct {
	s    *S3
	name string
	body io.ReadCloser
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	if err != nil && err != io.EOF {
		return n, r.s.fail("read", r.name, err)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.body.Close() }

// Stat describes the object name; see FS.
func (s *S3) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	if err := checkName(name); err != nil {
		return ObjectInfo{}, err
	}
	oi, err := s.client.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s.fail("stat", name, err)
	}
	return ObjectInfo{Name: name, Size: oi.Size}, nil
}

// List returns the objects whose names start with prefix; see FS.
func (s *S3) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the client's listing goroutine when we stop early
	var out []ObjectInfo
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if oi.Err != nil {
			return nil, s.fail("list", prefix, oi.Err)
		}
		name := oi.Key
		if s.prefix != "" {
			var ok bool
			if name, ok = strings.CutPrefix(oi.Key, s.prefix+"/"); !ok {
				continue
			}
		}
		if strings.HasSuffix(name, "/") { // a "directory" marker some servers list
			continue
		}
		out = append(out, ObjectInfo{Name: name, Size: oi.Size})
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes the object name; see FS.
func (s *S3) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.key(name), minio.RemoveObjectOptions{})
	if err == nil {
		return nil
	}
	if err = s.fail("delete", name, err); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// DeleteAll removes every object under dir; see FS.
func (s *S3) DeleteAll(ctx context.Context, dir string) error {
	if err := checkName(dir); err != nil {
		return err
	}
	objs, err := s.List(ctx, dir+"/")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := s.Delete(ctx, o.Name); err != nil {
			return err
		}
	}
	// And what was being written there: the multipart upload of a large object whose writer
	// died (or is still writing, into a directory that is going away).
	ups, err := s.ListUploads(ctx, dir+"/")
	if err != nil {
		return err
	}
	for _, u := range ups {
		if err := s.AbortUpload(ctx, u.Name, u.ID); err != nil && !errors.Is(err, ErrNoSuchUpload) {
			return err
		}
	}
	return nil
}
