package storage

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// fuzzStateFile is the state file every directory of FuzzReadMetadata holds, so that metadata
// naming it verifies.
var fuzzStateFile = []byte("GFKS keyed state of op-0")

// FuzzReadMetadata reads an arbitrary _metadata file (a checkpoint's and a savepoint's) with
// ReadMetadata, Verify and OpenSnapshot, as a restore, `flinkctl run -s` or a new leader does
// with whatever lies in checkpoint storage. Unless raw, the input is the message and the
// fuzzer's bytes get a correct CRC-32C trailer, so that they reach the decoder. It must never
// panic, and metadata that verifies must name only files that read back with their handles.
func FuzzReadMetadata(f *testing.F) {
	h := &pb.FileHandle{Path: "chk-1/op-0", Size: int64(len(fuzzStateFile)), Crc32C: Checksum(fuzzStateFile)}
	seeds := []*pb.CheckpointMetadata{
		{Version: MetadataVersion, JobId: "job", CheckpointId: 1, TriggerTimeMs: 1700000000000, States: []*pb.OperatorSubtaskState{
			{Operator: "op", Subtask: 0, Parallelism: 1, MaxParallelism: 128,
				Keyed: &pb.KeyedStateHandle{File: h, KeyGroupStart: 0, KeyGroupEnd: 2, Offsets: []int64{5, 9, 12}},
				Lists: []*pb.ListStateSnapshot{{Name: "offsets", Distribution: pb.ListDistribution_LIST_DISTRIBUTION_SPLIT, Elements: [][]byte{[]byte("7")}}}},
			{Operator: "op2", Subtask: 0, Parallelism: 1, Keyed: &pb.KeyedStateHandle{File: h}},
		}},
		{Version: MetadataVersion, JobId: "job", CheckpointId: 1, Savepoint: true, States: []*pb.OperatorSubtaskState{
			{Operator: "op", Keyed: &pb.KeyedStateHandle{File: &pb.FileHandle{Path: "op-0", Size: h.Size, Crc32C: h.Crc32C}}},
		}},
		{CheckpointId: 1},
	}
	for _, md := range seeds {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(md)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(binary.BigEndian.AppendUint32(b, Checksum(b)), true)
	}
	f.Add([]byte{}, true)

	f.Fuzz(func(t *testing.T, data []byte, raw bool) {
		file := data
		if !raw {
			file = binary.BigEndian.AppendUint32(append([]byte(nil), data...), Checksum(data))
		}
		base := t.TempDir()
		jobDir := filepath.Join(base, "job")
		spDir := filepath.Join(base, "savepoint-job-1")
		for _, p := range []string{
			filepath.Join(jobDir, "chk-1", MetadataFile), filepath.Join(jobDir, "chk-1", "op-0"),
			filepath.Join(spDir, MetadataFile), filepath.Join(spDir, "op-0"),
		} {
			content := file
			if filepath.Base(p) != MetadataFile {
				content = fuzzStateFile
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
		}

		md, err := ReadMetadata(jobDir, "chk-1")
		if err == nil && md == nil {
			t.Fatal("ReadMetadata returned neither metadata nor an error")
		}
		if md, err := Verify(jobDir, "chk-1"); err == nil {
			checkVerified(t, jobDir, md)
		}
		for _, p := range []string{filepath.Join(jobDir, "chk-1"), filepath.Join(spDir, MetadataFile)} {
			s, err := OpenSnapshot(p)
			if err != nil {
				continue
			}
			checkVerified(t, s.Root, s.Metadata)
		}
		if _, err := DisposeSavepoint(spDir); err == nil {
			if _, err := os.Stat(spDir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("DisposeSavepoint succeeded but %s is still there (%v)", spDir, err)
			}
		}
		if _, err := DisposeSavepoint(filepath.Join(jobDir, "chk-1")); err == nil && md != nil && !md.GetSavepoint() {
			t.Fatal("DisposeSavepoint deleted a checkpoint's directory")
		}
	})
}

// checkVerified checks that every keyed state file of verified metadata reads back under its
// handle, with its key-group offsets inside it.
func checkVerified(t *testing.T, root string, md *pb.CheckpointMetadata) {
	t.Helper()
	for _, st := range md.GetStates() {
		h := st.GetKeyed().GetFile()
		if h == nil {
			continue
		}
		b, err := ReadFile(root, h)
		if err != nil {
			t.Fatalf("verified metadata names %s, which does not read: %v", h.GetPath(), err)
		}
		for _, off := range st.GetKeyed().GetOffsets() {
			if off < 0 || off > int64(len(b)) {
				t.Fatalf("verified metadata has offset %d in %s of %d bytes", off, h.GetPath(), len(b))
			}
		}
	}
}
