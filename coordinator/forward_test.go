package coordinator

import (
	"testing"

	"google.golang.org/grpc"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Every JobService call and GetCluster is forwarded, with request and response types found for
// each; a member's own status, its registration and every TaskManagerService call are not.
func TestForwardableMethods(t *testing.T) {
	methods := func(d grpc.ServiceDesc) []string {
		var out []string
		for _, m := range d.Methods {
			out = append(out, "/"+d.ServiceName+"/"+m.MethodName)
		}
		for _, s := range d.Streams {
			out = append(out, "/"+d.ServiceName+"/"+s.StreamName)
		}
		return out
	}
	want := map[string]bool{pb.ClusterService_GetCluster_FullMethodName: true}
	for _, m := range methods(pb.JobService_ServiceDesc) {
		want[m] = true
	}
	for _, d := range []grpc.ServiceDesc{pb.JobService_ServiceDesc, pb.ClusterService_ServiceDesc, pb.TaskManagerService_ServiceDesc} {
		for _, m := range methods(d) {
			if got := forwardable(m); got != want[m] {
				t.Errorf("forwardable(%s) = %v, want %v", m, got, want[m])
			}
			if in, out, err := messages(m); err != nil || in == nil || out == nil {
				t.Errorf("messages(%s) = %v, %v, %v; want a request and a response", m, in, out, err)
			}
		}
	}
	if _, _, err := messages("/goflink.v1.JobService/NoSuchMethod"); err == nil {
		t.Errorf("messages of an unknown method: no error")
	}
}
