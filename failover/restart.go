package failover

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/config"
)

// Decision is a restart strategy's answer to one failure.
type Decision struct {
	// Restart says whether the job may restart. When false the job fails ("Recovery is
	// suppressed by <Name()>") and Delay is 0.
	Restart bool
	// Delay is how long to wait, counted from the failure's time, before restarting.
	Delay time.Duration
	// NewAttempt says whether the failure started a new restart attempt. It is false only for
	// exponential-delay when the failure arrived before the restart already scheduled for an
	// earlier failure (at or before that restart's time): the failure is merged into that
	// attempt, which neither counts again nor grows the backoff, and Delay is the time left
	// until the scheduled restart (0 if it is due), so tasks restarted for the merged failure
	// restart together with the others. The caller must not count a merged failure as another
	// restart. (Flink: the result of RestartBackoffTimeStrategy.notifyFailure.)
	NewAttempt bool
}

// RestartStrategy decides, failure by failure, whether a job may restart and when. It is owned
// by one job master and not safe for concurrent use. Flink's equivalent is
// RestartBackoffTimeStrategy; OnFailure is its notifyFailure, canRestart and getBackoffTime
// at one instant.
type RestartStrategy interface {
	// OnFailure records a failure that happened at now and decides about it. Strategies read
	// the time only from now, so a test drives them with a fake clock.
	OnFailure(now time.Time) Decision
	// Name names the strategy and its settings in messages ("Recovery is suppressed by
	// <Name>"), in the shape of Flink's toString.
	Name() string
}

// Rand is the random source of exponential-delay's jitter. *rand.Rand of math/rand/v2
// implements it; tests pass a seeded or a scripted one.
type Rand interface {
	// Int64N returns a uniform integer in [0, n).
	Int64N(n int64) int64
}

// globalRand is the default random source: math/rand/v2's top-level functions, safe for
// concurrent use and randomly seeded.
type globalRand struct{}

func (globalRand) Int64N(n int64) int64 { return rand.Int64N(n) }

// NoRestart never restarts: every failure fails the job (Flink's NoRestartBackoffTimeStrategy,
// the default when checkpointing is off).
type NoRestart struct{}

// OnFailure always refuses.
func (NoRestart) OnFailure(time.Time) Decision { return Decision{NewAttempt: true} }

// Name returns Flink's name of the strategy.
func (NoRestart) Name() string { return "NoRestartBackoffTimeStrategy" }

// FixedDelay allows a number of restarts, each after the same delay (Flink's
// FixedDelayRestartBackoffTimeStrategy). Every failure counts, however close together: with
// Attempts 1 the first failure restarts and the second fails the job.
type FixedDelay struct {
	attempts int
	delay    time.Duration
	failures int
}

// NewFixedDelay returns a fixed-delay strategy allowing attempts restarts (≥ 0), each after
// delay (≥ 0).
func NewFixedDelay(attempts int, delay time.Duration) (*FixedDelay, error) {
	if attempts < 0 {
		return nil, fmt.Errorf("%s must be at least 0, got %d", config.FixedDelayAttempts, attempts)
	}
	if delay < 0 {
		return nil, fmt.Errorf("%s must be at least 0 ms, got %v", config.FixedDelayDelay, delay)
	}
	return &FixedDelay{attempts: attempts, delay: delay}, nil
}

// OnFailure counts the failure and allows a restart while no more than the allowed number of
// failures happened.
func (f *FixedDelay) OnFailure(time.Time) Decision {
	f.failures++
	if f.failures > f.attempts {
		return Decision{NewAttempt: true}
	}
	return Decision{Restart: true, Delay: f.delay, NewAttempt: true}
}

// Name returns Flink's toString of the strategy.
func (f *FixedDelay) Name() string {
	return fmt.Sprintf("FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts=%d, backoffTimeMS=%d)", f.attempts, f.delay.Milliseconds())
}

// FailureRate restarts after a fixed delay as long as no more than maxFailures failures fall
// within one interval (Flink's FailureRateRestartBackoffTimeStrategy): it keeps the times of
// the last maxFailures+1 failures and refuses when all of them lie within the interval, that
// is when the newest is not more than interval after the oldest.
type FailureRate struct {
	maxFailures int
	interval    time.Duration
	delay       time.Duration
	failures    []time.Time // oldest first, at most maxFailures+1
}

// NewFailureRate returns a failure-rate strategy: maxFailures ≥ 1 failures per interval > 0,
// each restart after delay ≥ 0.
func NewFailureRate(maxFailures int, interval, delay time.Duration) (*FailureRate, error) {
	if maxFailures < 1 {
		return nil, fmt.Errorf("%s must be at least 1, got %d", config.FailureRateMaxFailures, maxFailures)
	}
	if interval <= 0 {
		return nil, fmt.Errorf("%s must be greater than 0 ms, got %v", config.FailureRateInterval, interval)
	}
	if delay < 0 {
		return nil, fmt.Errorf("%s must be at least 0 ms, got %v", config.FailureRateDelay, delay)
	}
	return &FailureRate{maxFailures: maxFailures, interval: interval, delay: delay}, nil
}

// OnFailure records the failure and refuses when it is the (maxFailures+1)-th within the
// interval.
func (f *FailureRate) OnFailure(now time.Time) Decision {
	if len(f.failures) > f.maxFailures {
		n := copy(f.failures, f.failures[1:])
		f.failures = f.failures[:n]
	}
	f.failures = append(f.failures, now)
	if len(f.failures) > f.maxFailures && now.Sub(f.failures[0]) <= f.interval {
		return Decision{NewAttempt: true}
	}
	return Decision{Restart: true, Delay: f.delay, NewAttempt: true}
}

// Name returns Flink's toString of the strategy. (Flink's own string repeats the class name
// and an opening parenthesis at its start, a slip this omits.)
func (f *FailureRate) Name() string {
	return fmt.Sprintf("FailureRateRestartBackoffTimeStrategy(failuresIntervalMS=%d,backoffTimeMS=%d,maxFailuresPerInterval=%d)",
		f.interval.Milliseconds(), f.delay.Milliseconds(), f.maxFailures)
}

// ExponentialDelayOptions are the settings of exponential-delay, named after the
// restart-strategy.exponential-delay.* keys.
type ExponentialDelayOptions struct {
	InitialBackoff        time.Duration // ≥ 1 ms, ≤ MaxBackoff
	MaxBackoff            time.Duration // ≥ 1 ms
	BackoffMultiplier     float64       // > 1
	ResetBackoffThreshold time.Duration // ≥ 1 ms
	JitterFactor          float64       // in [0, 1]
	// AttemptsBeforeResetBackoff is the number of restart attempts allowed since the last
	// reset (≥ 1); config.Infinite is Flink's default.
	AttemptsBeforeResetBackoff int
}

// DefaultExponentialDelayOptions returns the built-in defaults (Flink 2.x): 1 s initial, 1 min
// max, multiplier 1.5, reset after 1 h, jitter 0.1, infinite attempts.
func DefaultExponentialDelayOptions() ExponentialDelayOptions {
	return exponentialDelayOptions(config.New())
}

func exponentialDelayOptions(c *config.Config) ExponentialDelayOptions {
	return ExponentialDelayOptions{
		InitialBackoff:             c.Duration(config.ExpDelayInitialBackoff),
		MaxBackoff:                 c.Duration(config.ExpDelayMaxBackoff),
		BackoffMultiplier:          c.Float(config.ExpDelayMultiplier),
		ResetBackoffThreshold:      c.Duration(config.ExpDelayResetThreshold),
		JitterFactor:               c.Float(config.ExpDelayJitter),
		AttemptsBeforeResetBackoff: c.Limit(config.ExpDelayAttempts),
	}
}

// validate applies Flink's checks; durations count in whole milliseconds, as in Flink.
func (o ExponentialDelayOptions) validate() error {
	switch {
	case o.InitialBackoff.Milliseconds() < 1:
		return fmt.Errorf("%s must be at least 1 ms, got %v", config.ExpDelayInitialBackoff, o.InitialBackoff)
	case o.MaxBackoff.Milliseconds() < 1:
		return fmt.Errorf("%s must be at least 1 ms, got %v", config.ExpDelayMaxBackoff, o.MaxBackoff)
	case o.InitialBackoff.Milliseconds() > o.MaxBackoff.Milliseconds():
		return fmt.Errorf("%s (%v) must not be greater than %s (%v)", config.ExpDelayInitialBackoff, o.InitialBackoff, config.ExpDelayMaxBackoff, o.MaxBackoff)
	case !(o.BackoffMultiplier > 1) || math.IsInf(o.BackoffMultiplier, 0):
		return fmt.Errorf("%s must be a number greater than 1, got %v", config.ExpDelayMultiplier, o.BackoffMultiplier)
	case o.ResetBackoffThreshold.Milliseconds() < 1:
		return fmt.Errorf("%s must be at least 1 ms, got %v", config.ExpDelayResetThreshold, o.ResetBackoffThreshold)
	case !(o.JitterFactor >= 0 && o.JitterFactor <= 1):
		return fmt.Errorf("%s must be in [0, 1], got %v", config.ExpDelayJitter, o.JitterFactor)
	case o.AttemptsBeforeResetBackoff < 1:
		return fmt.Errorf("%s must be at least 1, got %d", config.ExpDelayAttempts, o.AttemptsBeforeResetBackoff)
	}
	return nil
}

// noRestartScheduled is Flink's nextRestartTimestamp before the first failure, shown by Name.
const noRestartScheduled = math.MinInt32

// maxBackoffBase caps the un-jittered backoff (in ms) so that adding the jitter never
// overflows; it is ~142,000 years, far above any max-backoff a time.Duration can hold.
const maxBackoffBase = 1 << 52

// ExponentialDelay is Flink's ExponentialDelayRestartBackoffTimeStrategy (Flink ≥ 1.19):
//
//   - a failure at or before the scheduled restart time of the previous attempt is merged
//     into that attempt (see Decision.NewAttempt);
//   - otherwise, if it comes at least ResetBackoffThreshold after that scheduled restart time
//     (the job ran that long since the restart), the attempt count resets to 0; then the
//     restart is scheduled at now + backoff(attempt) and attempt is incremented;
//   - backoff(a) = max(initial, min(b + J, max)) with b = ⌊initial·multiplier^a⌋ and J a
//     uniform integer in [−⌊b·jitter⌋, ⌊b·jitter⌋], everything in whole milliseconds;
//   - the job may restart while attempt ≤ AttemptsBeforeResetBackoff.
type ExponentialDelay struct {
	initialMS, maxMS int64
	multiplier       float64
	resetThreshold   time.Duration
	jitter           float64
	attemptsLimit    int
	rnd              Rand

	attempt     int
	scheduled   bool      // a restart has been scheduled (some failure happened)
	nextRestart time.Time // scheduled time of the latest attempt's restart
}

// NewExponentialDelay returns an exponential-delay strategy drawing its jitter from rnd (nil:
// math/rand/v2's global source).
func NewExponentialDelay(o ExponentialDelayOptions, rnd Rand) (*ExponentialDelay, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if rnd == nil {
		rnd = globalRand{}
	}
	return &ExponentialDelay{
		initialMS: o.InitialBackoff.Milliseconds(), maxMS: o.MaxBackoff.Milliseconds(),
		multiplier: o.BackoffMultiplier, resetThreshold: time.Duration(o.ResetBackoffThreshold.Milliseconds()) * time.Millisecond,
		jitter: o.JitterFactor, attemptsLimit: o.AttemptsBeforeResetBackoff, rnd: rnd,
	}, nil
}

// OnFailure merges the failure into the scheduled restart or starts a new attempt (see the
// type's comment).
func (e *ExponentialDelay) OnFailure(now time.Time) Decision {
	if e.scheduled && !now.After(e.nextRestart) {
		if !e.canRestart() {
			return Decision{}
		}
		return Decision{Restart: true, Delay: max(0, e.nextRestart.Sub(now))}
	}
	if !e.scheduled || now.Sub(e.nextRestart) >= e.resetThreshold {
		e.attempt = 0
	}
	backoff := time.Duration(e.backoffMS()) * time.Millisecond
	e.nextRestart, e.scheduled = now.Add(backoff), true
	e.attempt++
	if !e.canRestart() {
		return Decision{NewAttempt: true}
	}
	return Decision{Restart: true, Delay: backoff, NewAttempt: true}
}

func (e *ExponentialDelay) canRestart() bool { return e.attempt <= e.attemptsLimit }

// backoffMS is the jittered backoff of the current attempt, computed as Flink does.
func (e *ExponentialDelay) backoffMS() int64 {
	bf := float64(e.initialMS) * math.Pow(e.multiplier, float64(e.attempt))
	b := int64(maxBackoffBase)
	if bf < maxBackoffBase {
		b = int64(bf)
	}
	var j int64
	if e.jitter != 0 {
		off := int64(float64(b) * e.jitter)
		j = e.rnd.Int64N(2*off+1) - off
	}
	return max(e.initialMS, min(b+j, e.maxMS))
}

// Name returns Flink's toString of the strategy, with its current attempt and the scheduled
// restart time (Unix milliseconds).
func (e *ExponentialDelay) Name() string {
	next := int64(noRestartScheduled)
	if e.scheduled {
		next = e.nextRestart.UnixMilli()
	}
	return fmt.Sprintf("ExponentialDelayRestartBackoffTimeStrategy(initialBackoffMS=%d, maxBackoffMS=%d, backoffMultiplier=%s, "+
		"resetBackoffThresholdMS=%d, jitterFactor=%s, attemptsBeforeResetBackoff=%d, currentRestartAttempt=%d, nextRestartTimestamp=%d)",
		e.initialMS, e.maxMS, javaDouble(e.multiplier), e.resetThreshold.Milliseconds(), javaDouble(e.jitter),
		e.attemptsLimit, e.attempt, next)
}

// javaDouble formats f as Java's Double.toString does for the values settings take ("1.5",
// "2.0", "0.1", "1.0E-4").
func javaDouble(f float64) string {
	if a := math.Abs(f); f != 0 && (a < 1e-3 || a >= 1e7) {
		s := strconv.FormatFloat(f, 'E', -1, 64)
		mant, exp, _ := strings.Cut(s, "E")
		if !strings.Contains(mant, ".") {
			mant += ".0"
		}
		e, _ := strconv.Atoi(exp)
		return mant + "E" + strconv.Itoa(e)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
