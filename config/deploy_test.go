package config

import (
	"path/filepath"
	"testing"
)

// TestDeployConfigsLoad keeps the example cluster configs in deploy/conf valid.
func TestDeployConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("../deploy/conf/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no config files in deploy/conf: %v", err)
	}
	for _, f := range files {
		c, err := LoadFile(f)
		if err != nil {
			t.Errorf("LoadFile(%s): %v", f, err)
			continue
		}
		if c.Int(TaskSlots) != 2 || c.Duration(HeartbeatTimeout).Seconds() != 5 {
			t.Errorf("LoadFile(%s) = %v, want 2 slots and a 5 s heartbeat timeout", f, c.Map())
		}
	}
}
