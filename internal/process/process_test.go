package process

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
)

// -D wins over the config file for the same key, whether the file spells it flat or nested;
// keys set in neither keep their defaults (flag > file > default).
func TestSettingsDynamicWinsOverConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "taskmanager.numberOfTaskSlots: 2\nheartbeat:\n  interval: 1 s\n  timeout: 5 s\nslot.request.timeout: 2 min\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Flags{ConfigFile: file, Dynamic: []string{"taskmanager.numberOfTaskSlots=4", "heartbeat.timeout=9s", "parallelism.default=3"}}
	c, err := f.Settings()
	if err != nil {
		t.Fatalf("Settings() = %v", err)
	}
	if got := c.Int(config.TaskSlots); got != 4 {
		t.Errorf("%s = %d, want 4 from -D over the file's 2", config.TaskSlots, got)
	}
	if got := c.Duration(config.HeartbeatTimeout); got != 9*time.Second {
		t.Errorf("%s = %v, want 9s from -D over the file's nested 5 s", config.HeartbeatTimeout, got)
	}
	if got := c.Duration(config.HeartbeatInterval); got != time.Second {
		t.Errorf("%s = %v, want 1s from the file", config.HeartbeatInterval, got)
	}
	if got := c.Duration(config.SlotRequestTimeout); got != 2*time.Minute {
		t.Errorf("%s = %v, want 2m from the file", config.SlotRequestTimeout, got)
	}
	if got := c.Int(config.ParallelismDefault); got != 3 {
		t.Errorf("%s = %d, want 3 from -D", config.ParallelismDefault, got)
	}
	if got := c.Int(config.BuffersPerChannel); got != 4 || c.IsSet(config.BuffersPerChannel) {
		t.Errorf("%s = %d (set: %v), want its default 4, unset", config.BuffersPerChannel, got, c.IsSet(config.BuffersPerChannel))
	}
}
