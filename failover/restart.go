package failover

import "time"

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
