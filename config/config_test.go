package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"500ms", 500 * time.Millisecond}, {"10 s", 10 * time.Second}, {"1 min", time.Minute},
		{"2m", 2 * time.Minute}, {"3 hours", 3 * time.Hour}, {"1d", 24 * time.Hour}, {"250", 250 * time.Millisecond},
		{"  7 SECONDS ", 7 * time.Second}, {"1m30s", 90 * time.Second}, {"0", 0},
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "abc", "5 parsecs", "-1s", "99999999999999999999d"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) succeeded, want error", bad)
		}
	}
}

func TestSetValidates(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"heartbeat.intervall", "1s", `unknown config key "heartbeat.intervall"; did you mean "heartbeat.interval"?`},
		{"no.such.key.anywhere", "1", `unknown config key "no.such.key.anywhere"`},
		{HeartbeatInterval, "soon", `config key "heartbeat.interval": invalid duration "soon"`},
		{TaskSlots, "0", `config key "taskmanager.numberOfTaskSlots": 0 is below the minimum 1`},
		{TaskSlots, "1025", `config key "taskmanager.numberOfTaskSlots": 1025 is above the maximum 1024`},
		{TaskSlots, "2x", `is not an integer`},
		{CheckpointMode, "MOSTLY_ONCE", `"MOSTLY_ONCE" is not one of EXACTLY_ONCE, AT_LEAST_ONCE`},
	} {
		err := New().Set(tc.key, tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Set(%q, %q) = %v, want error containing %q", tc.key, tc.value, err, tc.want)
		}
	}
	if err := New().Set(TaskSlots, "1024"); err != nil {
		t.Errorf("Set(%s, 1024), the maximum = %v", TaskSlots, err)
	}
	var uk *UnknownKeyError
	if err := New().Set("heartbeat.intervall", "1s"); !errors.As(err, &uk) || uk.Suggestion != HeartbeatInterval {
		t.Errorf("Set(unknown) = %v, want *UnknownKeyError suggesting %s", err, HeartbeatInterval)
	}
}

func TestDefaultsAndCanonicalValues(t *testing.T) {
	c := New()
	if got := c.Duration(HeartbeatTimeout); got != 5*time.Second {
		t.Errorf("default %s = %v, want 5s", HeartbeatTimeout, got)
	}
	if err := c.Set(CheckpointMode, "at_least_once"); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(SlotRequestTimeout, "90000"); err != nil {
		t.Fatal(err)
	}
	if got := c.String(CheckpointMode); got != "AT_LEAST_ONCE" {
		t.Errorf("%s = %q, want AT_LEAST_ONCE", CheckpointMode, got)
	}
	if got := c.Map()[SlotRequestTimeout]; got != "90 s" {
		t.Errorf("canonical %s = %q, want \"90 s\"", SlotRequestTimeout, got)
	}
	if c.Duration(CheckpointInterval) != 0 || c.IsSet(CheckpointInterval) {
		t.Errorf("unset %s should read 0 and not be set", CheckpointInterval)
	}
}

func TestParseFileFlatAndNested(t *testing.T) {
	c, err := Parse([]byte("taskmanager.numberOfTaskSlots: 4\nheartbeat:\n  interval: 200ms\n  timeout: 2 s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Int(TaskSlots) != 4 || c.Duration(HeartbeatInterval) != 200*time.Millisecond || c.Duration(HeartbeatTimeout) != 2*time.Second {
		t.Errorf("Parse = %v", c.Map())
	}
	_, err = Parse([]byte("parallelism.default: 2\nheartbeat.timout: 1s\ntaskmanager.numberOfTaskSlots: zero\n"))
	for _, want := range []string{`line 2: unknown config key "heartbeat.timout"; did you mean "heartbeat.timeout"?`, `line 3: config key "taskmanager.numberOfTaskSlots"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(bad) = %v, want it to contain %q", err, want)
		}
	}
}

func TestSetAllIsAllOrNothing(t *testing.T) {
	c := New()
	err := c.SetAll(map[string]string{ParallelismDefault: "3", "bogus.key": "1"})
	if err == nil {
		t.Fatal("SetAll with a bad key succeeded")
	}
	if c.IsSet(ParallelismDefault) {
		t.Errorf("SetAll applied %s although another key was invalid", ParallelismDefault)
	}
}

func TestValidateJob(t *testing.T) {
	err := ValidateJob(map[string]string{TaskSlots: "2", ParallelismDefault: "2"})
	if err == nil || !strings.Contains(err.Error(), "cannot be set by a job") {
		t.Errorf("ValidateJob(process key) = %v", err)
	}
	if err := ValidateJob(map[string]string{CheckpointInterval: "500ms", ParallelismDefault: "2"}); err != nil {
		t.Errorf("ValidateJob(valid) = %v", err)
	}
}

func TestParseDynamic(t *testing.T) {
	c, err := ParseDynamic([]string{"parallelism.default=3", "heartbeat.interval = 2 s"})
	if err != nil || c.Int(ParallelismDefault) != 3 || c.Duration(HeartbeatInterval) != 2*time.Second {
		t.Errorf("ParseDynamic = %v, %v", c.Map(), err)
	}
	if _, err := ParseDynamic([]string{"novalue"}); err == nil || !strings.Contains(err.Error(), "want key=value") {
		t.Errorf("ParseDynamic(novalue) = %v", err)
	}
}
