package storage

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

func writeState(t *testing.T, jobDir string, id int64, name string, chunks ...[]byte) *pb.FileHandle {
	t.Helper()
	w, err := CreateFile(jobDir, id, name)
	if err != nil {
		t.Fatalf("CreateFile(%d, %q): %v", id, name, err)
	}
	for _, c := range chunks {
		if n, err := w.Write(c); n != len(c) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	h, err := w.Commit()
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return h
}

func TestNames(t *testing.T) {
	if got, want := JobDir("/ckpt", "job-1"), filepath.Join("/ckpt", "job-1"); got != want {
		t.Errorf("JobDir = %q, want %q", got, want)
	}
	if got := CheckpointDirName(42); got != "chk-42" {
		t.Errorf("CheckpointDirName(42) = %q, want chk-42", got)
	}
}

func TestStateFileRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		chunks [][]byte
	}{
		{"empty", nil},
		{"one chunk", [][]byte{[]byte("hello")}},
		{"many chunks beyond the buffer", [][]byte{bytes.Repeat([]byte("a"), 300<<10), []byte("b"), bytes.Repeat([]byte{0, 1, 2}, 100<<10)}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobDir := JobDir(t.TempDir(), "job")
			h := writeState(t, jobDir, int64(i+1), "op-0", tc.chunks...)
			want := bytes.Join(tc.chunks, nil)
			if h.GetPath() != CheckpointDirName(int64(i+1))+"/op-0" {
				t.Errorf("handle path = %q, want chk-%d/op-0", h.GetPath(), i+1)
			}
			if h.GetSize() != int64(len(want)) || h.GetCrc32C() != crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)) {
				t.Errorf("handle = size %d crc %08x, want %d %08x", h.GetSize(), h.GetCrc32C(), len(want), Checksum(want))
			}
			got, err := ReadFile(jobDir, h)
			if err != nil {
				t.Fatalf("ReadFile: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("ReadFile returned %d bytes, want %d", len(got), len(want))
			}
		})
	}
}

func TestCreateFileRejects(t *testing.T) {
	jobDir := t.TempDir()
	for _, name := range []string{"", "a/b", "../x", "..", ".hidden", "_metadata", `a\b`} {
		if w, err := CreateFile(jobDir, 1, name); err == nil {
			_ = w.Abort()
			t.Errorf("CreateFile(%q) = nil error, want one", name)
		}
	}
	writeState(t, jobDir, 1, "dup")
	if _, err := CreateFile(jobDir, 1, "dup"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateFile of an existing file = %v, want fs.ErrExist", err)
	}
}

func TestFileWriterAbort(t *testing.T) {
	jobDir := t.TempDir()
	w, err := CreateFile(jobDir, 3, "op-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if _, err := os.Stat(filepath.Join(jobDir, "chk-3", "op-1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file after Abort: stat = %v, want not exist", err)
	}
	if err := w.Abort(); err != nil {
		t.Errorf("second Abort = %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Errorf("Write after Abort = nil error")
	}
	if _, err := w.Commit(); err == nil {
		t.Errorf("Commit after Abort = nil error")
	}
}

// corrupt modifies the file at rel in jobDir.
func corrupt(t *testing.T, jobDir, rel, how string) {
	t.Helper()
	p := filepath.Join(jobDir, filepath.FromSlash(rel))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	switch how {
	case "flip first byte":
		b[0] ^= 0x01
	case "flip last byte":
		b[len(b)-1] ^= 0x80
	case "truncate by one":
		b = b[:len(b)-1]
	case "truncate to 2 bytes":
		b = b[:2]
	case "empty":
		b = nil
	case "append":
		b = append(b, 'x')
	case "remove":
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		return
	default:
		t.Fatalf("unknown corruption %q", how)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, file string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error = %v, want ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), file) {
		t.Errorf("error %q does not name %s", err, file)
	}
}

func TestReadFileDetectsCorruption(t *testing.T) {
	for _, how := range []string{"flip first byte", "flip last byte", "truncate by one", "empty", "append", "remove"} {
		t.Run(how, func(t *testing.T) {
			jobDir := t.TempDir()
			h := writeState(t, jobDir, 7, "sum-2", []byte("some keyed state bytes"))
			corrupt(t, jobDir, h.GetPath(), how)
			_, err := ReadFile(jobDir, h)
			wantCorrupt(t, err, "chk-7/sum-2")
			switch how {
			case "flip first byte", "flip last byte":
				if !strings.Contains(err.Error(), "crc") {
					t.Errorf("error %q does not say the crc is wrong", err)
				}
			case "truncate by one", "empty", "append":
				if !strings.Contains(err.Error(), "expected 22") {
					t.Errorf("error %q does not give the expected size", err)
				}
			case "remove":
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("error %q does not wrap fs.ErrNotExist", err)
				}
			}
		})
	}
}

func TestReadFileRefusesEscapingPaths(t *testing.T) {
	jobDir := t.TempDir()
	for _, p := range []string{"../x", "/etc/passwd", "chk-1/../../x"} {
		if _, err := ReadFile(jobDir, &pb.FileHandle{Path: p}); err == nil || !strings.Contains(err.Error(), "not inside the job directory") {
			t.Errorf("ReadFile(%q) = %v, want a refusal", p, err)
		}
	}
}

func sampleMetadata(t *testing.T, jobDir string, id int64) *pb.CheckpointMetadata {
	t.Helper()
	h0 := writeState(t, jobDir, id, "sum-0", []byte("key groups 0..63"))
	h1 := writeState(t, jobDir, id, "sum-1", []byte("key groups 64..127!"))
	return &pb.CheckpointMetadata{
		JobId: "job", CheckpointId: id, TriggerTimeMs: 1_700_000_000_000,
		States: []*pb.OperatorSubtaskState{
			{Operator: "sum", Subtask: 0, Parallelism: 2, MaxParallelism: 128,
				Keyed: &pb.KeyedStateHandle{File: h0, KeyGroupStart: 0, KeyGroupEnd: 63, Offsets: []int64{0, 4, 16}}},
			{Operator: "sum", Subtask: 1, Parallelism: 2, MaxParallelism: 128,
				Keyed: &pb.KeyedStateHandle{File: h1, KeyGroupStart: 64, KeyGroupEnd: 127}},
			{Operator: "numbers", Subtask: 0, Parallelism: 1, Lists: []*pb.ListStateSnapshot{
				{Name: "position", Distribution: pb.ListDistribution_LIST_DISTRIBUTION_UNION, Elements: [][]byte{[]byte("x")}},
			}},
		},
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	jobDir := JobDir(t.TempDir(), "job")
	md := sampleMetadata(t, jobDir, 5)
	chk, err := WriteMetadata(jobDir, md)
	if err != nil {
		t.Fatalf("WriteMetadata: %v", err)
	}
	if chk != "chk-5" {
		t.Errorf("WriteMetadata returned %q, want chk-5", chk)
	}
	if md.GetVersion() != 0 {
		t.Errorf("WriteMetadata modified its argument")
	}
	want := proto.CloneOf(md)
	want.Version = MetadataVersion
	for _, read := range []func(string, string) (*pb.CheckpointMetadata, error){ReadMetadata, Verify} {
		got, err := read(jobDir, chk)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("read back %v, want %v", got, want)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(jobDir, chk))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "_metadata sum-0 sum-1" {
		t.Errorf("checkpoint directory holds %q, want no temporary files", got)
	}
	// Publishing again (e.g. a retry) replaces it atomically.
	md.TriggerTimeMs++
	if _, err := WriteMetadata(jobDir, md); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadMetadata(jobDir, chk); err != nil || got.GetTriggerTimeMs() != md.GetTriggerTimeMs() {
		t.Errorf("after rewrite: %v, %v", got, err)
	}
}

func TestWriteMetadataRejectsBadID(t *testing.T) {
	if _, err := WriteMetadata(t.TempDir(), &pb.CheckpointMetadata{}); err == nil {
		t.Errorf("WriteMetadata(id 0) = nil error")
	}
}

func TestReadMetadataDetectsCorruption(t *testing.T) {
	for _, how := range []string{"flip first byte", "flip last byte", "truncate by one", "truncate to 2 bytes", "empty", "append", "remove"} {
		t.Run(how, func(t *testing.T) {
			jobDir := t.TempDir()
			chk, err := WriteMetadata(jobDir, sampleMetadata(t, jobDir, 9))
			if err != nil {
				t.Fatal(err)
			}
			corrupt(t, jobDir, chk+"/_metadata", how)
			_, err = ReadMetadata(jobDir, chk)
			wantCorrupt(t, err, "chk-9/_metadata")
			_, err = Verify(jobDir, chk)
			wantCorrupt(t, err, "chk-9/_metadata")
		})
	}
}

func TestReadMetadataWrongDirectory(t *testing.T) {
	jobDir := t.TempDir()
	if _, err := WriteMetadata(jobDir, sampleMetadata(t, jobDir, 4)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(jobDir, "chk-4"), filepath.Join(jobDir, "chk-6")); err != nil {
		t.Fatal(err)
	}
	_, err := ReadMetadata(jobDir, "chk-6")
	wantCorrupt(t, err, "chk-6/_metadata")
}

func TestReadMetadataNewerVersion(t *testing.T) {
	jobDir := t.TempDir()
	if _, err := WriteMetadata(jobDir, &pb.CheckpointMetadata{Version: MetadataVersion + 1, CheckpointId: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMetadata(jobDir, "chk-1"); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("ReadMetadata of a newer version = %v, want a version error", err)
	}
}

func TestVerifyDetectsCorruptStateFile(t *testing.T) {
	for _, how := range []string{"flip first byte", "truncate by one", "append", "remove"} {
		t.Run(how, func(t *testing.T) {
			jobDir := t.TempDir()
			chk, err := WriteMetadata(jobDir, sampleMetadata(t, jobDir, 2))
			if err != nil {
				t.Fatal(err)
			}
			corrupt(t, jobDir, "chk-2/sum-1", how)
			if _, err := ReadMetadata(jobDir, chk); err != nil {
				t.Errorf("ReadMetadata (does not read state files) = %v", err)
			}
			_, err = Verify(jobDir, chk)
			wantCorrupt(t, err, "chk-2/sum-1")
		})
	}
}

func TestVerifyDetectsBadOffsets(t *testing.T) {
	jobDir := t.TempDir()
	md := sampleMetadata(t, jobDir, 3)
	md.States[0].Keyed.Offsets = []int64{0, 100}
	chk, err := WriteMetadata(jobDir, md)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Verify(jobDir, chk)
	wantCorrupt(t, err, "chk-3/sum-0")
}

// Chained operators share a state file; a second handle of it must agree with the first, which
// alone is read.
func TestVerifyDetectsDisagreeingHandles(t *testing.T) {
	jobDir := t.TempDir()
	md := sampleMetadata(t, jobDir, 3)
	same := proto.CloneOf(md.States[0])
	same.Operator = "chained"
	md.States = append(md.States, same)
	chk, err := WriteMetadata(jobDir, md)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(jobDir, chk); err != nil {
		t.Fatalf("Verify with two equal handles of one file = %v", err)
	}
	same.Keyed.File.Size++
	if _, err := WriteMetadata(jobDir, md); err != nil {
		t.Fatal(err)
	}
	_, err = Verify(jobDir, chk)
	wantCorrupt(t, err, "chk-3/sum-0")
}

func TestDiscard(t *testing.T) {
	base := t.TempDir()
	jobDir := JobDir(base, "job")
	for id := int64(1); id <= 3; id++ {
		if _, err := WriteMetadata(jobDir, sampleMetadata(t, jobDir, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Discard(jobDir, 2); err != nil {
		t.Fatalf("Discard(2): %v", err)
	}
	if err := Discard(jobDir, 2); err != nil {
		t.Errorf("Discard(2) again = %v, want nil", err)
	}
	if err := Discard(jobDir, 99); err != nil {
		t.Errorf("Discard(missing) = %v, want nil", err)
	}
	if _, err := ReadMetadata(jobDir, "chk-2"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadMetadata(chk-2) after Discard = %v, want not exist", err)
	}
	for _, chk := range []string{"chk-1", "chk-3"} {
		if _, err := Verify(jobDir, chk); err != nil {
			t.Errorf("Verify(%s) after discarding chk-2: %v", chk, err)
		}
	}
	if err := DiscardJob(jobDir); err != nil {
		t.Fatalf("DiscardJob: %v", err)
	}
	if _, err := os.Stat(jobDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("job directory after DiscardJob: %v", err)
	}
	if _, err := os.Stat(base); err != nil {
		t.Errorf("DiscardJob removed the base directory: %v", err)
	}
}

// DiscardJob removes the job directory and every checkpoint in it (used only by these tests).
func DiscardJob(jobDir string) error {
	if err := os.RemoveAll(jobDir); err != nil {
		return fmt.Errorf("storage: discard job checkpoints: %w", err)
	}
	return nil
}
