package config

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is the value type of a key.
type Kind int

// The kinds of values.
const (
	KindInt Kind = iota
	KindDuration
	KindString
	KindEnum
	// KindFloat is a finite floating-point number ("1.5"), bounded by FloatMin and FloatMax.
	KindFloat
	// KindLimit is a positive count that may be "infinite": Flink's Integer.MAX_VALUE, which
	// is what reading "infinite" (or 2147483647) returns. Read it with Limit, not Int.
	KindLimit
	// KindList is a list of non-empty strings, written as Flink writes lists: separated by
	// ListSeparator ("a;b"), or as a YAML sequence in a config file. Read it with List.
	KindList
)

// ListSeparator separates the elements of a KindList value (Flink's list separator).
const ListSeparator = ";"

// Infinite is the value of a KindLimit key set to "infinite": Flink's Integer.MAX_VALUE.
const Infinite = math.MaxInt32

// Upper bounds of values, checked when a key is set.
const (
	// MaxInt bounds an integer key without a bound of its own: Flink reads integer keys as Java
	// ints, and a count beyond it would wrap where it travels as an int32.
	MaxInt = math.MaxInt32
	// MaxDuration bounds every duration key: a century outlasts any interval or timeout, and
	// leaves room for a sum of two durations (a deadline, a backoff) within time.Duration's
	// ±292 years.
	MaxDuration = 100 * 365 * 24 * time.Hour
	// UpperBoundMaxParallelism bounds parallelism.default and pipeline.max-parallelism:
	// Flink's upper bound of the max parallelism (1 << 15 key groups), state's
	// UpperBoundMaxParallelism.
	UpperBoundMaxParallelism = 1 << 15
	// MaxChannelBuffers bounds the two buffers-per-channel keys: channels are sized by
	// them, at 32 KiB a buffer that is 32 MiB a channel (Flink's default is 2).
	MaxChannelBuffers = 1024
)

// Scope says where a key may be set.
type Scope int

const (
	// ScopeJob keys may be set in a job spec's config, in flinkctl run -D, or in a cluster
	// config file (as the default for every job).
	ScopeJob Scope = iota
	// ScopeProcess keys configure a JobManager or TaskManager process; a job cannot set them.
	ScopeProcess
)

// Option describes one configuration key.
type Option struct {
	Key     string
	Kind    Kind
	Default string // "" means unset (no default)
	Scope   Scope
	Enum    []string // allowed values for KindEnum
	Min     int64    // minimum for KindInt and KindLimit and (in milliseconds) for KindDuration
	// Max is the maximum of a KindInt key; 0 means MaxInt (Flink reads integer keys as Java
	// ints). A KindLimit key is at most Infinite, a KindDuration key at most MaxDuration.
	Max int64
	// FloatMin and FloatMax bound KindFloat values. FloatMin is inclusive unless
	// FloatMinExclusive is set; FloatMax is inclusive, and no upper bound applies unless it is
	// greater than FloatMin.
	FloatMin          float64
	FloatMinExclusive bool
	FloatMax          float64
	Description       string
	// Aliases are other names of the key (Flink's fallback keys): setting one sets the key.
	Aliases []string
}

// Configuration keys. Names are Flink's.
const (
	TaskSlots               = "taskmanager.numberOfTaskSlots"
	HeartbeatInterval       = "heartbeat.interval"
	HeartbeatTimeout        = "heartbeat.timeout"
	SlotRequestTimeout      = "slot.request.timeout"
	ParallelismDefault      = "parallelism.default"
	MaxParallelism          = "pipeline.max-parallelism"
	BufferTimeout           = "execution.buffer-timeout.interval"
	AutoWatermarkInterval   = "pipeline.auto-watermark-interval"
	BuffersPerChannel       = "taskmanager.network.memory.buffers-per-channel"
	MaxBuffersPerChannel    = "taskmanager.network.memory.max-buffers-per-channel"
	PartitionRequestTimeout = "taskmanager.network.partition-request-timeout"
	CheckpointInterval      = "execution.checkpointing.interval"
	CheckpointMode          = "execution.checkpointing.mode"
	CheckpointTimeout       = "execution.checkpointing.timeout"
	CheckpointMinPause      = "execution.checkpointing.min-pause"
	CheckpointMaxConcurrent = "execution.checkpointing.max-concurrent-checkpoints"
	CheckpointTolerable     = "execution.checkpointing.tolerable-failed-checkpoints"
	CheckpointNumRetained   = "execution.checkpointing.num-retained"
	CheckpointDir           = "execution.checkpointing.dir"
	// CheckpointUnaligned turns on unaligned checkpoints; Flink 2.x also names it
	// CheckpointUnalignedAlias.
	CheckpointUnaligned      = "execution.checkpointing.unaligned"
	CheckpointUnalignedAlias = "execution.checkpointing.unaligned.enabled"
	CheckpointAlignedTimeout = "execution.checkpointing.aligned-checkpoint-timeout"
	SavepointDir             = "execution.checkpointing.savepoint-dir"
	StateBackend             = "state.backend.type"
	RestartStrategy          = "restart-strategy.type"
	FailoverStrategy         = "jobmanager.execution.failover-strategy"
	FixedDelayAttempts       = "restart-strategy.fixed-delay.attempts"
	FixedDelayDelay          = "restart-strategy.fixed-delay.delay"
	FailureRateMaxFailures   = "restart-strategy.failure-rate.max-failures-per-interval"
	FailureRateInterval      = "restart-strategy.failure-rate.failure-rate-interval"
	FailureRateDelay         = "restart-strategy.failure-rate.delay"
	ExpDelayInitialBackoff   = "restart-strategy.exponential-delay.initial-backoff"
	ExpDelayMaxBackoff       = "restart-strategy.exponential-delay.max-backoff"
	ExpDelayMultiplier       = "restart-strategy.exponential-delay.backoff-multiplier"
	ExpDelayResetThreshold   = "restart-strategy.exponential-delay.reset-backoff-threshold"
	ExpDelayJitter           = "restart-strategy.exponential-delay.jitter-factor"
	ExpDelayAttempts         = "restart-strategy.exponential-delay.attempts-before-reset-backoff"
	ExceptionHistorySize     = "web.exception-history-size"
	JobStoreExpiration       = "jobstore.expiration-time"
	JobStoreCapacity         = "jobstore.max-capacity"

	SSLInternalEnabled = "security.ssl.internal.enabled"
	SSLInternalCert    = "security.ssl.internal.cert"
	SSLInternalKey     = "security.ssl.internal.key"
	SSLInternalCA      = "security.ssl.internal.ca"
	SSLRestEnabled     = "security.ssl.rest.enabled"
	SSLRestCert        = "security.ssl.rest.cert"
	SSLRestKey         = "security.ssl.rest.key"
	SSLRestCA          = "security.ssl.rest.ca"
	SSLRestClientAuth  = "security.ssl.rest.authentication-enabled"
	AuthTokenFile      = "security.auth.token-file"
	S3Endpoint         = "s3.endpoint"
	S3AccessKey        = "s3.access-key"
	S3SecretKey        = "s3.secret-key"
	S3PathStyleAccess  = "s3.path.style.access"
	S3Region           = "s3.region"
	RPCReflection      = "security.rpc.reflection.enabled"
	// AllowedPaths confines the local paths jobs name (see the option's description).
	AllowedPaths = "io.allowed-paths"

	MetricsPort     = "metrics.reporter.prom.port"
	RestPort        = "rest.port"
	RestBindAddress = "rest.bind-address"
)

// Default metrics ports (Flink's): a JobManager's, and the range a TaskManager takes the first
// free port of, so that several share a host.
const (
	DefaultJobManagerMetricsPort  = "9249"
	DefaultTaskManagerMetricsPort = "9250-9260"
)

// MaxTaskSlots is the most slots a TaskManager may offer (taskmanager.numberOfTaskSlots), and
// the most a JobManager accepts in a registration: every slot is bookkeeping on the JobManager
// and a share of the TaskManager's memory and cores, and a machine runs far fewer subtasks than
// this well. A registration is network input, so its slot count must be bounded before the
// JobManager sizes anything by it.
const MaxTaskSlots = 1024

// options is the registry of every key goflink understands.
var options = []Option{
	{Key: MetricsPort, Kind: KindString, Scope: ScopeProcess,
		Description: "Port of the Prometheus metrics (/metrics): a port, a range lo-hi whose first free port is taken, or 0 for any free one; on the RPC address's host. Default: JobManager 9249, TaskManager 9250-9260."},
	{Key: RestPort, Kind: KindString, Default: "8081", Scope: ScopeProcess,
		Description: "Port of the JobManager's web dashboard and JSON API: a port, a range lo-hi, or 0 for any free one."},
	{Key: RestBindAddress, Kind: KindString, Scope: ScopeProcess,
		Description: "Host the web dashboard listens on (default: the host of the JobManager's RPC address)."},
	{Key: TaskSlots, Kind: KindInt, Default: "1", Scope: ScopeProcess, Min: 1, Max: MaxTaskSlots,
		Description: "Slots a TaskManager offers (at most 1024); one slot holds one subtask of each operator of a job."},
	{Key: HeartbeatInterval, Kind: KindDuration, Default: "1 s", Scope: ScopeProcess, Min: 1,
		Description: "How often a TaskManager heartbeats the JobManager (Flink: 10 s)."},
	{Key: HeartbeatTimeout, Kind: KindDuration, Default: "5 s", Scope: ScopeProcess, Min: 1,
		Description: "Silence after which the JobManager declares a TaskManager lost (Flink: 50 s)."},
	{Key: SlotRequestTimeout, Kind: KindDuration, Default: "5 min", Scope: ScopeJob, Min: 1,
		Description: "How long a job waits for enough free slots before it fails."},
	{Key: ParallelismDefault, Kind: KindInt, Default: "1", Scope: ScopeJob, Min: 1, Max: UpperBoundMaxParallelism,
		Description: "Parallelism of operators when neither the spec nor flinkctl run -p sets one."},
	{Key: MaxParallelism, Kind: KindInt, Default: "-1", Scope: ScopeJob, Min: -1, Max: UpperBoundMaxParallelism,
		Description: "Number of key groups of keyed operators; -1 derives it from the parallelism as Flink does."},
	{Key: BufferTimeout, Kind: KindDuration, Default: "100 ms", Scope: ScopeJob, Min: 0,
		Description: "Longest time a partly filled network buffer waits before it is sent; 0 flushes after every record batch."},
	{Key: AutoWatermarkInterval, Kind: KindDuration, Default: "200 ms", Scope: ScopeJob, Min: 1,
		Description: "How often watermark generators (a source's watermark, the watermark operator) emit their watermark."},
	{Key: BuffersPerChannel, Kind: KindInt, Default: "4", Scope: ScopeProcess, Min: 1, Max: MaxChannelBuffers,
		Description: "Credits (32 KiB network buffers) a consumer grants each input channel."},
	{Key: MaxBuffersPerChannel, Kind: KindInt, Default: "4", Scope: ScopeProcess, Min: 1, Max: MaxChannelBuffers,
		Description: "Buffers a producer may queue per output channel before the task blocks (backpressure); an aligned barrier waits behind them."},
	{Key: PartitionRequestTimeout, Kind: KindDuration, Default: "10 s", Scope: ScopeProcess, Min: 1,
		Description: "How long a consumer keeps trying to reach a producer's result partition."},
	{Key: CheckpointInterval, Kind: KindDuration, Scope: ScopeJob, Min: 10,
		Description: "Interval of periodic checkpoints; unset disables checkpointing (at-most-once)."},
	{Key: CheckpointMode, Kind: KindEnum, Default: "EXACTLY_ONCE", Scope: ScopeJob, Enum: []string{"EXACTLY_ONCE", "AT_LEAST_ONCE"},
		Description: "EXACTLY_ONCE aligns barriers; AT_LEAST_ONCE tracks them without blocking (duplicates after a restore)."},
	{Key: CheckpointTimeout, Kind: KindDuration, Default: "10 min", Scope: ScopeJob, Min: 10,
		Description: "A checkpoint that takes longer is aborted."},
	{Key: CheckpointMinPause, Kind: KindDuration, Default: "0 ms", Scope: ScopeJob, Min: 0,
		Description: "Minimal pause between the end of one checkpoint and the start of the next."},
	{Key: CheckpointMaxConcurrent, Kind: KindInt, Default: "1", Scope: ScopeJob, Min: 1,
		Description: "Checkpoints that may be in progress at once."},
	{Key: CheckpointTolerable, Kind: KindInt, Default: "0", Scope: ScopeJob, Min: 0,
		Description: "Consecutive checkpoint failures tolerated before the job fails over."},
	{Key: CheckpointNumRetained, Kind: KindInt, Default: "1", Scope: ScopeJob, Min: 1,
		Description: "Completed checkpoints retained."},
	{Key: CheckpointUnaligned, Kind: KindEnum, Default: "false", Scope: ScopeJob, Enum: []string{"true", "false"},
		Aliases:     []string{CheckpointUnalignedAlias},
		Description: "Unaligned checkpoints: barriers overtake the buffers in flight, which are persisted with the checkpoint; needs EXACTLY_ONCE and max-concurrent-checkpoints 1. Savepoints are always aligned."},
	{Key: CheckpointAlignedTimeout, Kind: KindDuration, Default: "0 ms", Scope: ScopeJob, Min: 0,
		Description: "With unaligned checkpoints: 0 takes every checkpoint unaligned; a positive duration starts each aligned and switches it to unaligned once it has run that long since its trigger."},
	{Key: CheckpointDir, Kind: KindString, Scope: ScopeJob,
		Description: "Directory for checkpoint data and metadata, laid out as <dir>/<job-id>/chk-<n>/; every JobManager and TaskManager must reach it (a shared directory across machines, or s3://bucket/prefix with the processes' s3.* keys). Unset: the JobManager's configuration, else <JobManager data dir>/checkpoints (created 0700)."},
	{Key: SavepointDir, Kind: KindString, Scope: ScopeJob,
		Description: "Default directory of savepoints (flinkctl savepoint and stop without a directory), each in its own savepoint-<job>-<random>/ under it; every JobManager and TaskManager must reach it. Unset: a savepoint needs a directory."},
	{Key: StateBackend, Kind: KindEnum, Default: "hashmap", Scope: ScopeJob, Enum: []string{"hashmap", "bbolt"},
		Description: "Keyed state backend: hashmap (in memory) or bbolt (on local disk, snapshots from a read transaction while processing continues)."},
	{Key: FailoverStrategy, Kind: KindEnum, Default: "region", Scope: ScopeJob, Enum: []string{"full", "region"},
		Description: "Which tasks a task failure restarts: full (all) or region (the failed task's pipelined region); global failures restart all."},
	{Key: RestartStrategy, Kind: KindEnum, Scope: ScopeJob,
		Enum: []string{"none", "disable", "off", "fixed-delay", "fixeddelay", "failure-rate", "failurerate", "exponential-delay", "exponentialdelay"},
		Description: "Restart strategy: none (disable, off), fixed-delay, failure-rate or exponential-delay (also written without the dash). " +
			"Unset: exponential-delay with its built-in defaults when checkpointing is on (configured exponential-delay.* values are ignored), none when off. " +
			"A type set by the job wins over the cluster config's, and the strategy's parameters are read only from the config that set the type."},
	{Key: FixedDelayAttempts, Kind: KindInt, Default: "1", Scope: ScopeJob, Min: 0,
		Description: "Restarts fixed-delay allows before the job fails; every task failure counts, however close together."},
	{Key: FixedDelayDelay, Kind: KindDuration, Default: "1 s", Scope: ScopeJob, Min: 0,
		Description: "Delay before each restart of fixed-delay."},
	{Key: FailureRateMaxFailures, Kind: KindInt, Default: "1", Scope: ScopeJob, Min: 1,
		Description: "Failures failure-rate tolerates within one failure-rate-interval; one more within the interval fails the job."},
	{Key: FailureRateInterval, Kind: KindDuration, Default: "1 min", Scope: ScopeJob, Min: 1,
		Description: "Time window over which failure-rate counts failures."},
	{Key: FailureRateDelay, Kind: KindDuration, Default: "1 s", Scope: ScopeJob, Min: 0,
		Description: "Delay before each restart of failure-rate."},
	{Key: ExpDelayInitialBackoff, Kind: KindDuration, Default: "1 s", Scope: ScopeJob, Min: 1,
		Description: "First (and smallest) restart delay of exponential-delay; at most max-backoff."},
	{Key: ExpDelayMaxBackoff, Kind: KindDuration, Default: "1 min", Scope: ScopeJob, Min: 1,
		Description: "Largest restart delay of exponential-delay."},
	{Key: ExpDelayMultiplier, Kind: KindFloat, Default: "1.5", Scope: ScopeJob, FloatMin: 1, FloatMinExclusive: true,
		Description: "Factor by which each new restart attempt of exponential-delay multiplies the delay; greater than 1."},
	{Key: ExpDelayResetThreshold, Kind: KindDuration, Default: "1 h", Scope: ScopeJob, Min: 1,
		Description: "A failure this long after the scheduled time of the previous restart (the job ran that long) resets exponential-delay's delay and attempt count."},
	{Key: ExpDelayJitter, Kind: KindFloat, Default: "0.1", Scope: ScopeJob, FloatMin: 0, FloatMax: 1,
		Description: "Random spread of exponential-delay's delays, in [0, 1]: each delay moves by up to ±factor × its value (within initial-backoff and max-backoff)."},
	{Key: JobStoreExpiration, Kind: KindInt, Default: "3600", Scope: ScopeProcess, Min: 1,
		Description: "Seconds after which the JobManagers forget an ended job (finished, failed or canceled) and delete its checkpoint directory, except snapshots still in use (savepoints, a snapshot a job was started from without claim, checkpoints another job restores from)."},
	{Key: JobStoreCapacity, Kind: KindLimit, Default: "1000", Scope: ScopeProcess, Min: 1,
		Description: "Ended jobs the JobManagers keep at most; beyond it the oldest ended are forgotten first, as at expiration. A number or infinite (2147483647, Flink's default: goflink keeps ended jobs in the replicated state of every JobManager)."},
	{Key: ExceptionHistorySize, Kind: KindInt, Default: "16", Scope: ScopeProcess, Min: 1,
		Description: "Failures a job's exception history keeps: the newest."},
	{Key: ExpDelayAttempts, Kind: KindLimit, Default: "infinite", Scope: ScopeJob, Min: 1,
		Description: "Restart attempts exponential-delay allows before the job fails, counted since the last reset; failures merged into a pending restart do not count. A number or infinite (2147483647)."},
	{Key: SSLInternalEnabled, Kind: KindEnum, Default: "false", Scope: ScopeProcess, Enum: []string{"true", "false"},
		Description: "Mutual TLS on every connection between cluster processes: JobManager and TaskManager RPCs, the data exchange and Raft. Needs security.ssl.internal.cert, .key and .ca."},
	{Key: SSLInternalCert, Kind: KindString, Scope: ScopeProcess,
		Description: "PEM certificate (chain) every cluster process presents, as server and as client (extended key usages serverAuth and clientAuth); reloaded when the file changes."},
	{Key: SSLInternalKey, Kind: KindString, Scope: ScopeProcess,
		Description: "PEM private key of security.ssl.internal.cert; reloaded when the file changes."},
	{Key: SSLInternalCA, Kind: KindString, Scope: ScopeProcess,
		Description: "PEM CA certificate(s) a cluster process's peer certificate must chain to (host names are not checked, as in Flink); reloaded when the file changes."},
	{Key: SSLRestEnabled, Kind: KindEnum, Default: "false", Scope: ScopeProcess, Enum: []string{"true", "false"},
		Description: "TLS for clients (flinkctl, grpcurl) on the JobManager's RPC port, with security.ssl.rest.cert and .key; needs security.ssl.internal.enabled (the port serves cluster processes too). Without it, the port serves clients with the internal certificate when internal TLS is on."},
	{Key: SSLRestCert, Kind: KindString, Scope: ScopeProcess,
		Description: "PEM certificate (chain) the JobManager presents to clients; it must name the host clients dial. Reloaded when the file changes."},
	{Key: SSLRestKey, Kind: KindString, Scope: ScopeProcess,
		Description: "PEM private key of security.ssl.rest.cert; reloaded when the file changes."},
	{Key: SSLRestCA, Kind: KindString, Scope: ScopeProcess,
		Description: "PEM CA certificate(s) client certificates must chain to (with security.ssl.rest.authentication-enabled)."},
	{Key: SSLRestClientAuth, Kind: KindEnum, Default: "false", Scope: ScopeProcess, Enum: []string{"true", "false"},
		Description: "Accept client certificates that chain to security.ssl.rest.ca as authentication for client RPCs (besides the token)."},
	{Key: AuthTokenFile, Kind: KindString, Scope: ScopeProcess,
		Description: "File holding the bearer token every client RPC must carry (flinkctl --token-file, FLINKCTL_TOKEN); reloaded when it changes. Unset: client RPCs need no token."},
	{Key: RPCReflection, Kind: KindEnum, Default: "true", Scope: ScopeProcess, Enum: []string{"true", "false"},
		Description: "Serve gRPC server reflection on the JobManager's RPC port and the TaskManagers' ports (for grpcurl); like every client RPC it needs the token or a certificate when those are configured."},
	{Key: AllowedPaths, Kind: KindList, Scope: ScopeProcess,
		Description: "Directories under which the local paths a job names must lie (file sink paths, Kafka ssl.*.location files, the job's own execution.checkpointing.dir and savepoint-dir, savepoint and restore paths of requests), after symlinks are resolved; separated by ;. " +
			"The JobManager checks them at submit and each TaskManager again before a task opens them. Unset: the process's working directory, execution.checkpointing.dir and execution.checkpointing.savepoint-dir."},
	// The s3.* keys are cluster settings, as in Flink (its S3 file systems are configured per
	// process, not per job): a job cannot point the cluster's credentials elsewhere.
	{Key: S3Endpoint, Kind: KindString, Scope: ScopeProcess,
		Description: "S3 server of s3:// locations: host[:port] (HTTPS) or http(s)://host[:port]. Unset: AWS (s3.amazonaws.com)."},
	{Key: S3AccessKey, Kind: KindString, Scope: ScopeProcess,
		Description: "Access key of s3:// locations. Unset (with s3.secret-key): AWS_ACCESS_KEY_ID."},
	{Key: S3SecretKey, Kind: KindString, Scope: ScopeProcess,
		Description: "Secret key of s3:// locations; never logged nor shown in errors. Unset (with s3.access-key): AWS_SECRET_ACCESS_KEY."},
	{Key: S3PathStyleAccess, Kind: KindEnum, Default: "false", Scope: ScopeProcess, Enum: []string{"true", "false"},
		Description: "Address buckets by path (http://endpoint/bucket), as most S3-compatible servers need, instead of by host name (http://bucket.endpoint)."},
	{Key: S3Region, Kind: KindString, Scope: ScopeProcess,
		Description: "Region of the buckets of s3:// locations. Unset: AWS_REGION, else asked of the server."},
}

var byKey = func() map[string]*Option {
	m := make(map[string]*Option, len(options))
	for i := range options {
		m[options[i].Key] = &options[i]
		for _, a := range options[i].Aliases {
			m[a] = &options[i]
		}
	}
	return m
}()

// normalize validates value for o and returns its canonical form.
func (o *Option) normalize(value string) (string, error) {
	v := strings.TrimSpace(value)
	switch o.Kind {
	case KindInt:
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil || fmt.Sprint(n) != strings.TrimPrefix(v, "+") {
			return "", fmt.Errorf("%q is not an integer", value)
		}
		if n < o.Min {
			return "", fmt.Errorf("%d is below the minimum %d", n, o.Min)
		}
		if hi := cmp.Or(o.Max, MaxInt); n > hi {
			return "", fmt.Errorf("%d is above the maximum %d", n, hi)
		}
		return fmt.Sprint(n), nil
	case KindDuration:
		d, err := ParseDuration(v)
		if err != nil {
			return "", err
		}
		if d < time.Duration(o.Min)*time.Millisecond {
			return "", fmt.Errorf("%v is below the minimum %v", d, time.Duration(o.Min)*time.Millisecond)
		}
		if d > MaxDuration {
			return "", fmt.Errorf("%s is above the maximum %s", FormatDuration(d), FormatDuration(MaxDuration))
		}
		return FormatDuration(d), nil
	case KindEnum:
		if i := slices.IndexFunc(o.Enum, func(e string) bool { return strings.EqualFold(v, e) }); i >= 0 {
			return o.Enum[i], nil
		}
		return "", fmt.Errorf("%q is not one of %s", value, strings.Join(o.Enum, ", "))
	case KindFloat:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return "", fmt.Errorf("%q is not a finite number", value)
		}
		if o.FloatMinExclusive && f <= o.FloatMin {
			return "", fmt.Errorf("%v must be greater than %v", f, o.FloatMin)
		}
		if f < o.FloatMin {
			return "", fmt.Errorf("%v is below the minimum %v", f, o.FloatMin)
		}
		if o.FloatMax > o.FloatMin && f > o.FloatMax {
			return "", fmt.Errorf("%v is above the maximum %v", f, o.FloatMax)
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case KindLimit:
		if strings.EqualFold(v, "infinite") {
			return "infinite", nil
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(v, "+"), 10, 64)
		if err != nil {
			return "", fmt.Errorf("%q is not an integer or infinite", value)
		}
		if n < o.Min {
			return "", fmt.Errorf("%d is below the minimum %d", n, o.Min)
		}
		if n > Infinite {
			return "", fmt.Errorf("%d is above the maximum %d (use infinite)", n, Infinite)
		}
		if n == Infinite {
			return "infinite", nil
		}
		return strconv.FormatInt(n, 10), nil
	}
	if v == "" {
		return "", fmt.Errorf("value is empty")
	}
	if o.Kind == KindList {
		elems := strings.Split(v, ListSeparator)
		for i, e := range elems {
			if elems[i] = strings.TrimSpace(e); elems[i] == "" {
				return "", fmt.Errorf("element %d of %q is empty (elements are separated by %s)", i+1, value, ListSeparator)
			}
		}
		return strings.Join(elems, ListSeparator), nil
	}
	return v, nil
}

// List returns a KindList key's elements (its default's when unset; nil when it has none).
func (c *Config) List(key string) []string {
	v := c.raw(key, KindList)
	if v == "" {
		return nil
	}
	return strings.Split(v, ListSeparator)
}

// Float returns a float key's value (its default when unset).
func (c *Config) Float(key string) float64 {
	f, _ := strconv.ParseFloat(c.raw(key, KindFloat), 64)
	return f
}

// Limit returns a KindLimit key's value (its default when unset); "infinite" reads as
// Infinite.
func (c *Config) Limit(key string) int {
	v := c.raw(key, KindLimit)
	if v == "infinite" {
		return Infinite
	}
	n, _ := strconv.Atoi(v)
	return n
}
