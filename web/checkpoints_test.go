package web_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/web"
)

// historyCluster is a Cluster that knows one job's checkpoint history and nothing else.
type historyCluster struct{ history []*pb.CheckpointInfo }

var errUnused = errors.New("not used by this test")

func (c historyCluster) Cluster(context.Context) (*pb.GetClusterResponse, error) {
	return nil, errUnused
}
func (c historyCluster) List(context.Context) ([]*pb.JobSummary, error)      { return nil, errUnused }
func (c historyCluster) Job(context.Context, string) (*pb.JobDetails, error) { return nil, errUnused }
func (c historyCluster) Checkpoints(context.Context, string) ([]*pb.CheckpointInfo, error) {
	return c.history, nil
}
func (c historyCluster) Cancel(context.Context, string) error { return errUnused }
func (c historyCluster) TriggerCheckpoint(context.Context, string) (*pb.CheckpointInfo, error) {
	return nil, errUnused
}
func (c historyCluster) TriggerSavepoint(context.Context, *pb.TriggerSavepointRequest) (*pb.TriggerSavepointResponse, error) {
	return nil, errUnused
}

// TestCheckpointsUnalignedREST checks Flink's fields of a checkpoint in /jobs/{id}/checkpoints:
// checkpoint_type (CHECKPOINT, UNALIGNED_CHECKPOINT, SAVEPOINT) and persisted_data (the
// in-flight bytes an unaligned checkpoint persisted).
func TestCheckpointsUnalignedREST(t *testing.T) {
	done := pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
	cl := historyCluster{history: []*pb.CheckpointInfo{
		{Id: 3, Status: done, Unaligned: true, InFlightBytes: 65536, StateSizeBytes: 70000},
		{Id: 2, Status: done, StateSizeBytes: 4464},
		{Id: 1, Status: done, Savepoint: true, StateSizeBytes: 4464},
	}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := web.Serve(lis, cl, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { _ = svc.Close() })

	var out struct {
		History []struct {
			ID             int64  `json:"id"`
			CheckpointType string `json:"checkpoint_type"`
			PersistedData  int64  `json:"persisted_data"`
			StateSizeBytes int64  `json:"state_size_bytes"`
		} `json:"history"`
	}
	if code := call(t, "GET", "http://"+lis.Addr().String()+"/jobs/3f0c1a2b/checkpoints", "", nil, &out); code != http.StatusOK {
		t.Fatalf("GET /jobs/3f0c1a2b/checkpoints = %d", code)
	}
	type row struct {
		id        int64
		typ       string
		persisted int64
	}
	want := []row{{3, "UNALIGNED_CHECKPOINT", 65536}, {2, "CHECKPOINT", 0}, {1, "SAVEPOINT", 0}}
	if len(out.History) != len(want) {
		t.Fatalf("history %+v, want %d entries", out.History, len(want))
	}
	for i, h := range out.History {
		if got := (row{h.ID, h.CheckpointType, h.PersistedData}); got != want[i] {
			t.Errorf("history[%d] = %+v, want %+v", i, got, want[i])
		}
	}
}
