package storage

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/goflink/goflink/internal/s3test"
)

// largeSize is above s3PartSize: the S3 writer streams such an object as a multipart upload.
const largeSize = 20 << 20

// fsImpl makes a fresh, empty location of one implementation.
type fsImpl struct {
	name string
	open func(t *testing.T) FS
}

func implementations() []fsImpl {
	return []fsImpl{
		{"local", func(t *testing.T) FS {
			f, err := Open(filepath.Join(t.TempDir(), "loc"), S3Settings{})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}},
		{"s3", func(t *testing.T) FS {
			srv := s3test.Start(t)
			f, err := Open("s3://"+srv.Bucket+"/some/prefix", s3Settings(srv))
			if err != nil {
				t.Fatal(err)
			}
			return f
		}},
	}
}

func s3Settings(srv *s3test.Server) S3Settings {
	return S3Settings{Endpoint: srv.Endpoint, AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, PathStyle: true, Region: "us-east-1"}
}

func put(t *testing.T, f FS, name, data string) {
	t.Helper()
	w, err := f.Create(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, f FS, name string) string {
	t.Helper()
	r, err := f.Open(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func names(t *testing.T, f FS, prefix string) []string {
	t.Helper()
	objs, err := f.List(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

// assertMissing checks that name is not visible: Stat and Open fail with fs.ErrNotExist
// naming it, and List does not show it.
func assertMissing(t *testing.T, f FS, name string) {
	t.Helper()
	_, err := f.Stat(t.Context(), name)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), name) {
		t.Errorf("Stat(%s) = %v, want fs.ErrNotExist naming it", name, err)
	}
	if r, err := f.Open(t.Context(), name); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), name) {
		if err == nil {
			r.Close()
		}
		t.Errorf("Open(%s) = %v, want fs.ErrNotExist naming it", name, err)
	}
	if got := names(t, f, ""); slices.Contains(got, name) {
		t.Errorf("List shows %s: %v", name, got)
	}
}

// stream is n pseudo-random bytes, generated as read (never held whole).
func stream(n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), n)
}

func crcOf(t *testing.T, r io.Reader) (int64, uint32) {
	t.Helper()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatal(err)
	}
	return n, h.Sum32()
}

// totalAlloc is the bytes allocated so far by the process.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestFSConformance runs the FS contract against a local directory and a real S3 server.
func TestFSConformance(t *testing.T) {
	for _, impl := range implementations() {
		t.Run(impl.name, func(t *testing.T) {
			f := impl.open(t)
			ctx := t.Context()

			t.Run("RoundTrip", func(t *testing.T) {
				put(t, f, "rt/a", "hello")
				if got := get(t, f, "rt/a"); got != "hello" {
					t.Fatalf("read back %q", got)
				}
				oi, err := f.Stat(ctx, "rt/a")
				if err != nil || oi != (ObjectInfo{Name: "rt/a", Size: 5}) {
					t.Fatalf("Stat = %+v, %v", oi, err)
				}
				put(t, f, "rt/empty", "")
				if got := get(t, f, "rt/empty"); got != "" {
					t.Fatalf("empty object read back %q", got)
				}
				put(t, f, "rt/a", "replaced")
				if got := get(t, f, "rt/a"); got != "replaced" {
					t.Fatalf("replaced object read back %q", got)
				}
			})

			t.Run("Large", func(t *testing.T) {
				// write streams size bytes into name and returns their CRC and the bytes
				// the process allocated meanwhile.
				write := func(name string, size int64) (uint32, uint64) {
					before := totalAlloc()
					w, err := f.Create(ctx, name)
					if err != nil {
						t.Fatal(err)
					}
					_, crc := crcOf(t, io.TeeReader(stream(size), w))
					if err := w.Close(); err != nil {
						t.Fatal(err)
					}
					return crc, totalAlloc() - before
				}
				wantCRC, a1 := write("large/obj", largeSize)
				_, a2 := write("large/double", 2*largeSize)
				t.Logf("writing %d bytes allocated %d bytes, %d bytes %d", largeSize, a1, 2*largeSize, a2)
				// Streaming: what a write allocates (a part or two) does not grow with the
				// object; holding it whole would add the 20 MiB more.
				if a2 > a1+largeSize/4 {
					t.Errorf("writing %d bytes allocated %d bytes, %d bytes %d: grows with the object", largeSize, a1, 2*largeSize, a2)
				}
				oi, err := f.Stat(ctx, "large/obj")
				if err != nil || oi.Size != largeSize {
					t.Fatalf("Stat = %+v, %v; want %d bytes", oi, err, largeSize)
				}
				r, err := f.Open(ctx, "large/obj")
				if err != nil {
					t.Fatal(err)
				}
				before := totalAlloc()
				gotN, gotCRC := crcOf(t, r)
				a := totalAlloc() - before
				t.Logf("reading %d bytes allocated %d bytes", gotN, a)
				if a >= largeSize/4 {
					t.Errorf("reading %d bytes allocated %d bytes", gotN, a)
				}
				r.Close()
				if gotN != largeSize || gotCRC != wantCRC {
					t.Fatalf("read back %d bytes crc %08x, wrote %d bytes crc %08x", gotN, gotCRC, int64(largeSize), wantCRC)
				}
			})

			t.Run("InvisibleUntilClose", func(t *testing.T) {
				for _, size := range []int64{10, largeSize} {
					w, err := f.Create(ctx, "pending/obj")
					if err != nil {
						t.Fatal(err)
					}
					if _, err := io.Copy(w, stream(size)); err != nil {
						t.Fatal(err)
					}
					assertMissing(t, f, "pending/obj")
					if err := w.Close(); err != nil {
						t.Fatal(err)
					}
					if oi, err := f.Stat(ctx, "pending/obj"); err != nil || oi.Size != size {
						t.Fatalf("after Close: Stat = %+v, %v; want %d bytes", oi, err, size)
					}
					if err := f.Delete(ctx, "pending/obj"); err != nil {
						t.Fatal(err)
					}
				}
			})

			t.Run("AbortLeavesNothing", func(t *testing.T) {
				for _, size := range []int64{10, largeSize} {
					w, err := f.Create(ctx, "aborted/obj")
					if err != nil {
						t.Fatal(err)
					}
					if _, err := io.Copy(w, stream(size)); err != nil {
						t.Fatal(err)
					}
					if err := w.Abort(); err != nil {
						t.Fatal(err)
					}
					if err := w.Close(); err != nil {
						t.Fatalf("Close after Abort: %v", err)
					}
					if _, err := w.Write([]byte("x")); err == nil {
						t.Fatal("Write after Abort succeeded")
					}
					assertMissing(t, f, "aborted/obj")
				}
				if got := names(t, f, "aborted/"); len(got) != 0 {
					t.Fatalf("aborted writes left %v", got)
				}
			})

			t.Run("CanceledWriteLeavesNothing", func(t *testing.T) {
				for _, size := range []int64{10, largeSize} {
					wctx, cancel := context.WithCancel(ctx)
					w, err := f.Create(wctx, "canceled/obj")
					if err != nil {
						t.Fatal(err)
					}
					_, err = io.Copy(w, stream(size))
					cancel()
					if err == nil {
						err = w.Close()
					} else {
						err = errors.Join(err, w.Abort())
					}
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("write of %d bytes under a canceled context: %v, want context.Canceled", size, err)
					}
					assertMissing(t, f, "canceled/obj")
				}
			})

			t.Run("ListByPrefix", func(t *testing.T) {
				for _, n := range []string{"ls/a/1", "ls/a/2", "ls/a/b/3", "ls/ab/4", "ls/c"} {
					put(t, f, n, n)
				}
				for prefix, want := range map[string][]string{
					"ls/a/":   {"ls/a/1", "ls/a/2", "ls/a/b/3"},
					"ls/a":    {"ls/a/1", "ls/a/2", "ls/a/b/3", "ls/ab/4"},
					"ls/":     {"ls/a/1", "ls/a/2", "ls/a/b/3", "ls/ab/4", "ls/c"},
					"ls/a/b/": {"ls/a/b/3"},
					"ls/none": nil,
					"nodir/":  nil,
				} {
					if got := names(t, f, prefix); !slices.Equal(got, want) {
						t.Errorf("List(%q) = %v, want %v", prefix, got, want)
					}
				}
				objs, err := f.List(ctx, "ls/c")
				if err != nil || len(objs) != 1 || objs[0].Size != int64(len("ls/c")) {
					t.Errorf("List(ls/c) = %+v, %v", objs, err)
				}
			})

			t.Run("Delete", func(t *testing.T) {
				for _, n := range []string{"del/x/1", "del/x/y/2", "del/xz", "del/keep"} {
					put(t, f, n, n)
				}
				if err := f.Delete(ctx, "del/keep"); err != nil {
					t.Fatal(err)
				}
				assertMissing(t, f, "del/keep")
				if err := f.Delete(ctx, "del/keep"); err != nil {
					t.Fatalf("deleting a missing object: %v", err)
				}
				if err := f.DeleteAll(ctx, "del/x"); err != nil {
					t.Fatal(err)
				}
				if got := names(t, f, "del/"); !slices.Equal(got, []string{"del/xz"}) {
					t.Fatalf("after DeleteAll(del/x): %v, want [del/xz]", got)
				}
				if err := f.DeleteAll(ctx, "del/none"); err != nil {
					t.Fatalf("DeleteAll of nothing: %v", err)
				}
			})

			t.Run("Probe", func(t *testing.T) {
				before := names(t, f, "")
				if err := Probe(ctx, f); err != nil {
					t.Fatal(err)
				}
				if after := names(t, f, ""); !slices.Equal(after, before) {
					t.Fatalf("Probe left objects: before %v, after %v", before, after)
				}
			})

			t.Run("Missing", func(t *testing.T) {
				assertMissing(t, f, "no/such/object")
			})

			t.Run("InvalidNames", func(t *testing.T) {
				for _, n := range []string{"", ".", "../x", "/x", "a//b", "a/../b", "a/"} {
					if _, err := f.Create(ctx, n); err == nil {
						t.Errorf("Create(%q) succeeded", n)
					}
					if _, err := f.Stat(ctx, n); err == nil || errors.Is(err, fs.ErrNotExist) {
						t.Errorf("Stat(%q) = %v, want an invalid-name error", n, err)
					}
				}
				if _, err := f.List(ctx, "../"); err == nil {
					t.Error(`List("../") succeeded`)
				}
			})
		})
	}
}

// TestS3LargeObjectIsMultipart: an object above the part size goes up as a multipart upload
// (its ETag is "<md5>-<parts>"), and an aborted one leaves no incomplete upload behind.
func TestS3LargeObjectIsMultipart(t *testing.T) {
	srv := s3test.Start(t)
	f, err := Open("s3://"+srv.Bucket+"/mp", s3Settings(srv))
	if err != nil {
		t.Fatal(err)
	}
	client := srv.Client(t)
	ctx := t.Context()

	w, err := f.Create(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, stream(largeSize)); err != nil {
		t.Fatal(err)
	}
	uploads := func() []string {
		var ids []string
		for u := range client.ListIncompleteUploads(ctx, srv.Bucket, "mp/", true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			ids = append(ids, u.Key)
		}
		return ids
	}
	if got := uploads(); !slices.Equal(got, []string{"mp/big"}) {
		t.Fatalf("incomplete uploads while writing: %v, want [mp/big]", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	oi, err := client.StatObject(ctx, srv.Bucket, "mp/big", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if parts := (largeSize + s3PartSize - 1) / s3PartSize; !strings.HasSuffix(oi.ETag, "-"+strconv.Itoa(parts)) {
		t.Errorf("ETag %q: want a multipart upload of %d parts", oi.ETag, parts)
	}

	w, err = f.Create(ctx, "aborted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, stream(largeSize)); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if got := uploads(); len(got) != 0 {
		t.Fatalf("incomplete uploads after Abort: %v", got)
	}

	// A write whose context ends fails, and its upload is aborted all the same.
	wctx, cancel := context.WithCancel(ctx)
	w, err = f.Create(wctx, "canceled")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, stream(largeSize)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := w.Close(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close under a canceled context: %v", err)
	}
	if got := uploads(); len(got) != 0 {
		t.Fatalf("incomplete uploads after a canceled write: %v", got)
	}
	// The bucket's directory holds the one committed object (and versitygw's own metadata).
	if _, err := os.Stat(filepath.Join(srv.Dir, srv.Bucket, "mp", "aborted")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("aborted object on the server's disk: %v", err)
	}
}

// TestS3Errors: the failures a setting causes are named, with the sentinel to test, the
// location, and the setting to check; the secret key never shows.
func TestS3Errors(t *testing.T) {
	srv := s3test.Start(t)
	ctx := t.Context()

	// every operation against f, each of which must fail with want.
	check := func(t *testing.T, f FS, want error, mentions ...string) {
		t.Helper()
		var errs []error
		w, err := f.Create(ctx, "obj")
		if err == nil {
			_, err = io.WriteString(w, "data")
			if err == nil {
				err = w.Close()
			}
		}
		errs = append(errs, err)
		_, err = f.Open(ctx, "obj")
		errs = append(errs, err)
		_, err = f.List(ctx, "")
		errs = append(errs, err)
		errs = append(errs, f.DeleteAll(ctx, "dir"), Probe(ctx, f))
		t.Logf("e.g. %v", errs[0])
		for i, err := range errs {
			if !errors.Is(err, want) {
				t.Errorf("operation %d: %v, want %v", i, err, want)
				continue
			}
			for _, m := range append(mentions, f.String()) {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("operation %d: %q does not mention %q", i, err, m)
				}
			}
			if strings.Contains(err.Error(), "wrong-secret") || strings.Contains(err.Error(), s3test.SecretKey) {
				t.Errorf("operation %d: the secret key shows in %q", i, err)
			}
		}
	}

	t.Run("BadCredentials", func(t *testing.T) {
		s := s3Settings(srv)
		s.SecretKey = "wrong-secret"
		f, err := Open("s3://"+srv.Bucket+"/p", s)
		if err != nil {
			t.Fatal(err)
		}
		check(t, f, ErrAccessDenied, "s3.access-key", "s3.secret-key")

		s = s3Settings(srv)
		s.AccessKey = "nobody"
		f, err = Open("s3://"+srv.Bucket+"/p", s)
		if err != nil {
			t.Fatal(err)
		}
		check(t, f, ErrAccessDenied, "s3.access-key")
	})

	t.Run("NoSuchBucket", func(t *testing.T) {
		f, err := Open("s3://missing-bucket/p", s3Settings(srv))
		if err != nil {
			t.Fatal(err)
		}
		check(t, f, ErrNoSuchBucket, `"missing-bucket"`, srv.Endpoint)
	})

	t.Run("CredentialsFromEnvironment", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
		t.Setenv("AWS_REGION", "us-east-1")
		f, err := Open("s3://"+srv.Bucket+"/env", S3Settings{Endpoint: srv.Endpoint, PathStyle: true})
		if err != nil {
			t.Fatal(err)
		}
		put(t, f, "x", "from env")
		if got := get(t, f, "x"); got != "from env" {
			t.Fatalf("read back %q", got)
		}
	})

	t.Run("EndpointDown", func(t *testing.T) {
		f, err := Open("s3://"+srv.Bucket+"/p", s3Settings(srv))
		if err != nil {
			t.Fatal(err)
		}
		put(t, f, "before", "up")
		srv.Stop()
		check(t, f, ErrUnreachable, srv.Endpoint, "s3.endpoint")
	})
}

// TestOpen: locations by URI, and the settings Open rejects before connecting.
func TestOpen(t *testing.T) {
	good := S3Settings{Endpoint: "http://127.0.0.1:1", AccessKey: "a", SecretKey: "very-secret"}
	for uri, want := range map[string]string{
		"/tmp/x/":                "/tmp/x",
		"rel/dir":                "rel/dir",
		"file:///tmp/x":          "/tmp/x",
		"s3://b":                 "s3://b",
		"s3://b/":                "s3://b",
		"s3://b/p/q/":            "s3://b/p/q",
		"S3://b/p":               "s3://b/p",
		"file://localhost/tmp/y": "/tmp/y",
	} {
		f, err := Open(uri, good)
		if err != nil {
			t.Errorf("Open(%q): %v", uri, err)
			continue
		}
		if f.String() != want {
			t.Errorf("Open(%q) = %s, want %s", uri, f, want)
		}
	}
	for uri, s := range map[string]S3Settings{
		"":                  good,
		"s3://":             good,
		"s3:///p":           good,
		"s3://b/../x":       good,
		"gs://b/p":          good,
		"file://host/x":     good,
		"s3://b/bad-ep":     {Endpoint: "ftp://x", AccessKey: "a", SecretKey: "very-secret"},
		"s3://b/no-secret":  {Endpoint: "http://x", AccessKey: "a"},
		"s3://b/path-in-ep": {Endpoint: "http://x/y", AccessKey: "a", SecretKey: "very-secret"},
	} {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		f, err := Open(uri, s)
		if err == nil {
			t.Errorf("Open(%q, %v) = %s, want an error", uri, s, f)
			continue
		}
		if strings.Contains(err.Error(), "very-secret") {
			t.Errorf("Open(%q): the secret key shows in %q", uri, err)
		}
	}
	if s := good.String(); strings.Contains(s, "very-secret") || !strings.Contains(s, "secret-key=set") {
		t.Errorf("S3Settings.String() = %q", s)
	}
	// The keys named in the errors exist.
	_, err := Open("s3://b/p", S3Settings{})
	if err == nil || !strings.Contains(err.Error(), "s3.access-key") || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("no credentials: %v", err)
	}
}
