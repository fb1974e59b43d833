// Package kafkaspec describes the Kafka connector's operator type "kafka" — a source without
// inputs, a sink with them — as job specs write it: its fields, how they are checked, the
// configuration its runtime gets and the records the source emits. It does not link a Kafka
// client: JobManagers register Type to check specs, TaskManagers register the runtime of
// package kafka (the parent directory), which builds on it.
package kafkaspec

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// Type is the "kafka" operator type as JobManagers check it (it has no runtime here).
var Type = func() operator.Type {
	sink := operator.Define(operator.Type{Name: "kafka", Role: operator.RoleSink, Fields: sinkFields}, planSink, nil)
	t := operator.Define(operator.Type{Name: "kafka", Role: operator.RoleSource, Fields: sourceFields}, planSource, nil)
	t.WithInputs = &sink
	return t
}()

// The spec fields of the type in its two roles.
var (
	sourceFields = []string{"brokers", "topic", "topics", "topic-pattern", "start", "start-timestamp",
		"format", "schema", "rate", "isolation", "group-id", "properties"}
	sinkFields = []string{"brokers", "topic", "format", "key", "value", "headers", "delivery-guarantee",
		"transaction-timeout", "transactional-id-prefix", "properties"}
)

// SourceConfig is the configuration of a Kafka source. Partitions are assigned to subtasks
// deterministically and their offsets are kept in checkpointed operator state (not in
// consumer groups); committing them to Kafka after a checkpoint completes is only a progress
// signal.
type SourceConfig struct {
	Brokers []string `json:"brokers"`
	// Topics, or TopicPattern (a regular expression), names what to read.
	Topics       []string `json:"topics,omitempty"`
	TopicPattern string   `json:"topic_pattern,omitempty"`
	// Start is "earliest", "latest", "committed" (the group's committed offsets, else
	// earliest) or "timestamp" (StartTimestampMs). Used only without restored offsets.
	Start            string `json:"start"`
	StartTimestampMs int64  `json:"start_timestamp_ms,omitempty"`
	// Format is "raw" (key and value as strings) or "json" (the value is a JSON object decoded
	// into Schema's fields).
	Format string         `json:"format"`
	Schema []record.Field `json:"schema,omitempty"`
	// Rate limits records per second over the whole source (0: unlimited).
	Rate float64 `json:"rate,omitempty"`
	// Isolation is "read_committed" or "read_uncommitted".
	Isolation string `json:"isolation"`
	// GroupID is the consumer group offsets are committed to after completed checkpoints.
	GroupID    string            `json:"group_id"`
	Properties map[string]string `json:"properties,omitempty"`
}

// SinkConfig is the configuration of a Kafka sink, which writes to one topic.
type SinkConfig struct {
	Brokers []string `json:"brokers"`
	Topic   string   `json:"topic"`
	// Format is "json" (the row as a JSON object) or "raw" (Value's string).
	Format string `json:"format"`
	// Key, Value and Headers are expressions: the record key (empty: none), the value (format
	// raw) and the headers (a map; empty: none).
	Key     string `json:"key,omitempty"`
	Value   string `json:"value,omitempty"`
	Headers string `json:"headers,omitempty"`
	// DeliveryGuarantee is "exactly-once" (transactions committed on checkpoint completion),
	// "at-least-once" (flush at every checkpoint) or "none".
	DeliveryGuarantee string `json:"delivery_guarantee"`
	// TransactionTimeoutMs is the producers' transaction.timeout.ms (exactly-once), and
	// TransactionalIDPrefix prefixes the pool of transactional IDs.
	TransactionTimeoutMs  int64             `json:"transaction_timeout_ms,omitempty"`
	TransactionalIDPrefix string            `json:"transactional_id_prefix,omitempty"`
	Properties            map[string]string `json:"properties,omitempty"`
}

// Metadata are the fields the source adds to every record besides its data.
var Metadata = []record.Field{
	{Name: "topic", Type: record.String},
	{Name: "partition", Type: record.Int64},
	{Name: "offset", Type: record.Int64},
	{Name: "timestamp", Type: record.Timestamp},
	{Name: "headers", Type: record.Map}, // of a repeated header key, the last value
}

// RawSchema is the output schema of the source with format raw: the key and the value as
// strings (empty when absent), then the metadata fields.
var RawSchema = record.MustSchema(append([]record.Field{
	{Name: "key", Type: record.String},
	{Name: "value", Type: record.String},
}, Metadata...)...)

// JSONSchema is the output schema of the source with format json: the declared fields, then
// the metadata fields.
func JSONSchema(declared []record.Field) (*record.Schema, error) {
	return record.NewSchema(append(slices.Clone(declared), Metadata...)...)
}

// ConnectionProperties are the connection settings both roles accept, by librdkafka's names:
// security.protocol PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL; sasl.mechanism
// PLAIN (default), SCRAM-SHA-256 or SCRAM-SHA-512 with sasl.username and sasl.password;
// ssl.ca.location (PEM CA certificates; default: the system's), and ssl.certificate.location
// with ssl.key.location (PEM client certificate and key). The files are read on the
// TaskManagers when the operator opens.
var ConnectionProperties = []string{"security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
	"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"}

// FileProperties are the connection properties that name files (PEM), which TaskManagers
// read when the operator opens: local paths confined to io.allowed-paths.
var FileProperties = []string{"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"}

// filePaths are the files props names (FileProperties), in that order.
func filePaths(props map[string]string) []operator.LocalPath {
	var out []operator.LocalPath
	for _, k := range FileProperties {
		if v, ok := props[k]; ok {
			out = append(out, operator.LocalPath{Field: "properties." + k, Path: v})
		}
	}
	return out
}

// LocalPaths are the files the source's properties name (operator.PathNamer).
func (c SourceConfig) LocalPaths() []operator.LocalPath { return filePaths(c.Properties) }

// LocalPaths are the files the sink's properties name (operator.PathNamer).
func (c SinkConfig) LocalPaths() []operator.LocalPath { return filePaths(c.Properties) }

// SourceProperties are the client properties the source understands.
var SourceProperties = append([]string{"client.id", "fetch.max.wait.ms", "partition.discovery.interval.ms"}, ConnectionProperties...)

// SinkProperties are the producer settings the sink's properties may set.
var SinkProperties = append([]string{"client.id", "compression.type", "linger.ms"}, ConnectionProperties...)

// DefaultDiscoveryInterval is the default partition discovery interval (Flink's, FLIP-288).
const DefaultDiscoveryInterval = 5 * time.Minute

// PropertyError is a bad or unknown client property.
type PropertyError struct {
	Property string
	Problem  string
}

func (e *PropertyError) Error() string { return "property " + e.Property + ": " + e.Problem }

// Client is what the properties of a source or sink say about its client.
type Client struct {
	ID           string
	FetchMaxWait time.Duration // 0: the client's default
	// Discovery is the source's partition discovery interval (0: off).
	Discovery time.Duration
	Linger    *time.Duration // nil: the client's default
	// Compression is none, gzip, snappy, lz4 or zstd ("": the client's default).
	Compression string
	// TLS and SASL say how to connect (security.protocol).
	TLS, SASL bool
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with Username and Password.
	Mechanism, Username, Password string
	// CA, CertFile and KeyFile are PEM files (ssl.*).
	CA, CertFile, KeyFile string
}

// ParseProperties reads the properties of a source (sink false) or sink without connecting
// or reading files. Problems come in property order.
func ParseProperties(props map[string]string, sink bool) (Client, []*PropertyError) {
	c := Client{Discovery: DefaultDiscoveryInterval}
	var problems []*PropertyError
	bad := func(key, format string, args ...any) {
		problems = append(problems, &PropertyError{Property: key, Problem: fmt.Sprintf(format, args...)})
	}
	known := SourceProperties
	if sink {
		known = SinkProperties
	}
	texts := map[string]*string{"client.id": &c.ID, "sasl.username": &c.Username, "sasl.password": &c.Password,
		"ssl.ca.location": &c.CA, "ssl.certificate.location": &c.CertFile, "ssl.key.location": &c.KeyFile}
	protocolBad := false
	for _, k := range slices.Sorted(maps.Keys(props)) {
		v := props[k]
		switch {
		case !slices.Contains(known, k):
			bad(k, "unsupported (supported: %s)", strings.Join(known, ", "))
		case texts[k] != nil:
			*texts[k] = v
		case k == "fetch.max.wait.ms":
			ms, err := strconv.Atoi(v)
			if err != nil || ms <= 0 {
				bad(k, "want a positive integer (milliseconds), got %q", v)
				continue
			}
			c.FetchMaxWait = time.Duration(ms) * time.Millisecond
		case k == "partition.discovery.interval.ms":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				bad(k, "want an integer (milliseconds; 0 or less turns discovery off), got %q", v)
				continue
			}
			c.Discovery = time.Duration(max(ms, 0)) * time.Millisecond
		case k == "linger.ms":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms < 0 {
				bad(k, "want a non-negative integer (milliseconds), got %q", v)
				continue
			}
			d := time.Duration(ms) * time.Millisecond
			c.Linger = &d
		case k == "compression.type":
			if !slices.Contains([]string{"none", "gzip", "snappy", "lz4", "zstd"}, v) {
				bad(k, "unknown %q (want none, gzip, snappy, lz4 or zstd)", v)
				continue
			}
			c.Compression = v
		case k == "security.protocol":
			switch strings.ToUpper(v) {
			case "PLAINTEXT":
			case "SSL":
				c.TLS = true
			case "SASL_PLAINTEXT":
				c.SASL = true
			case "SASL_SSL":
				c.TLS, c.SASL = true, true
			default:
				bad(k, "unknown %q (want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", v)
				protocolBad = true
			}
		case k == "sasl.mechanism":
			c.Mechanism = strings.ToUpper(v)
			if !slices.Contains([]string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, c.Mechanism) {
				bad(k, "unknown %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", v)
			}
		}
	}
	if protocolBad {
		return c, problems // the combinations below depend on the protocol
	}
	// The combinations, once the protocol is known.
	for _, k := range []string{"sasl.mechanism", "sasl.username", "sasl.password"} {
		if _, has := props[k]; has && !c.SASL {
			bad(k, "only used with security.protocol SASL_PLAINTEXT or SASL_SSL")
		}
	}
	for _, k := range FileProperties {
		if _, has := props[k]; has && !c.TLS {
			bad(k, "only used with security.protocol SSL or SASL_SSL")
		}
	}
	if c.SASL {
		if c.Mechanism == "" {
			c.Mechanism = "PLAIN"
		}
		if c.Username == "" {
			bad("sasl.username", "needed with security.protocol %s", props["security.protocol"])
		}
		if c.Password == "" {
			bad("sasl.password", "needed with security.protocol %s", props["security.protocol"])
		}
	}
	if c.TLS && (c.CertFile == "") != (c.KeyFile == "") {
		bad("ssl.certificate.location", "a client certificate needs both ssl.certificate.location and ssl.key.location")
	}
	return c, problems
}
