package failover

import (
	"fmt"
	"time"
)

// RestartStrategy decides, failure by failure, whether a job may restart and when. It is owned
// by one job master and not safe for concurrent use. Flink's equivalent is
// RestartBackoffTimeStrategy.
type RestartStrategy interface {
	// OnFailure records a failure that happened at now and says whether the job may restart
	// and after which delay.
	OnFailure(now time.Time) (restart bool, delay time.Duration)
	// Name names the strategy in messages ("Recovery is suppressed by <Name>").
	Name() string
}

// NoRestart never restarts: every failure fails the job. It is Flink's strategy when
// checkpointing is off, and goflink's only strategy until restarts from checkpoints exist.
type NoRestart struct{}

// OnFailure always refuses.
func (NoRestart) OnFailure(time.Time) (bool, time.Duration) { return false, 0 }

// Name returns Flink's name of the strategy.
func (NoRestart) Name() string { return "NoRestartBackoffTimeStrategy" }

// FixedDelay allows a number of restarts, each after the same delay (Flink's
// FixedDelayRestartBackoffTimeStrategy: every failure counts).
type FixedDelay struct {
	// Attempts is how many restarts are allowed; a negative value means unlimited.
	Attempts int
	Delay    time.Duration
	failures int
}

// OnFailure counts the failure and allows a restart while attempts remain.
func (f *FixedDelay) OnFailure(time.Time) (bool, time.Duration) {
	f.failures++
	if f.Attempts >= 0 && f.failures > f.Attempts {
		return false, 0
	}
	return true, f.Delay
}

// Name returns Flink's name of the strategy with its settings.
func (f *FixedDelay) Name() string {
	return fmt.Sprintf("FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=%d, backoffTimeMS=%d)", f.Attempts, f.Delay.Milliseconds())
}

// Settings are the restart strategy keys of a job's effective configuration.
type Settings struct {
	// Type is restart-strategy.type ("" when unset).
	Type          string
	Checkpointing bool
	Attempts      int
	Delay         time.Duration
}

// NewRestartStrategy chooses the job's restart strategy: the configured type, or when unset
// fixed-delay with unlimited attempts and a 1 s delay if checkpointing is on (goflink's stand-in
// for Flink's exponential-delay default) and none otherwise.
func NewRestartStrategy(s Settings) (RestartStrategy, error) {
	switch s.Type {
	case "":
		if s.Checkpointing {
			return &FixedDelay{Attempts: -1, Delay: time.Second}, nil
		}
		return NoRestart{}, nil
	case "none", "disable", "off":
		return NoRestart{}, nil
	case "fixed-delay":
		if s.Attempts < 0 || s.Delay < 0 {
			return nil, fmt.Errorf("restart-strategy.fixed-delay: attempts %d and delay %v must not be negative", s.Attempts, s.Delay)
		}
		return &FixedDelay{Attempts: s.Attempts, Delay: s.Delay}, nil
	}
	return nil, fmt.Errorf("restart-strategy.type: unknown strategy %q", s.Type)
}
