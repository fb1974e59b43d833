package cli

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// fakeSavepointJM records the savepoint, dispose and submit requests it gets.
type fakeSavepointJM struct {
	pb.UnimplementedJobServiceServer
	mu       sync.Mutex
	targets  []string
	disposed []string
	restores []string
}

func (f *fakeSavepointJM) TriggerSavepoint(_ context.Context, r *pb.TriggerSavepointRequest) (*pb.TriggerSavepointResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = append(f.targets, r.GetTargetDirectory())
	return &pb.TriggerSavepointResponse{SavepointPath: r.GetTargetDirectory() + "/savepoint-j1-0"}, nil
}

func (f *fakeSavepointJM) DisposeSavepoint(_ context.Context, r *pb.DisposeSavepointRequest) (*pb.DisposeSavepointResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disposed = append(f.disposed, r.GetSavepointPath())
	return &pb.DisposeSavepointResponse{}, nil
}

func (f *fakeSavepointJM) SubmitJob(_ context.Context, r *pb.SubmitJobRequest) (*pb.SubmitJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores = append(f.restores, r.GetRestorePath())
	return &pb.SubmitJobResponse{JobId: "j1"}, nil
}

// flinkctl passes s3:// locations to the JobManager as they are (savepoint DIR, stop
// --savepoint-path, savepoint --dispose, run -s) and makes local paths absolute.
func TestSavepointLocations(t *testing.T) {
	f := &fakeSavepointJM{}
	lis := listen(t)
	serveOn(t, lis, f, nil)
	addr := lis.Addr().String()
	spec := writeSpec(t, "job.yaml", "name: j\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 3}\n  - {name: out, type: print}\n")
	for _, args := range [][]string{
		{"savepoint", "j1", "s3://bucket/sp"},
		{"stop", "--savepoint-path", "s3://bucket/stops", "j1"},
		{"savepoint", "j1", "relative/sp"},
		{"savepoint", "--dispose", "s3://bucket/sp/savepoint-j1-0"},
		{"run", "-d", "-s", "s3://bucket/sp/savepoint-j1-0/_metadata", spec},
	} {
		if code, stdout, stderr := execute(t, append([]string{"-m", addr}, args...)...); code != ExitOK {
			t.Errorf("flinkctl %s = exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.targets) != 3 || f.targets[0] != "s3://bucket/sp" || f.targets[1] != "s3://bucket/stops" || !filepath.IsAbs(f.targets[2]) {
		t.Errorf("savepoint targets %q, want the s3:// ones as given and the local one absolute", f.targets)
	}
	if len(f.disposed) != 1 || f.disposed[0] != "s3://bucket/sp/savepoint-j1-0" {
		t.Errorf("disposed %q", f.disposed)
	}
	if len(f.restores) != 1 || f.restores[0] != "s3://bucket/sp/savepoint-j1-0/_metadata" {
		t.Errorf("restore paths %q", f.restores)
	}
}
