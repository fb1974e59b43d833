package operator

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaConnectionProperties are the connection settings both kafka roles accept, by
// librdkafka's names: security.protocol PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
// sasl.mechanism PLAIN (default), SCRAM-SHA-256 or SCRAM-SHA-512 with sasl.username and
// sasl.password; ssl.ca.location (PEM CA certificates; default: the system's), and
// ssl.certificate.location with ssl.key.location (PEM client certificate and key). The files
// are read on the TaskManagers when the operator opens.
var KafkaConnectionProperties = []string{"security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
	"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"}

// KafkaSourceProperties are the client properties the Kafka source understands.
var KafkaSourceProperties = append([]string{"client.id", "fetch.max.wait.ms", "partition.discovery.interval.ms"}, KafkaConnectionProperties...)

// KafkaSinkProperties are the Kafka producer settings the kafka sink's properties may set.
var KafkaSinkProperties = append([]string{"client.id", "compression.type", "linger.ms"}, KafkaConnectionProperties...)

// KafkaPropertyError is a bad or unknown Kafka client property.
type KafkaPropertyError struct {
	Property string
	Problem  string
}

func (e *KafkaPropertyError) Error() string { return "property " + e.Property + ": " + e.Problem }

// CheckKafkaProperties validates the properties of a kafka source (sink false) or sink
// without connecting or reading files. Problems come in property order.
func CheckKafkaProperties(props map[string]string, sink bool) []*KafkaPropertyError {
	_, _, problems := parseKafkaProperties(props, sink)
	return problems
}

// kafkaSecurity is the parsed connection security of a client.
type kafkaSecurity struct {
	tls, sasl             bool
	mechanism             string
	username, password    string
	ca, certFile, keyFile string
}

// parseKafkaProperties turns the properties into client options and the connection security.
func parseKafkaProperties(props map[string]string, sink bool) ([]kgo.Opt, kafkaSecurity, []*KafkaPropertyError) {
	var (
		opts        []kgo.Opt
		sec         kafkaSecurity
		problems    []*KafkaPropertyError
		protocolBad bool
	)
	bad := func(key, format string, args ...any) {
		problems = append(problems, &KafkaPropertyError{Property: key, Problem: fmt.Sprintf(format, args...)})
	}
	known := KafkaSourceProperties
	if sink {
		known = KafkaSinkProperties
	}
	for _, k := range slices.Sorted(maps.Keys(props)) {
		v := props[k]
		switch {
		case !slices.Contains(known, k):
			bad(k, "unsupported (supported: %s)", strings.Join(known, ", "))
		case k == "client.id":
			opts = append(opts, kgo.ClientID(v))
		case k == "fetch.max.wait.ms":
			ms, err := strconv.Atoi(v)
			if err != nil || ms <= 0 {
				bad(k, "want a positive integer (milliseconds), got %q", v)
				continue
			}
			opts = append(opts, kgo.FetchMaxWait(time.Duration(ms)*time.Millisecond))
		case k == "partition.discovery.interval.ms":
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				bad(k, "want an integer (milliseconds; 0 or less turns discovery off), got %q", v)
			}
		case k == "linger.ms":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms < 0 {
				bad(k, "want a non-negative integer (milliseconds), got %q", v)
				continue
			}
			opts = append(opts, kgo.ProducerLinger(time.Duration(ms)*time.Millisecond))
		case k == "compression.type":
			c, ok := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
				"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}[v]
			if !ok {
				bad(k, "unknown %q (want none, gzip, snappy, lz4 or zstd)", v)
				continue
			}
			opts = append(opts, kgo.ProducerBatchCompression(c))
		case k == "security.protocol":
			switch strings.ToUpper(v) {
			case "PLAINTEXT":
			case "SSL":
				sec.tls = true
			case "SASL_PLAINTEXT":
				sec.sasl = true
			case "SASL_SSL":
				sec.tls, sec.sasl = true, true
			default:
				bad(k, "unknown %q (want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", v)
				protocolBad = true
			}
		case k == "sasl.mechanism":
			sec.mechanism = strings.ToUpper(v)
			if !slices.Contains([]string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, sec.mechanism) {
				bad(k, "unknown %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", v)
			}
		case k == "sasl.username":
			sec.username = v
		case k == "sasl.password":
			sec.password = v
		case k == "ssl.ca.location":
			sec.ca = v
		case k == "ssl.certificate.location":
			sec.certFile = v
		case k == "ssl.key.location":
			sec.keyFile = v
		}
	}
	if protocolBad {
		return opts, sec, problems // the combinations below depend on the protocol
	}
	// The combinations, once the protocol is known.
	for _, k := range []string{"sasl.mechanism", "sasl.username", "sasl.password"} {
		if _, has := props[k]; has && !sec.sasl {
			bad(k, "only used with security.protocol SASL_PLAINTEXT or SASL_SSL")
		}
	}
	for _, k := range []string{"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"} {
		if _, has := props[k]; has && !sec.tls {
			bad(k, "only used with security.protocol SSL or SASL_SSL")
		}
	}
	if sec.sasl {
		if sec.mechanism == "" {
			sec.mechanism = "PLAIN"
		}
		if sec.username == "" {
			bad("sasl.username", "needed with security.protocol %s", props["security.protocol"])
		}
		if sec.password == "" {
			bad("sasl.password", "needed with security.protocol %s", props["security.protocol"])
		}
	}
	if sec.tls && (sec.certFile == "") != (sec.keyFile == "") {
		bad("ssl.certificate.location", "a client certificate needs both ssl.certificate.location and ssl.key.location")
	}
	return opts, sec, problems
}

// opts returns the TLS dialer and SASL mechanism of the connection, reading the PEM files.
func (s kafkaSecurity) opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if s.tls {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.ca != "" {
			pem, err := os.ReadFile(s.ca)
			if err != nil {
				return nil, fmt.Errorf("property ssl.ca.location: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("property ssl.ca.location: no PEM certificate in %s", s.ca)
			}
		}
		if s.certFile != "" {
			cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
			if err != nil {
				return nil, fmt.Errorf("properties ssl.certificate.location and ssl.key.location: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if s.sasl {
		var m sasl.Mechanism
		switch s.mechanism {
		case "PLAIN":
			m = plain.Auth{User: s.username, Pass: s.password}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: s.username, Pass: s.password}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: s.username, Pass: s.password}.AsSha512Mechanism()
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// kafkaConnOpts are the seed brokers, the role's client options and the connection security
// of the properties; the first problem is the error.
func kafkaConnOpts(role string, brokers []string, props map[string]string, sink bool) ([]kgo.Opt, error) {
	opts, sec, problems := parseKafkaProperties(props, sink)
	if len(problems) > 0 {
		return nil, fmt.Errorf("kafka %s: %w", role, problems[0])
	}
	secOpts, err := sec.opts()
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", role, err)
	}
	return append(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...), secOpts...), nil
}
