package kafkaspec_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// build builds a spec that must be valid.
func build(t *testing.T, spec string) *pb.JobGraph {
	t.Helper()
	g, err := job.Build(job.Request{Spec: []byte(spec)}, job.Env{Operators: operator.MustRegistry(kafkaspec.Type)})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return g
}

// sourceOf and sinkOf decode an operator's configuration.
func sourceOf(t *testing.T, op *pb.Operator) kafkaspec.SourceConfig {
	t.Helper()
	var c kafkaspec.SourceConfig
	if op.GetInputSchema() != nil {
		t.Fatalf("operator %q has an input: not a source", op.GetName())
	}
	if err := json.Unmarshal(op.GetConfig(), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func sinkOf(t *testing.T, op *pb.Operator) kafkaspec.SinkConfig {
	t.Helper()
	var c kafkaspec.SinkConfig
	if op.GetInputSchema() == nil {
		t.Fatalf("operator %q has no input: not a sink", op.GetName())
	}
	if err := json.Unmarshal(op.GetConfig(), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

const kafkaPipeline = `name: kp
config:
  execution.checkpointing.interval: 10s
operators:
  - {name: in, type: kafka, brokers: [localhost:9092, "b2:9093"], topic: events, start: latest, rate: 50}
  - {name: shout, type: map, fields: {k: "key", v: "value", p: "partition"}}
  - {name: out, type: kafka, brokers: localhost:9092, topic: results, key: "k", delivery-guarantee: exactly-once, transaction-timeout: 1 min}
`

func TestKafkaSourceAndSink(t *testing.T) {
	g := build(t, kafkaPipeline)
	ops := g.Vertices[0].Operators
	if len(ops) != 3 {
		t.Fatalf("operators = %d, want 3 chained", len(ops))
	}
	src := sourceOf(t, ops[0])
	if got := strings.Join(src.Brokers, ","); got != "localhost:9092,b2:9093" {
		t.Errorf("brokers = %s", got)
	}
	if src.Start != "latest" || src.Format != "raw" || src.Isolation != "read_committed" || src.Rate != 50 ||
		src.GroupID != "goflink-kp-in" || len(src.Topics) != 1 || src.Topics[0] != "events" {
		t.Errorf("source = %v", src)
	}
	out, _ := record.SchemaFromProto(ops[0].OutputSchema)
	if got := out.String(); got != "{key: string, value: string, topic: string, partition: int64, offset: int64, timestamp: timestamp, headers: map}" {
		t.Errorf("raw schema = %s", got)
	}
	sink := sinkOf(t, ops[2])
	if sink.Topic != "results" || sink.Format != "json" || sink.Key != "k" || sink.DeliveryGuarantee != "exactly-once" ||
		sink.TransactionTimeoutMs != 60000 || sink.TransactionalIDPrefix != "goflink-kp-out" {
		t.Errorf("sink = %v", sink)
	}
	if ops[2].OutputSchema != nil {
		t.Errorf("sink has an output schema")
	}
}

func TestKafkaSourceJSONAndDefaults(t *testing.T) {
	g := build(t, `name: j
operators:
  - name: in
    type: kafka
    brokers: k:9092
    topic-pattern: "orders-.*"
    start: timestamp
    start-timestamp: 2026-01-02T00:00:00Z
    format: json
    schema: {id: int64, amount: float64, who: string, at: timestamp}
    isolation: read_uncommitted
    group-id: g1
    properties: {client.id: me}
  - {name: out, type: kafka, brokers: k:9092, topic: o, format: raw, value: "who"}
`)
	ops := g.Vertices[0].Operators
	src := sourceOf(t, ops[0])
	if src.TopicPattern != "orders-.*" || src.StartTimestampMs != 1767312000000 || src.Format != "json" ||
		src.Isolation != "read_uncommitted" || src.GroupID != "g1" || src.Properties["client.id"] != "me" {
		t.Errorf("source = %v", src)
	}
	out, _ := record.SchemaFromProto(ops[0].OutputSchema)
	if got := out.String(); got != "{id: int64, amount: float64, who: string, at: timestamp, topic: string, partition: int64, offset: int64, timestamp: timestamp, headers: map}" {
		t.Errorf("json schema = %s", got)
	}
	sink := sinkOf(t, ops[1])
	if sink.Format != "raw" || sink.Value != "who" || sink.DeliveryGuarantee != "at-least-once" || sink.TransactionTimeoutMs != 0 {
		t.Errorf("sink = %v", sink)
	}
}

func TestKafkaSourceWithEmptyInputsLaterInSpec(t *testing.T) {
	g := build(t, `name: two
operators:
  - {name: a, type: sequence, from: 1, to: 3}
  - {name: b, type: kafka, inputs: [], brokers: k:1, topics: [x, y], start-timestamp: 5, start: timestamp}
  - {name: m, type: map, inputs: b, fields: {value: "offset"}}
  - {name: o, type: print, inputs: [a, m]}
`)
	var src *kafkaspec.SourceConfig
	for _, v := range g.Vertices {
		for _, op := range v.Operators {
			if op.GetName() == "b" {
				c := sourceOf(t, op)
				src = &c
			}
		}
	}
	if src == nil || len(src.Topics) != 2 || src.StartTimestampMs != 5 {
		t.Fatalf("kafka source = %v", src)
	}
}

func TestKafkaInvalidSpecs(t *testing.T) {
	for _, tc := range []struct {
		name, ops string
		config    string
		want      []string
	}{
		{"source needs brokers and topic", `
  - {name: in, type: kafka}
  - {name: o, type: print}`, "", []string{`operators[0] "in": kafka needs the field "brokers"`, `kafka needs the field "topic" (or "topics" or "topic-pattern")`}},
		{"bad broker", `
  - {name: in, type: kafka, brokers: [ok:1, nope, "h:99999"], topic: t}
  - {name: o, type: print}`, "", []string{`"in".brokers[1]: want host:port, got "nope"`, `"in".brokers[2]: want host:port, got "h:99999"`}},
		{"two topic fields", `
  - {name: in, type: kafka, brokers: k:1, topic: t, topic-pattern: "x"}
  - {name: o, type: print}`, "", []string{`give only one of topic, topic-pattern`}},
		{"bad pattern", `
  - {name: in, type: kafka, brokers: k:1, topic-pattern: "a(("}
  - {name: o, type: print}`, "", []string{`"in".topic-pattern: not a valid regular expression`}},
		{"bad start", `
  - {name: in, type: kafka, brokers: k:1, topic: t, start: beginning}
  - {name: o, type: print}`, "", []string{`"in".start: unknown start "beginning" (want earliest, latest, committed or timestamp)`}},
		{"timestamp without start-timestamp", `
  - {name: in, type: kafka, brokers: k:1, topic: t, start: timestamp}
  - {name: o, type: print}`, "", []string{`start: timestamp needs the field "start-timestamp"`}},
		{"bad start-timestamp", `
  - {name: in, type: kafka, brokers: k:1, topic: t, start: timestamp, start-timestamp: yesterday}
  - {name: o, type: print}`, "", []string{`"in".start-timestamp: want an RFC 3339 time`}},
		{"start-timestamp without timestamp", `
  - {name: in, type: kafka, brokers: k:1, topic: t, start-timestamp: 5}
  - {name: o, type: print}`, "", []string{`"in".start-timestamp: only used with start: timestamp`}},
		{"json needs schema", `
  - {name: in, type: kafka, brokers: k:1, topic: t, format: json}
  - {name: o, type: print}`, "", []string{`format: json needs the field "schema"`}},
		{"bad schema", `
  - {name: in, type: kafka, brokers: k:1, topic: t, format: json, schema: {a: integer, offset: int64, "b-c": string}}
  - {name: o, type: print}`, "", []string{`"in".schema.a: unknown type "integer"`, `"in".schema.offset: "offset" is a metadata field`, `"in".schema.b-c: field names must be identifiers`}},
		{"schema with raw", `
  - {name: in, type: kafka, brokers: k:1, topic: t, schema: {a: int64}}
  - {name: o, type: print}`, "", []string{`"in".schema: only used with format: json`}},
		{"bad format, rate, isolation, property", `
  - {name: in, type: kafka, brokers: k:1, topic: t, format: avro, rate: -1, isolation: serializable, properties: {sasl.jaas.config: x}}
  - {name: o, type: print}`, "", []string{`"in".format: unknown format "avro" (want raw or json)`, `"in".rate: must not be negative`, `"in".isolation: unknown isolation "serializable"`, `"in".properties: unknown field "sasl.jaas.config"`}},
		{"bad connection security", `
  - name: in
    type: kafka
    brokers: k:1
    topic: t
    properties:
      security.protocol: SASL_SSL
      sasl.mechanism: GSSAPI
      ssl.certificate.location: /c.pem
  - {name: o, type: print}`, "",
			[]string{`line 9: operators[0] "in".properties.sasl.mechanism: unknown "GSSAPI" (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)`,
				`line 7: operators[0] "in".properties.sasl.username: needed with security.protocol SASL_SSL`, `"in".properties.sasl.password: needed with security.protocol SASL_SSL`,
				`line 10: operators[0] "in".properties.ssl.certificate.location: a client certificate needs both ssl.certificate.location and ssl.key.location`}},
		{"unknown security protocol", `
  - {name: n, type: sequence, from: 1}
  - {name: o, type: kafka, brokers: k:1, topic: u, properties: {security.protocol: TLS, ssl.ca.location: /ca.pem}}`, "",
			[]string{`"o".properties.security.protocol: unknown "TLS" (want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)`}},
		{"settings of another protocol", `
  - {name: n, type: sequence, from: 1}
  - {name: o, type: kafka, brokers: k:1, topic: u, properties: {security.protocol: sasl_plaintext, sasl.username: u, sasl.password: p, ssl.ca.location: /ca.pem}}`, "",
			[]string{`"o".properties.ssl.ca.location: only used with security.protocol SSL or SASL_SSL`}},
		{"bad property values", `
  - {name: in, type: kafka, brokers: k:1, topic: t, properties: {fetch.max.wait.ms: "-3"}}
  - {name: o, type: print}`, "", []string{`"in".properties.fetch.max.wait.ms: want a positive integer`}},
		{"unknown sink property", `
  - {name: n, type: sequence, from: 1}
  - {name: o, type: kafka, brokers: k:1, topic: u, properties: {acks: "1"}}`, "", []string{`"o".properties: unknown field "acks" (supported: client.id, compression.type, linger.ms, security.protocol, sasl.mechanism`}},
		{"sink field on source", `
  - {name: in, type: kafka, brokers: k:1, topic: t, delivery-guarantee: none}
  - {name: o, type: print}`, "", []string{`unknown field "delivery-guarantee" for type kafka`}},
		{"sink needs topic", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, start: earliest}`, "", []string{`"out": kafka needs the field "topic"`, `unknown field "start" for type kafka`}},
		{"sink raw needs value", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, format: raw}`, "", []string{`format: raw needs the field "value"`}},
		{"sink bad expressions", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, key: "nope + 1", format: csv}`, "", []string{`"out".key: expression "nope + 1"`, `"out".format: unknown format "csv" (want json or raw)`}},
		{"sink value with json", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, value: "value"}`, "", []string{`"out".value: only used with format: raw`}},
		{"bad delivery guarantee", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, delivery-guarantee: twice}`, "", []string{`"out".delivery-guarantee: unknown delivery guarantee "twice"`}},
		{"exactly-once needs checkpointing", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, delivery-guarantee: exactly-once}`, "", []string{`"out".delivery-guarantee: exactly-once commits Kafka transactions on checkpoints: set execution.checkpointing.interval`}},
		{"transaction timeout not above the interval", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, delivery-guarantee: exactly-once, transaction-timeout: 30 s}`,
			"config: {execution.checkpointing.interval: 1 min}\n", []string{`"out".transaction-timeout: the transaction timeout (30 s) must be longer than execution.checkpointing.interval (1 min)`}},
		{"transaction timeout not above the minimum pause", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, delivery-guarantee: exactly-once, transaction-timeout: 2 min}`,
			"config: {execution.checkpointing.interval: 1 min, execution.checkpointing.min-pause: 5 min}\n", []string{`"out".transaction-timeout: the transaction timeout (2 min) must be longer than execution.checkpointing.min-pause (5 min)`}},
		{"default transaction timeout not above the interval", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, delivery-guarantee: exactly-once}`,
			"config: {execution.checkpointing.interval: 20 min}\n", []string{`the transaction timeout (15 min) must be longer than execution.checkpointing.interval (20 min)`}},
		{"bad transaction timeout and misplaced prefix", `
  - {name: n, type: sequence, from: 1}
  - {name: out, type: kafka, brokers: k:1, topic: o, transaction-timeout: soon, transactional-id-prefix: p}`, "", []string{`"out".transaction-timeout: invalid duration "soon"`, `"out".transactional-id-prefix: only used with delivery-guarantee: exactly-once`}},
		{"headers not a map", `
  - {name: in, type: kafka, brokers: k:1, topic: t}
  - {name: out, type: kafka, brokers: k:1, topic: o, headers: value}`, "", []string{`"out".headers: expression "value": result is string, want map`}},
		{"key by a map", `
  - {name: in, type: kafka, brokers: k:1, topic: t}
  - {name: by, type: key-by, key: headers}
  - {name: c, type: count}
  - {name: o, type: print}`, "", []string{`"by".key: a key cannot be a map; key by one of its entries, such as headers["name"]`}},
		{"kafka source reads no inputs", `
  - {name: n, type: sequence, from: 1}
  - {name: k, type: kafka, brokers: k:1, topic: t, start: earliest}
  - {name: o, type: print}`, "", []string{`unknown field "start" for type kafka`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := "name: x\n" + tc.config + "operators:" + tc.ops + "\n"
			g, err := job.Build(job.Request{Spec: []byte(spec), SpecName: "bad.yaml"}, job.Env{Operators: operator.MustRegistry(kafkaspec.Type)})
			if err == nil {
				t.Fatalf("Build succeeded: %v", g)
			}
			if !errors.Is(err, job.ErrInvalidSpec) {
				t.Errorf("error %v is not ErrInvalidSpec", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
		})
	}
}

// TestKafkaLocalPaths: the PEM files of both roles are local paths the processes confine.
func TestKafkaLocalPaths(t *testing.T) {
	g := build(t, `
name: tls
operators:
  - {name: in, type: kafka, brokers: [b:9092], topic: t, properties: {security.protocol: SSL, ssl.ca.location: /certs/ca.pem}}
  - {name: out, type: kafka, brokers: [b:9092], topic: u, properties: {security.protocol: SSL, ssl.certificate.location: c.pem, ssl.key.location: k.pem}}
`)
	r := operator.MustRegistry(kafkaspec.Type)
	want := map[string][]operator.LocalPath{
		"in":  {{Field: "properties.ssl.ca.location", Path: "/certs/ca.pem"}},
		"out": {{Field: "properties.ssl.certificate.location", Path: "c.pem"}, {Field: "properties.ssl.key.location", Path: "k.pem"}},
	}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			got, err := r.LocalPaths(op)
			if err != nil || !slices.Equal(got, want[op.GetName()]) {
				t.Errorf("LocalPaths(%s) = %v, %v; want %v", op.GetName(), got, err, want[op.GetName()])
			}
		}
	}
}
