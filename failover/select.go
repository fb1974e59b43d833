package failover

import (
	"fmt"
	"slices"
	"strings"

	"github.com/goflink/goflink/config"
)

// NewRestartStrategy chooses a job's restart strategy by Flink's rule
// (RestartBackoffTimeStrategyFactoryLoader):
//
//  1. restart-strategy.type set in the job's config (job), else
//  2. restart-strategy.type set in the cluster's config (cluster), else
//  3. exponential-delay with its built-in defaults if checkpointing is on, none if it is off.
//
// A strategy's parameters are read only from the config that set the type: with a job-level
// type the cluster's restart-strategy.* parameters are ignored, and with no type at all the
// configured exponential-delay.* values are ignored. Keys unset in the chosen layer take
// their defaults. Either config may be nil (empty). rnd is the jitter source of
// exponential-delay (nil: math/rand/v2's global source). Errors name the offending key.
func NewRestartStrategy(job, cluster *config.Config, checkpointing bool, rnd Rand) (RestartStrategy, error) {
	for _, layer := range []*config.Config{job, cluster} {
		if layer != nil && layer.IsSet(config.RestartStrategy) {
			return fromLayer(layer, rnd)
		}
	}
	if checkpointing {
		return NewExponentialDelay(DefaultExponentialDelayOptions(), rnd)
	}
	return NoRestart{}, nil
}

// Unread returns the restart-strategy parameters a config layer sets without setting
// restart-strategy.type, sorted: no strategy reads them (the type's layer supplies the
// parameters, see NewRestartStrategy), so setting them is a mistake to report.
func Unread(c *config.Config) []string {
	if c == nil || c.IsSet(config.RestartStrategy) {
		return nil
	}
	var keys []string
	for k := range c.Map() {
		if strings.HasPrefix(k, "restart-strategy.") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// fromLayer builds the strategy named by c's restart-strategy.type from c's parameters.
func fromLayer(c *config.Config, rnd Rand) (RestartStrategy, error) {
	t := c.String(config.RestartStrategy)
	switch t {
	case "none", "disable", "off":
		return NoRestart{}, nil
	case "fixed-delay", "fixeddelay":
		return NewFixedDelay(c.Int(config.FixedDelayAttempts), c.Duration(config.FixedDelayDelay))
	case "failure-rate", "failurerate":
		return NewFailureRate(c.Int(config.FailureRateMaxFailures), c.Duration(config.FailureRateInterval), c.Duration(config.FailureRateDelay))
	case "exponential-delay", "exponentialdelay":
		return NewExponentialDelay(exponentialDelayOptions(c), rnd)
	}
	return nil, fmt.Errorf("%s: unknown restart strategy %q", config.RestartStrategy, t)
}
