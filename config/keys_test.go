package config

import (
	"slices"
	"strings"
	"testing"
)

func TestFloatKeys(t *testing.T) {
	for _, tc := range []struct {
		key, value, want string
	}{
		{ExpDelayMultiplier, "2", "2"},
		{ExpDelayMultiplier, " 1.25 ", "1.25"},
		{ExpDelayMultiplier, "1.0000001", "1.0000001"},
		{ExpDelayJitter, "0", "0"},
		{ExpDelayJitter, "1.0", "1"},
		{ExpDelayJitter, "0.35", "0.35"},
	} {
		c := New()
		if err := c.Set(tc.key, tc.value); err != nil {
			t.Errorf("Set(%s, %q) = %v", tc.key, tc.value, err)
			continue
		}
		if got := c.Map()[tc.key]; got != tc.want {
			t.Errorf("canonical %s %q = %q, want %q", tc.key, tc.value, got, tc.want)
		}
	}
	for _, tc := range []struct{ key, value, want string }{
		{ExpDelayMultiplier, "1", "1 must be greater than 1"},
		{ExpDelayMultiplier, "0.5", "must be greater than 1"},
		{ExpDelayMultiplier, "fast", `"fast" is not a finite number`},
		{ExpDelayMultiplier, "NaN", "is not a finite number"},
		{ExpDelayMultiplier, "+Inf", "is not a finite number"},
		{ExpDelayJitter, "-0.1", "-0.1 is below the minimum 0"},
		{ExpDelayJitter, "1.5", "1.5 is above the maximum 1"},
	} {
		err := New().Set(tc.key, tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Set(%s, %q) = %v, want an error naming the key and containing %q", tc.key, tc.value, err, tc.want)
		}
	}
	c := New()
	if c.Float(ExpDelayMultiplier) != 1.5 || c.Float(ExpDelayJitter) != 0.1 {
		t.Errorf("float defaults = %v, %v; want 1.5, 0.1", c.Float(ExpDelayMultiplier), c.Float(ExpDelayJitter))
	}
	_ = c.Set(ExpDelayMultiplier, "2.5")
	if c.Float(ExpDelayMultiplier) != 2.5 {
		t.Errorf("Float after Set = %v", c.Float(ExpDelayMultiplier))
	}
}

func TestLimitKey(t *testing.T) {
	c := New()
	if got := c.Limit(ExpDelayAttempts); got != Infinite || Infinite != 2147483647 {
		t.Errorf("default %s = %d, want infinite (2147483647)", ExpDelayAttempts, got)
	}
	for _, tc := range []struct {
		value, canonical string
		n                int
	}{
		{"5", "5", 5}, {"1", "1", 1}, {"INFINITE", "infinite", Infinite}, {"2147483647", "infinite", Infinite}, {"2147483646", "2147483646", 2147483646},
	} {
		c := New()
		if err := c.Set(ExpDelayAttempts, tc.value); err != nil {
			t.Errorf("Set(%q) = %v", tc.value, err)
			continue
		}
		if c.Map()[ExpDelayAttempts] != tc.canonical || c.Limit(ExpDelayAttempts) != tc.n {
			t.Errorf("Set(%q): canonical %q, Limit %d; want %q, %d", tc.value, c.Map()[ExpDelayAttempts], c.Limit(ExpDelayAttempts), tc.canonical, tc.n)
		}
	}
	for value, want := range map[string]string{
		"0": "0 is below the minimum 1", "-3": "below the minimum", "2147483648": "above the maximum 2147483647", "many": "is not an integer or infinite", "1.5": "is not an integer",
	} {
		err := New().Set(ExpDelayAttempts, value)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ExpDelayAttempts) {
			t.Errorf("Set(%s, %q) = %v, want an error naming the key and containing %q", ExpDelayAttempts, value, err, want)
		}
	}
}

func TestRestartKeys(t *testing.T) {
	for _, v := range []string{"none", "disable", "off", "fixed-delay", "fixeddelay", "failure-rate", "failurerate", "exponential-delay", "exponentialdelay", "Exponential-Delay"} {
		if err := New().Set(RestartStrategy, v); err != nil {
			t.Errorf("Set(%s, %q) = %v", RestartStrategy, v, err)
		}
	}
	if err := New().Set(RestartStrategy, "sometimes"); err == nil {
		t.Errorf("Set(%s, sometimes) succeeded", RestartStrategy)
	}
	for key, bad := range map[string]string{
		FixedDelayAttempts: "-1", FixedDelayDelay: "-1 s", FailureRateMaxFailures: "0", FailureRateInterval: "0 ms",
		FailureRateDelay: "-5ms", ExpDelayInitialBackoff: "0 ms", ExpDelayMaxBackoff: "500us", ExpDelayResetThreshold: "0",
	} {
		if err := New().Set(key, bad); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Set(%s, %q) = %v, want an error naming the key", key, bad, err)
		}
	}
	for _, k := range []string{RestartStrategy, FixedDelayAttempts, FixedDelayDelay, FailureRateMaxFailures, FailureRateInterval, FailureRateDelay,
		ExpDelayInitialBackoff, ExpDelayMaxBackoff, ExpDelayMultiplier, ExpDelayResetThreshold, ExpDelayJitter, ExpDelayAttempts} {
		o, ok := byKey[k]
		if !ok {
			t.Errorf("%s: not registered; want a described job key", k)
		} else if o.Scope != ScopeJob || o.Description == "" {
			t.Errorf("%s: scope %v, description %q; want a described job key", k, o.Scope, o.Description)
		}
	}
	if err := ValidateJob(map[string]string{ExpDelayMultiplier: "2", ExpDelayJitter: "0.2", ExpDelayAttempts: "infinite"}); err != nil {
		t.Errorf("ValidateJob(restart keys) = %v", err)
	}
}

// TestEveryDefaultIsValid: each key's default passes its own validation and stays canonical.
func TestEveryDefaultIsValid(t *testing.T) {
	for _, o := range options {
		if o.Default == "" {
			continue
		}
		v, err := o.normalize(o.Default)
		if err != nil || v != o.Default {
			t.Errorf("%s: default %q normalizes to %q, %v", o.Key, o.Default, v, err)
		}
	}
}

// Numbers beyond a key's range are refused, naming the key and the bound, so that no value
// reaches the runtime where it would overflow (security review F7: parallelism.default
// 4000000000000000000 spun a JobManager goroutine for ever).
func TestNumericKeysBounded(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{ParallelismDefault, "4000000000000000000", "4000000000000000000 is above the maximum 32768"},
		{ParallelismDefault, "32769", "above the maximum 32768"},
		{MaxParallelism, "32769", "above the maximum 32768"},
		{MaxParallelism, "-2", "below the minimum -1"},
		{TaskSlots, "4294967297", "above the maximum 1024"},
		{BuffersPerChannel, "1025", "above the maximum 1024"},
		{MaxBuffersPerChannel, "2147483648", "above the maximum 1024"},
		{CheckpointNumRetained, "4294967297", "above the maximum 2147483647"},
		{CheckpointMaxConcurrent, "9223372036854775807", "above the maximum 2147483647"},
		{FixedDelayAttempts, "2147483648", "above the maximum 2147483647"},
		{ParallelismDefault, "9223372036854775808", "is not an integer"},
		{CheckpointTimeout, "36501 d", "36501 d is above the maximum 36500 d"},
		{HeartbeatTimeout, "9223372036854775807 ns", "above the maximum 36500 d"},
		{CheckpointInterval, "106752 d", "too large"},
	} {
		err := New().Set(tc.key, tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Set(%s, %q) = %v, want an error naming the key and containing %q", tc.key, tc.value, err, tc.want)
		}
	}
	for _, tc := range []struct{ key, value string }{
		{ParallelismDefault, "32768"}, {MaxParallelism, "32768"}, {MaxParallelism, "-1"}, {TaskSlots, "1024"},
		{BuffersPerChannel, "1024"}, {CheckpointNumRetained, "2147483647"}, {CheckpointTimeout, "36500 d"},
	} {
		if err := New().Set(tc.key, tc.value); err != nil {
			t.Errorf("Set(%s, %q) = %v, want it accepted (the bound itself)", tc.key, tc.value, err)
		}
	}
}

func TestListKey(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []string
	}{
		{"/srv/out", []string{"/srv/out"}},
		{" /srv/out ; data ", []string{"/srv/out", "data"}},
		{"/a;/b;/c", []string{"/a", "/b", "/c"}},
	} {
		c := New()
		if err := c.Set(AllowedPaths, tc.value); err != nil {
			t.Errorf("Set(%s, %q) = %v", AllowedPaths, tc.value, err)
			continue
		}
		if got := c.List(AllowedPaths); !slices.Equal(got, tc.want) {
			t.Errorf("List(%s) after Set(%q) = %q, want %q", AllowedPaths, tc.value, got, tc.want)
		}
	}
	if got := New().List(AllowedPaths); got != nil {
		t.Errorf("unset %s = %q, want nil", AllowedPaths, got)
	}
	for value, want := range map[string]string{"": "value is empty", "/a;;/b": `element 2 of "/a;;/b" is empty`, " ; ": "is empty"} {
		err := New().Set(AllowedPaths, value)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), AllowedPaths) {
			t.Errorf("Set(%s, %q) = %v, want an error naming the key and containing %q", AllowedPaths, value, err, want)
		}
	}
	if err := ValidateJob(map[string]string{AllowedPaths: "/"}); err == nil || !strings.Contains(err.Error(), "cannot be set by a job") {
		t.Errorf("ValidateJob(%s) = %v, want it refused: a job must not widen its own confinement", AllowedPaths, err)
	}
}

func TestListKeyInConfigFile(t *testing.T) {
	c, err := Parse([]byte("io:\n  allowed-paths:\n    - /srv/out\n    - /srv/certs\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.List(AllowedPaths), []string{"/srv/out", "/srv/certs"}; !slices.Equal(got, want) {
		t.Errorf("List(%s) = %q, want %q", AllowedPaths, got, want)
	}
	c, err = Parse([]byte("io.allowed-paths: /srv/out;/srv/certs\n"))
	if err != nil || !slices.Equal(c.List(AllowedPaths), []string{"/srv/out", "/srv/certs"}) {
		t.Errorf("Parse(flat list) = %q, %v", c.List(AllowedPaths), err)
	}
	for text, want := range map[string]string{
		"io.allowed-paths:\n  - /a;/b\n": `line 2: io.allowed-paths: element 1 "/a;/b" contains the list separator ;`,
		"io.allowed-paths:\n  - [/a]\n":  "line 2: io.allowed-paths: element 1: want a scalar value",
		"io.allowed-paths: []\n":         "value is empty",
		"parallelism.default:\n  - 1\n":  "line 2: parallelism.default: want a scalar value",
	} {
		if _, err := Parse([]byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", text, err, want)
		}
	}
}

// TestS3KeysAreClusterSettings: as in Flink, the s3.* keys configure the processes; a job
// cannot set them (it would point the cluster's credentials elsewhere), and a job's error
// never echoes the secret.
func TestS3KeysAreClusterSettings(t *testing.T) {
	for _, k := range []string{S3Endpoint, S3AccessKey, S3SecretKey, S3PathStyleAccess, S3Region} {
		err := ValidateJob(map[string]string{k: "true"})
		if err == nil || !strings.Contains(err.Error(), "cannot be set by a job") {
			t.Errorf("ValidateJob(%s) = %v, want refused", k, err)
		}
	}
	if err := ValidateJob(map[string]string{S3SecretKey: "hunter2"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("ValidateJob(s3.secret-key) = %v: want refused without the value", err)
	}
	c := New()
	if err := c.Set(S3PathStyleAccess, "yes"); err == nil {
		t.Error("s3.path.style.access accepted yes; want true or false")
	}
	if c.Bool(S3PathStyleAccess) {
		t.Error("s3.path.style.access defaults to true; Flink's default is false")
	}
}

// TestUnalignedKeys checks the unaligned checkpoint keys: defaults, Flink 2.x's alias (flat,
// nested in a file, as a -D flag) setting the key itself, and refused values.
func TestUnalignedKeys(t *testing.T) {
	c := New()
	if c.Bool(CheckpointUnaligned) || c.Duration(CheckpointAlignedTimeout) != 0 {
		t.Errorf("defaults: unaligned %v, timeout %v; want false, 0", c.Bool(CheckpointUnaligned), c.Duration(CheckpointAlignedTimeout))
	}
	for name, load := range map[string]func() (*Config, error){
		"key":   func() (*Config, error) { return Parse([]byte(CheckpointUnaligned + ": true\n")) },
		"alias": func() (*Config, error) { return Parse([]byte(CheckpointUnalignedAlias + ": true\n")) },
		"nested": func() (*Config, error) {
			return Parse([]byte("execution:\n  checkpointing:\n    unaligned:\n      enabled: TRUE\n"))
		},
		"-D alias": func() (*Config, error) { return ParseDynamic([]string{CheckpointUnalignedAlias + "=true"}) },
		"SetAll alias": func() (*Config, error) {
			c := New()
			return c, c.SetAll(map[string]string{CheckpointUnalignedAlias: "true"})
		},
	} {
		c, err := load()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !c.Bool(CheckpointUnaligned) || !c.IsSet(CheckpointUnaligned) || !c.IsSet(CheckpointUnalignedAlias) {
			t.Errorf("%s: unaligned = %v, set %v; want true, set", name, c.Bool(CheckpointUnaligned), c.IsSet(CheckpointUnaligned))
		}
		if got := c.Map(); len(got) != 1 || got[CheckpointUnaligned] != "true" {
			t.Errorf("%s: Map() = %v, want only %s: true (the alias sets the key)", name, got, CheckpointUnaligned)
		}
	}
	if err := ValidateJob(map[string]string{CheckpointUnalignedAlias: "true", CheckpointAlignedTimeout: "30 s"}); err != nil {
		t.Errorf("ValidateJob(alias, timeout) = %v", err)
	}
	c = New()
	if err := c.Set(CheckpointAlignedTimeout, "30 s"); err != nil || c.Duration(CheckpointAlignedTimeout).Seconds() != 30 {
		t.Errorf("Set(timeout, 30 s) = %v, reads %v", err, c.Duration(CheckpointAlignedTimeout))
	}
	for _, tc := range []struct{ key, value, want string }{
		{CheckpointAlignedTimeout, "-1 s", "must not be negative"},
		{CheckpointAlignedTimeout, "-5", "must not be negative"},
		{CheckpointUnaligned, "yes", `"yes" is not one of true, false`},
		{CheckpointUnalignedAlias, "1", `"1" is not one of true, false`},
	} {
		err := New().Set(tc.key, tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Set(%s, %q) = %v, want an error naming the key and containing %q", tc.key, tc.value, err, tc.want)
		}
	}
}
