package failover

import (
	"testing"
	"time"
)

func TestNoRestartRefusesEveryFailure(t *testing.T) {
	var s RestartStrategy = NoRestart{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		if ok, d := s.OnFailure(now.Add(time.Duration(i) * time.Hour)); ok || d != 0 {
			t.Errorf("OnFailure #%d = %v, %v; want false, 0", i, ok, d)
		}
	}
	if s.Name() != "NoRestartBackoffTimeStrategy" {
		t.Errorf("Name() = %q", s.Name())
	}
}
