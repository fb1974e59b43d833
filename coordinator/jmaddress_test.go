package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/internal/poll"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// clusterClient dials a JobManager's ClusterService from the local address local ("" for the
// system's choice).
func clusterClient(t *testing.T, addr, local string) pb.ClusterServiceClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if local != "" {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewClusterServiceClient(conn)
}

// RegisterJobManager with a member's ID and any address redirected flinkctl and TaskManagers
// to that address. The leader now records a follower's address only when the report comes from
// the member's Raft host and names an address on it, and never takes its own from anyone: the
// members' own reports still get through, the forged ones change nothing.
func TestRegisterJobManagerRefusesAddressesInconsistentWithRaft(t *testing.T) {
	g := startGroup(t, 3)
	recorded := func(f *fsm) error {
		for _, cfg := range g.cfgs {
			if a, _ := f.jobManagerAddr(cfg.NodeID); a != cfg.RPCAddr {
				return fmt.Errorf("%s's address is %q, want %s", cfg.NodeID, a, cfg.RPCAddr)
			}
		}
		return nil
	}
	g.waitSameState("every member's own address recorded", recorded)

	// The table runs against one leader; a leader change under load (FailedPrecondition: not
	// the leader) runs it again against the new one.
	var follower int
	poll.Until(t, time.Minute, "the refusals from one leader", func() error {
		l := g.leader()
		follower = (l + 1) % 3
		leaderID, followerID := g.cfgs[l].NodeID, g.cfgs[follower].NodeID
		local, elsewhere := clusterClient(t, g.cfgs[l].RPCAddr, ""), clusterClient(t, g.cfgs[l].RPCAddr, "127.0.0.2")
		for _, tc := range []struct {
			name   string
			client pb.ClusterServiceClient
			id     string
			addr   string
			code   codes.Code
			want   string
		}{
			{"a follower's address on another host", local, followerID, "10.99.0.1:6123", codes.PermissionDenied, `rpc_address "10.99.0.1:6123" of ` + followerID + " is not on its raft host 127.0.0.1"},
			{"a report from another host", elsewhere, followerID, "127.0.0.1:9", codes.PermissionDenied, "comes from 127.0.0.2, not from its raft host 127.0.0.1"},
			{"the leader's address", local, leaderID, "127.0.0.1:9", codes.PermissionDenied, "the leader records its own address"},
			{"a non-member", local, "jm-9", "127.0.0.1:9", codes.InvalidArgument, "not a member"},
			{"a malformed address", local, followerID, "127.0.0.1", codes.InvalidArgument, "rpc_address"},
		} {
			_, err := tc.client.RegisterJobManager(rpcCtx(t), &pb.RegisterJobManagerRequest{NodeId: tc.id, RpcAddress: tc.addr})
			if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "not the leader") {
				return fmt.Errorf("%s: the leader changed: %w", tc.name, err)
			}
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("%s: RegisterJobManager(%s, %s) = %v, want %v with %q", tc.name, tc.id, tc.addr, err, tc.code, tc.want)
			}
			if err := recorded(g.jms[l].fsm); err != nil {
				t.Fatalf("%s: a refused report changed the recorded addresses: %v", tc.name, err)
			}
		}
		return nil
	})
	// A follower answers clients with the leader's real address.
	resp, err := clusterClient(t, g.cfgs[follower].RPCAddr, "").GetCluster(rpcCtx(t), &pb.GetClusterRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, jm := range resp.GetJobmanagers() {
		i := slices.IndexFunc(g.cfgs, func(c Config) bool { return c.NodeID == jm.GetId() })
		if i < 0 || jm.GetAddress() != g.cfgs[i].RPCAddr {
			t.Errorf("GetCluster lists %s at %q, want its own address", jm.GetId(), jm.GetAddress())
		}
	}
}

// The rule compares hosts by name or by what they resolve to, and the caller by its IP.
func TestCheckReportedAddress(t *testing.T) {
	from := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }
	for _, tc := range []struct {
		name            string
		raft, rpc, from string
		want            string // "" when accepted
	}{
		{"same IP", "127.0.0.1:6124", "127.0.0.1:6123", "127.0.0.1", ""},
		{"same name", "localhost:6124", "localhost:6123", "127.0.0.1", ""},
		{"a name of the raft IP", "127.0.0.1:6124", "localhost:6123", "127.0.0.1", ""},
		{"an IPv4-mapped caller", "127.0.0.1:6124", "127.0.0.1:6123", "::ffff:127.0.0.1", ""},
		{"another IP", "127.0.0.1:6124", "10.0.0.9:6123", "127.0.0.1", `rpc_address "10.0.0.9:6123" of jm-2 is not on its raft host 127.0.0.1`},
		{"another caller", "127.0.0.1:6124", "127.0.0.1:6123", "10.0.0.9", "comes from 10.0.0.9, not from its raft host 127.0.0.1"},
		{"a caller of another name", "localhost:6124", "localhost:6123", "10.0.0.9", "not from its raft host localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkReportedAddress(context.Background(), "jm-2", tc.raft, tc.rpc, from(tc.from))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("checkReportedAddress(%s, %s, from %s) = %v, want accepted", tc.raft, tc.rpc, tc.from, err)
			case tc.want != "" && (!errors.Is(err, errAddressRefused) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("checkReportedAddress(%s, %s, from %s) = %v, want a refusal with %q", tc.raft, tc.rpc, tc.from, err, tc.want)
			}
		})
	}
}
