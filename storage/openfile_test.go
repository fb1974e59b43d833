package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestOpenFileStreams reads a state file in small pieces: the contents are right, and io.EOF
// comes only after the whole file was verified.
func TestOpenFileStreams(t *testing.T) {
	jobDir := t.TempDir()
	want := bytes.Repeat([]byte("0123456789"), 50_000)
	h := writeState(t, jobDir, 1, "op-0", want)
	f, err := NewRoot(NewLocal(jobDir)).OpenFile(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(iotest.OneByteReader(f))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAll = %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	f, err = NewRoot(NewLocal(jobDir)).OpenFile(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	if err := iotest.TestReader(f, want); err != nil {
		t.Error(err)
	}
	_ = f.Close()
}

// TestOpenFileDetectsCorruption: each corruption ends the reading with ErrCorrupt naming the
// file, at the end of the file (or, for a longer one, at the handle's size), or at Close when
// the reader stopped after the handle's size.
func TestOpenFileDetectsCorruption(t *testing.T) {
	for _, how := range []string{"flip first byte", "flip last byte", "truncate by one", "empty", "append"} {
		t.Run(how, func(t *testing.T) {
			jobDir := t.TempDir()
			data := []byte("some keyed state bytes")
			h := writeState(t, jobDir, 7, "sum-2", data)
			corrupt(t, jobDir, h.GetPath(), how)
			r := NewRoot(NewLocal(jobDir))
			f, err := r.OpenFile(context.Background(), h)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(f)
			wantCorrupt(t, err, "chk-7/sum-2")
			if len(got) > len(data) {
				t.Errorf("read %d bytes of a file whose handle says %d", len(got), len(data))
			}
			if err := f.Close(); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Close after a failed verification = %v, want ErrCorrupt", err)
			}
			if how == "truncate by one" || how == "empty" {
				return
			}
			// A reader that stops after the handle's size: Close verifies.
			f, err = r.OpenFile(context.Background(), h)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(f, make([]byte, len(data))); err != nil {
				t.Fatal(err)
			}
			wantCorrupt(t, f.Close(), "chk-7/sum-2")
		})
	}
}

// TestOpenFileStopsAtTheHandlesSize: a file longer than its handle says is not read on.
func TestOpenFileStopsAtTheHandlesSize(t *testing.T) {
	jobDir := t.TempDir()
	h := writeState(t, jobDir, 1, "op-0", bytes.Repeat([]byte("x"), 1<<20))
	short := &pb.FileHandle{Path: h.GetPath(), Size: 10, Crc32C: Checksum(bytes.Repeat([]byte("x"), 10))}
	f, err := NewRoot(NewLocal(jobDir)).OpenFile(context.Background(), short)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Read(make([]byte, 1<<20))
	if n > 10 {
		t.Errorf("Read returned %d bytes of a 10-byte handle", n)
	}
	for err == nil {
		_, err = f.Read(make([]byte, 1<<20))
	}
	wantCorrupt(t, err, "chk-1/op-0")
	if !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Errorf("error %q does not say the file is longer", err)
	}
	vr := f.(*verifyingReader)
	if vr.n > 10 {
		t.Errorf("read %d bytes of the file, want at most 10", vr.n)
	}
}
