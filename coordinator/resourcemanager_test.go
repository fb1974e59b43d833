package coordinator

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Two TaskManager processes started with the same --id once knocked each other out of the
// cluster in a registration storm. The first keeps its ID while it lives; the same process
// registering again (after it lost the JobManager) replaces its old registration.
func TestRegisterRefusesAnIDHeldByAnotherProcess(t *testing.T) {
	var lost []string
	rm := newResourceManager(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second, 5*time.Second,
		func(tm *taskManager, reason string) { lost = append(lost, tm.regID) })
	rm.start()
	defer rm.close()
	reg := func(instance, addr string) (*taskManager, error) {
		return rm.register(&pb.RegisterTaskManagerRequest{TaskmanagerId: "tm-1", Address: addr, Slots: 2, InstanceId: instance}, 1)
	}
	first, err := reg("a", "127.0.0.1:7001")
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg("b", "127.0.0.1:7002")
	if !errors.Is(err, ErrTaskManagerIDInUse) || !strings.Contains(err.Error(), "127.0.0.1:7001") {
		t.Fatalf("second process with the same ID: %v, want ErrTaskManagerIDInUse naming the first's address", err)
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
	rm.markLost(again.regID, "no heartbeat")
	if _, err := reg("b", "127.0.0.1:7002"); err != nil {
		t.Fatalf("a new process once the old one is lost: %v", err)
	}
}
