package failover

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/config"
)

func layer(t *testing.T, m map[string]string) *config.Config {
	t.Helper()
	if m == nil {
		return nil
	}
	c := config.New()
	if err := c.SetAll(m); err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	typeKey     = config.RestartStrategy
	noRestart   = "NoRestartBackoffTimeStrategy"
	defaultExp  = "ExponentialDelayRestartBackoffTimeStrategy(initialBackoffMS=1000, maxBackoffMS=60000, backoffMultiplier=1.5, resetBackoffThresholdMS=3600000, jitterFactor=0.1, attemptsBeforeResetBackoff=2147483647,"
	defaultFixd = "FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=1, backoffTimeMS=1000)"
)

func TestSelectionRule(t *testing.T) {
	for _, tc := range []struct {
		name          string
		job, cluster  map[string]string
		checkpointing bool
		want          string // Name() prefix
	}{
		{"no type, checkpointing: exponential-delay defaults", map[string]string{}, map[string]string{}, true, defaultExp},
		{"no type, no checkpointing: none", map[string]string{}, map[string]string{}, false, noRestart},
		{"nil layers", nil, nil, true, defaultExp},
		{"no type: configured exponential-delay values are ignored",
			map[string]string{config.ExpDelayInitialBackoff: "5 s", config.ExpDelayMaxBackoff: "10 min"},
			map[string]string{config.ExpDelayJitter: "0.5", config.ExpDelayMultiplier: "3"}, true, defaultExp},
		{"no type, no checkpointing: configured parameters do not select anything",
			map[string]string{config.FixedDelayAttempts: "5"}, nil, false, noRestart},
		{"job type: its own parameters", map[string]string{typeKey: "fixed-delay", config.FixedDelayAttempts: "4", config.FixedDelayDelay: "2 s"}, nil, true,
			"FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=4, backoffTimeMS=2000)"},
		{"job type: cluster parameters are ignored", map[string]string{typeKey: "fixed-delay"},
			map[string]string{typeKey: "failure-rate", config.FixedDelayAttempts: "7", config.FixedDelayDelay: "9 s"}, true, defaultFixd},
		{"cluster type: cluster parameters, job parameters ignored",
			map[string]string{config.FailureRateDelay: "9 s"},
			map[string]string{typeKey: "failure-rate", config.FailureRateMaxFailures: "3", config.FailureRateInterval: "5 min", config.FailureRateDelay: "2 s"}, false,
			"FailureRateRestartBackoffTimeStrategy(failuresIntervalMS=300000,backoffTimeMS=2000,maxFailuresPerInterval=3)"},
		{"cluster type wins over the default without checkpointing", nil,
			map[string]string{typeKey: "exponential-delay", config.ExpDelayInitialBackoff: "2 s", config.ExpDelayJitter: "0"}, false,
			"ExponentialDelayRestartBackoffTimeStrategy(initialBackoffMS=2000, maxBackoffMS=60000, backoffMultiplier=1.5, resetBackoffThresholdMS=3600000, jitterFactor=0.0,"},
		{"job none over cluster fixed-delay", map[string]string{typeKey: "none"}, map[string]string{typeKey: "fixed-delay"}, true, noRestart},
		{"alias disable", map[string]string{typeKey: "disable"}, nil, true, noRestart},
		{"alias off", map[string]string{typeKey: "off"}, nil, true, noRestart},
		{"alias fixeddelay", map[string]string{typeKey: "fixeddelay"}, nil, false, defaultFixd},
		{"mixed case", map[string]string{typeKey: "Fixed-Delay"}, nil, false, defaultFixd},
		{"alias failurerate", map[string]string{typeKey: "failurerate"}, nil, false,
			"FailureRateRestartBackoffTimeStrategy(failuresIntervalMS=60000,backoffTimeMS=1000,maxFailuresPerInterval=1)"},
		{"alias exponentialdelay", map[string]string{typeKey: "exponentialdelay"}, nil, false, defaultExp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewRestartStrategy(layer(t, tc.job), layer(t, tc.cluster), tc.checkpointing, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(s.Name(), tc.want) {
				t.Errorf("strategy %s\nwant      %s…", s.Name(), tc.want)
			}
		})
	}
}

// TestSelectionReadsParametersFromTheTypeLayerOnly: a job-level exponential-delay type with a
// job-level initial-backoff of 2 min is invalid against the built-in 1 min max-backoff even
// though the cluster config raises max-backoff; the cluster's value must not be read.
func TestSelectionReadsParametersFromTheTypeLayerOnly(t *testing.T) {
	job := layer(t, map[string]string{typeKey: "exponential-delay", config.ExpDelayInitialBackoff: "2 min"})
	cluster := layer(t, map[string]string{config.ExpDelayMaxBackoff: "5 min"})
	if _, err := NewRestartStrategy(job, cluster, true, nil); err == nil || !strings.Contains(err.Error(), config.ExpDelayMaxBackoff) {
		t.Errorf("NewRestartStrategy = %v, want an error naming %s", err, config.ExpDelayMaxBackoff)
	}
	job = layer(t, map[string]string{typeKey: "exponential-delay", config.ExpDelayInitialBackoff: "2 min", config.ExpDelayMaxBackoff: "5 min"})
	if _, err := NewRestartStrategy(job, cluster, true, nil); err != nil {
		t.Errorf("NewRestartStrategy(valid job layer) = %v", err)
	}
}

// TestDefaultsAreFlink2 pins the Flink 2.x defaults of the restart strategies' keys.
func TestDefaultsAreFlink2(t *testing.T) {
	want := ExponentialDelayOptions{InitialBackoff: time.Second, MaxBackoff: time.Minute, BackoffMultiplier: 1.5,
		ResetBackoffThreshold: time.Hour, JitterFactor: 0.1, AttemptsBeforeResetBackoff: 2147483647}
	if got := DefaultExponentialDelayOptions(); got != want {
		t.Errorf("DefaultExponentialDelayOptions() = %+v, want %+v", got, want)
	}
	c := config.New()
	if c.IsSet(typeKey) || c.String(typeKey) != "" {
		t.Errorf("%s must have no default (the default depends on checkpointing)", typeKey)
	}
	for key, want := range map[string]any{
		config.FixedDelayAttempts: 1, config.FixedDelayDelay: time.Second,
		config.FailureRateMaxFailures: 1, config.FailureRateInterval: time.Minute, config.FailureRateDelay: time.Second,
	} {
		var got any
		switch want.(type) {
		case int:
			got = c.Int(key)
		case time.Duration:
			got = c.Duration(key)
		}
		if got != want {
			t.Errorf("default %s = %v, want %v", key, got, want)
		}
	}
	if got := config.New().Limit(config.ExpDelayAttempts); got != config.Infinite {
		t.Errorf("default %s = %d, want infinite (%d)", config.ExpDelayAttempts, got, config.Infinite)
	}
}

func TestValidationErrorsNameTheKey(t *testing.T) {
	exp := DefaultExponentialDelayOptions()
	with := func(f func(*ExponentialDelayOptions)) ExponentialDelayOptions { o := exp; f(&o); return o }
	for _, tc := range []struct {
		name string
		err  error
		keys []string
	}{
		{"fixed-delay attempts < 0", second(NewFixedDelay(-1, time.Second)), []string{config.FixedDelayAttempts}},
		{"fixed-delay delay < 0", second(NewFixedDelay(1, -time.Second)), []string{config.FixedDelayDelay}},
		{"failure-rate max < 1", second(NewFailureRate(0, time.Minute, time.Second)), []string{config.FailureRateMaxFailures}},
		{"failure-rate interval 0", second(NewFailureRate(1, 0, time.Second)), []string{config.FailureRateInterval}},
		{"failure-rate delay < 0", second(NewFailureRate(1, time.Minute, -1)), []string{config.FailureRateDelay}},
		{"initial < 1 ms", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.InitialBackoff = time.Microsecond }), nil)), []string{config.ExpDelayInitialBackoff}},
		{"max < 1 ms", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.MaxBackoff = 0 }), nil)), []string{config.ExpDelayMaxBackoff}},
		{"initial > max", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.InitialBackoff = 2 * time.Minute }), nil)),
			[]string{config.ExpDelayInitialBackoff, config.ExpDelayMaxBackoff}},
		{"multiplier 1", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.BackoffMultiplier = 1 }), nil)), []string{config.ExpDelayMultiplier}},
		{"threshold 0", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.ResetBackoffThreshold = 0 }), nil)), []string{config.ExpDelayResetThreshold}},
		{"jitter > 1", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.JitterFactor = 1.01 }), nil)), []string{config.ExpDelayJitter}},
		{"jitter < 0", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.JitterFactor = -0.1 }), nil)), []string{config.ExpDelayJitter}},
		{"attempts 0", second(NewExponentialDelay(with(func(o *ExponentialDelayOptions) { o.AttemptsBeforeResetBackoff = 0 }), nil)), []string{config.ExpDelayAttempts}},
		{"initial > max in the layer", second(NewRestartStrategy(layer(t, map[string]string{typeKey: "exponential-delay", config.ExpDelayInitialBackoff: "90 s"}), nil, true, nil)),
			[]string{config.ExpDelayInitialBackoff, config.ExpDelayMaxBackoff}},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, k := range tc.keys {
			if !strings.Contains(tc.err.Error(), k) {
				t.Errorf("%s: error %q does not name %s", tc.name, tc.err, k)
			}
		}
	}
	// Edge values that are valid.
	for name, o := range map[string]ExponentialDelayOptions{
		"initial = max": with(func(o *ExponentialDelayOptions) { o.InitialBackoff = time.Minute }),
		"jitter 0":      with(func(o *ExponentialDelayOptions) { o.JitterFactor = 0 }),
		"jitter 1":      with(func(o *ExponentialDelayOptions) { o.JitterFactor = 1 }),
		"attempts 1":    with(func(o *ExponentialDelayOptions) { o.AttemptsBeforeResetBackoff = 1 }),
	} {
		if _, err := NewExponentialDelay(o, nil); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A layer's parameters are checked only when its type selects them.
	for name, m := range map[string]map[string]string{
		"no type":             {config.ExpDelayInitialBackoff: "90 s"},
		"another type":        {typeKey: "fixed-delay", config.ExpDelayInitialBackoff: "90 s"},
		"valid exponential":   {typeKey: "exponential-delay", config.ExpDelayInitialBackoff: "90 s", config.ExpDelayMaxBackoff: "90 s"},
		"valid failure-rate":  {typeKey: "failure-rate", config.FailureRateMaxFailures: "5"},
		"nothing configured:": {},
	} {
		if _, err := NewRestartStrategy(layer(t, m), nil, true, nil); err != nil {
			t.Errorf("NewRestartStrategy(%s) = %v", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestUnreadParameters(t *testing.T) {
	c := config.New()
	for k, v := range map[string]string{config.FixedDelayAttempts: "3", "restart-strategy.exponential-delay.max-backoff": "5s", config.CheckpointInterval: "1s"} {
		if err := c.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := Unread(c), []string{"restart-strategy.exponential-delay.max-backoff", config.FixedDelayAttempts}; !slices.Equal(got, want) {
		t.Errorf("Unread without a type = %v, want %v", got, want)
	}
	if err := c.Set(config.RestartStrategy, "fixed-delay"); err != nil {
		t.Fatal(err)
	}
	if got := Unread(c); got != nil {
		t.Errorf("Unread with a type = %v, want none", got)
	}
	if Unread(nil) != nil {
		t.Errorf("Unread(nil) found parameters")
	}
}
