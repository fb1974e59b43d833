package coordinator

import (
	"errors"
	"math"
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

// Two TaskManager processes started with the same --id once knocked each other out of the
// cluster in a registration storm, and anyone could evict a TaskManager by registering its ID.
// A live TaskManager keeps its ID against registrations from other addresses; a registration
// from its own address (the same process again after it lost the JobManager, or a restart)
// replaces the old one, and so does any registration once the old one fell silent.
func TestRegisterRefusesAnIDHeldByAnotherProcess(t *testing.T) {
	var lost []string
	now := time.Unix(1000, 0)
	rm := newResourceManager(discardLog, time.Second, 5*time.Second,
		func(tm *taskManager, reason string) { lost = append(lost, tm.regID) })
	rm.now = func() time.Time { return now }
	rm.start()
	defer rm.close()
	reg := func(instance, addr string) (*taskManager, error) {
		return rm.register(&pb.RegisterTaskManagerRequest{TaskmanagerId: "tm-1", Address: addr, Slots: 2, InstanceId: instance}, 1)
	}
	first, err := reg("a", "127.0.0.1:7001")
	if err != nil {
		t.Fatal(err)
	}
	for _, instance := range []string{"b", "a", ""} { // another process, or one that claims to be the first
		_, err = reg(instance, "127.0.0.1:7002")
		if !errors.Is(err, ErrTaskManagerIDInUse) || !strings.Contains(err.Error(), "127.0.0.1:7001") {
			t.Fatalf("instance %q at another address: %v, want ErrTaskManagerIDInUse naming the first's address", instance, err)
		}
	}
	if _, ok := rm.get(first.regID); !ok || len(lost) != 0 {
		t.Fatalf("the first TaskManager lost its registration (lost %v)", lost)
	}
	if st := toStatus(err); !strings.Contains(st.Error(), "AlreadyExists") {
		t.Errorf("status %v, want ALREADY_EXISTS", st)
	}
	again, err := reg("a", "127.0.0.1:7001")
	if err != nil {
		t.Fatalf("the same process registering again: %v", err)
	}
	if _, ok := rm.get(first.regID); ok || len(lost) != 1 || lost[0] != first.regID {
		t.Fatalf("re-registration kept the old one (lost %v)", lost)
	}
	restarted, err := reg("c", "127.0.0.1:7001")
	if err != nil {
		t.Fatalf("a restarted process at the same address: %v", err)
	}
	if _, ok := rm.get(again.regID); ok || len(lost) != 2 {
		t.Fatalf("the restarted process did not replace the old registration (lost %v)", lost)
	}
	now = now.Add(5*time.Second + time.Millisecond) // silent for longer than heartbeat.timeout
	moved, err := reg("d", "127.0.0.1:7002")
	if err != nil {
		t.Fatalf("a new process once the old one fell silent: %v", err)
	}
	if _, ok := rm.get(restarted.regID); ok || len(lost) != 3 {
		t.Fatalf("the silent registration was kept (lost %v)", lost)
	}
	rm.markLost(moved.regID, "no heartbeat")
	if _, err := reg("b", "127.0.0.1:7003"); err != nil {
		t.Fatalf("a new process once the old one is lost: %v", err)
	}
}

// registerClient starts a single JobManager and returns a client of its TaskManagerService
// once it leads.
func registerClient(t *testing.T) (*JobManager, pb.TaskManagerServiceClient) {
	t.Helper()
	rpc, raft := sockets(t)
	jm, err := Start(Config{NodeID: "jm-1", DataDir: t.TempDir(), RPCListener: rpc, RaftListener: raft, Logger: discardLog, RaftLogger: discardLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jm.Close() })
	poll.Until(t, 10*time.Second, "the JobManager to lead", func() error {
		if !jm.IsLeader() {
			return errors.New("not leading")
		}
		return nil
	})
	conn, err := grpc.NewClient(jm.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return jm, pb.NewTaskManagerServiceClient(conn)
}

// A registration is network input. slots = 2^31-1 made the JobManager allocate 32 GiB for the
// slot table and die; the values are now bounded and checked before anything is allocated,
// and a refusal names the field and the limit.
func TestRegisterTaskManagerRefusesBadValues(t *testing.T) {
	jm, client := registerClient(t)
	ok := &pb.RegisterTaskManagerRequest{TaskmanagerId: "tm-1", Address: "127.0.0.1:7001", Slots: 2, InstanceId: "a"}
	with := func(change func(r *pb.RegisterTaskManagerRequest)) *pb.RegisterTaskManagerRequest {
		r := &pb.RegisterTaskManagerRequest{TaskmanagerId: ok.TaskmanagerId, Address: ok.Address, Slots: ok.Slots, InstanceId: ok.InstanceId}
		change(r)
		return r
	}
	for _, tc := range []struct {
		name string
		req  *pb.RegisterTaskManagerRequest
		want string
	}{
		{"slots 2^31-1", with(func(r *pb.RegisterTaskManagerRequest) { r.Slots = math.MaxInt32 }), "slots must be from 1 to 1024 (taskmanager.numberOfTaskSlots), got 2147483647"},
		{"slots 1025", with(func(r *pb.RegisterTaskManagerRequest) { r.Slots = 1025 }), "slots must be from 1 to 1024"},
		{"no slots", with(func(r *pb.RegisterTaskManagerRequest) { r.Slots = 0 }), "slots must be from 1 to 1024"},
		{"no ID", with(func(r *pb.RegisterTaskManagerRequest) { r.TaskmanagerId = "" }), "taskmanager_id is required"},
		{"ID too long", with(func(r *pb.RegisterTaskManagerRequest) { r.TaskmanagerId = strings.Repeat("x", 256) }), "taskmanager_id is 256 bytes long, the limit is 255"},
		{"ID with a newline", with(func(r *pb.RegisterTaskManagerRequest) { r.TaskmanagerId = "tm\nforged log line" }), "control character"},
		{"address without a port", with(func(r *pb.RegisterTaskManagerRequest) { r.Address = "127.0.0.1" }), "address"},
		{"address with port 0", with(func(r *pb.RegisterTaskManagerRequest) { r.Address = "127.0.0.1:0" }), "port must be a number from 1 to 65535"},
		{"address too long", with(func(r *pb.RegisterTaskManagerRequest) { r.Address = strings.Repeat("h", 300) + ":1" }), "the limit is 261"},
		{"instance ID too long", with(func(r *pb.RegisterTaskManagerRequest) { r.InstanceId = strings.Repeat("i", 65) }), "instance_id is 65 bytes long, the limit is 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.RegisterTaskManager(rpcCtx(t), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("RegisterTaskManager = %v, want INVALID_ARGUMENT with %q", err, tc.want)
			}
		})
	}
	if !jm.IsLeader() {
		t.Fatal("the JobManager stopped leading")
	}
	if _, err := client.RegisterTaskManager(rpcCtx(t), ok); err != nil {
		t.Fatalf("a valid registration after the refused ones: %v", err)
	}
}

// Reusing a live TaskManager's ID from another address evicted it and restarted its jobs; it
// is refused, over the real service, and the live registration stays.
func TestRegisterTaskManagerKeepsALiveID(t *testing.T) {
	jm, client := registerClient(t)
	first, err := client.RegisterTaskManager(rpcCtx(t), &pb.RegisterTaskManagerRequest{TaskmanagerId: "tm-1", Address: "127.0.0.1:7001", Slots: 2, InstanceId: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.RegisterTaskManager(rpcCtx(t), &pb.RegisterTaskManagerRequest{TaskmanagerId: "tm-1", Address: "127.0.0.1:7666", Slots: 2})
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), "127.0.0.1:7001") {
		t.Fatalf("the ID of a live TaskManager from another address: %v, want ALREADY_EXISTS naming 127.0.0.1:7001", err)
	}
	if _, ok := jm.rm.get(first.GetRegistrationId()); !ok {
		t.Fatal("the live TaskManager lost its registration")
	}
	again, err := client.RegisterTaskManager(rpcCtx(t), &pb.RegisterTaskManagerRequest{TaskmanagerId: "tm-1", Address: "127.0.0.1:7001", Slots: 2, InstanceId: "b"})
	if err != nil {
		t.Fatalf("a TaskManager restarted at the same address: %v", err)
	}
	if _, ok := jm.rm.get(first.GetRegistrationId()); ok {
		t.Error("the restarted TaskManager's old registration was kept")
	}
	if _, ok := jm.rm.get(again.GetRegistrationId()); !ok {
		t.Error("the restarted TaskManager's registration is unknown")
	}
}
