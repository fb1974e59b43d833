package integration

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
)

// listServices asks addr's gRPC reflection service for its services.
func listServices(t *testing.T, ctx context.Context, addr string) ([]string, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	// io.EOF from Send: the server ended the stream already (reflection off answers
	// Unimplemented at once); Recv returns its status.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// security.rpc.reflection.enabled=false turns gRPC reflection off on the JobManager's and the
// TaskManagers' ports (security review F2: reflection was always on); it is on by default.
func TestReflectionCanBeTurnedOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	on, _ := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1})
	if names, err := listServices(t, ctx, on.JMs[0].Addr()); err != nil || len(names) == 0 {
		t.Errorf("reflection by default on the JobManager = %v, %v, want its services", names, err)
	}
	settings := config.New()
	if err := settings.Set(config.RPCReflection, "false"); err != nil {
		t.Fatal(err)
	}
	off, _ := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 1, Settings: settings})
	for what, addr := range map[string]string{"JobManager": off.JMs[0].Addr(), "TaskManager": off.TMs[0].Addr()} {
		if names, err := listServices(t, ctx, addr); status.Code(err) != codes.Unimplemented {
			t.Errorf("reflection off on the %s = %v, %v, want Unimplemented", what, names, err)
		}
	}
}
