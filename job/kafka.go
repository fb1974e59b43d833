package job

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// The spec fields of the type "kafka" in its two roles.
var (
	kafkaSourceFields = []string{"brokers", "topic", "topics", "topic-pattern", "start", "start-timestamp",
		"format", "schema", "rate", "isolation", "group-id", "properties"}
	kafkaSinkFields = []string{"brokers", "topic", "format", "key", "value", "headers", "delivery-guarantee",
		"transaction-timeout", "transactional-id-prefix", "properties"}
)

// defaultTransactionTimeout is the exactly-once Kafka sink's transaction.timeout.ms when the
// spec sets none: the brokers' default cap (transaction.max.timeout.ms is 15 minutes), so a
// checkpoint may take that long before its transaction is aborted.
const defaultTransactionTimeout = 15 * time.Minute

// planKafkaSource plans a kafka operator without inputs. Its output schema is
// operator.KafkaRawSchema for format raw; for format json it is the declared schema followed
// by the metadata fields topic, partition, offset, timestamp and headers.
func (b *builder) planKafkaSource(op *specOp) *shape {
	path := op.path
	s := &pb.KafkaSource{}
	good := true
	var ok bool
	if s.Brokers, ok = b.kafkaBrokers(op); !ok {
		good = false
	}

	// What to read: exactly one of topic, topics and topic-pattern.
	var named []string
	for _, k := range []string{"topic", "topics", "topic-pattern"} {
		if _, has := op.fields.get(k); has {
			named = append(named, k)
		}
	}
	switch len(named) {
	case 0:
		b.ps.add(op.line, path, "kafka needs the field \"topic\" (or \"topics\" or \"topic-pattern\")")
		good = false
	case 1:
	default:
		b.ps.add(op.line, path, "give only one of %s", strings.Join(named, ", "))
		good = false
	}
	if e, has := op.fields.get("topic"); has && len(named) == 1 {
		t, ok := b.kafkaTopic(e, path+".topic")
		good = good && ok
		s.Topics = []string{t}
	}
	if e, has := op.fields.get("topics"); has && len(named) == 1 {
		names, lines, ok := stringList(e.val, path+".topics", b.ps)
		good = good && ok
		if ok && len(names) == 0 {
			b.ps.add(e.line, path+".topics", "needs at least one topic")
			good = false
		}
		for i, t := range names {
			if strings.TrimSpace(t) == "" {
				b.ps.add(lines[i], fmt.Sprintf("%s.topics[%d]", path, i), "must not be empty")
				good = false
			} else if slices.Contains(s.Topics, t) {
				b.ps.add(lines[i], fmt.Sprintf("%s.topics[%d]", path, i), "topic %q is listed twice", t)
				good = false
			} else {
				s.Topics = append(s.Topics, t)
			}
		}
	}
	if e, has := op.fields.get("topic-pattern"); has && len(named) == 1 {
		p, ok := scalarString(e.val, path+".topic-pattern", b.ps)
		if ok {
			if _, err := regexp.Compile(p); err != nil || p == "" {
				msg := "must not be empty"
				if err != nil {
					msg = fmt.Sprintf("not a valid regular expression: %v", err)
				}
				b.ps.add(e.line, path+".topic-pattern", "%s", msg)
				ok = false
			}
		}
		good = good && ok
		s.TopicPattern = p
	}

	var startLine int
	s.Start, startLine, ok = b.kafkaChoice(op, path, "start", "earliest", "earliest", "latest", "committed", "timestamp")
	startOK := ok // after a bad start, what it was meant to be is unknown
	good = good && ok
	if e, has := op.fields.get("start-timestamp"); has {
		if startOK && s.Start != "timestamp" {
			b.ps.add(e.line, path+".start-timestamp", "only used with start: timestamp")
			good = false
		} else if ms, ok := kafkaTimestamp(e.val); ok {
			s.StartTimestampMs = ms
		} else {
			b.ps.add(e.line, path+".start-timestamp", "want an RFC 3339 time (2026-01-02T15:04:05Z) or epoch milliseconds, got %s", kindName(e.val))
			good = false
		}
	} else if s.Start == "timestamp" {
		b.ps.add(startLine, path, "start: timestamp needs the field \"start-timestamp\"")
		good = false
	}

	var formatLine int
	s.Format, formatLine, ok = b.kafkaChoice(op, path, "format", "raw", "raw", "json")
	formatOK := ok
	good = good && ok
	var declared []record.Field
	declaredOpen := true // the declared fields are unknown
	if e, has := op.fields.get("schema"); has {
		if formatOK && s.Format != "json" {
			b.ps.add(e.line, path+".schema", "only used with format: json")
			good = false
		} else {
			var ok bool
			declared, declaredOpen, ok = b.kafkaSchema(e, path+".schema")
			good = good && ok
			for _, f := range declared {
				s.Schema = append(s.Schema, &pb.Field{Name: f.Name, Type: f.Type.Proto()})
			}
		}
	} else if s.Format == "json" {
		b.ps.add(formatLine, path, "format: json needs the field \"schema\" (field name: type)")
		good = false
	}

	if e, has := op.fields.get("rate"); has {
		if s.Rate, ok = scalarFloat(e.val, path+".rate", b.ps); !ok {
			good = false
		} else if s.Rate < 0 {
			b.ps.add(e.line, path+".rate", "must not be negative, got %v", s.Rate)
			good = false
		}
	}
	s.Isolation, _, ok = b.kafkaChoice(op, path, "isolation", "read_committed", "read_committed", "read_uncommitted")
	good = good && ok
	s.GroupId = "goflink-" + b.name + "-" + op.name
	if e, has := op.fields.get("group-id"); has {
		v, ok := scalarString(e.val, path+".group-id", b.ps)
		if ok && strings.TrimSpace(v) == "" {
			b.ps.add(e.line, path+".group-id", "must not be empty")
			ok = false
		}
		good = good && ok
		s.GroupId = v
	}
	if s.Properties, ok = b.kafkaProperties(op, false); !ok {
		good = false
	}
	if good {
		op.pbOp.Spec = &pb.Operator_KafkaSource{KafkaSource: s}
	}
	switch {
	case !formatOK:
		return unknownShape()
	case s.Format == "raw":
		return knownShape(operator.KafkaRawSchema)
	}
	metadata, err := operator.KafkaJSONSchema(nil)
	if err != nil {
		b.ps.add(op.line, path, "%v", err)
		return unknownShape()
	}
	return newShape(append(declared, metadata.Fields()...), declaredOpen)
}

// planKafkaSink plans a kafka operator with inputs.
func (b *builder) planKafkaSink(op *specOp) {
	path := op.path
	s := &pb.KafkaSink{}
	good := true
	var ok bool
	if s.Brokers, ok = b.kafkaBrokers(op); !ok {
		good = false
	}
	if e, has := b.field(op, "topic", true); has {
		t, ok := b.kafkaTopic(e, path+".topic")
		good = good && ok
		s.Topic = t
	} else {
		good = false
	}
	s.Format, _, ok = b.kafkaChoice(op, path, "format", "json", "json", "raw")
	formatOK := ok // after a bad format, what it was meant to be is unknown
	good = good && ok
	if e, has := op.fields.get("key"); has {
		src, ok := scalarString(e.val, path+".key", b.ps)
		if ok {
			_, _, ok = b.compile(op, e, path+".key", src, expression.Options{})
		}
		good = good && ok
		s.Key = src
	}
	if e, has := op.fields.get("headers"); has {
		src, ok := scalarString(e.val, path+".headers", b.ps)
		if ok {
			_, _, ok = b.compile(op, e, path+".headers", src, expression.Options{Want: record.Map})
		}
		good = good && ok
		s.Headers = src
	}
	if e, has := op.fields.get("value"); has {
		src, ok := scalarString(e.val, path+".value", b.ps)
		if ok && formatOK && s.Format != "raw" {
			b.ps.add(e.line, path+".value", "only used with format: raw (format json writes the whole row)")
			ok = false
		} else if ok {
			_, _, ok = b.compile(op, e, path+".value", src, expression.Options{})
		}
		good = good && ok
		s.Value = src
	} else if s.Format == "raw" {
		b.ps.add(op.line, path, "format: raw needs the field \"value\" (an expression)")
		good = false
	}

	var dgLine int
	s.DeliveryGuarantee, dgLine, ok = b.kafkaChoice(op, path, "delivery-guarantee", "at-least-once", "exactly-once", "at-least-once", "none")
	dgOK := ok // after a bad delivery guarantee, what it was meant to be is unknown
	good = good && ok
	timeout := defaultTransactionTimeout
	ttLine := 0
	if e, has := op.fields.get("transaction-timeout"); has {
		ttLine = e.line
		v, ok := scalarString(e.val, path+".transaction-timeout", b.ps)
		if ok {
			d, err := config.ParseDuration(v)
			switch {
			case err != nil:
				b.ps.add(e.line, path+".transaction-timeout", "%v", err)
				ok = false
			case d < time.Millisecond:
				b.ps.add(e.line, path+".transaction-timeout", "must be at least 1 ms, got %q", v)
				ok = false
			default:
				timeout = d
			}
		}
		good = good && ok
		if ok && dgOK && s.DeliveryGuarantee != "exactly-once" {
			b.ps.add(e.line, path+".transaction-timeout", "only used with delivery-guarantee: exactly-once")
			good = false
		}
	}
	if e, has := op.fields.get("transactional-id-prefix"); has {
		v, ok := scalarString(e.val, path+".transactional-id-prefix", b.ps)
		switch {
		case ok && strings.TrimSpace(v) == "":
			b.ps.add(e.line, path+".transactional-id-prefix", "must not be empty")
			ok = false
		case ok && dgOK && s.DeliveryGuarantee != "exactly-once":
			b.ps.add(e.line, path+".transactional-id-prefix", "only used with delivery-guarantee: exactly-once")
			ok = false
		}
		good = good && ok
		s.TransactionalIdPrefix = v
	}
	if s.DeliveryGuarantee == "exactly-once" {
		if s.TransactionalIdPrefix == "" {
			s.TransactionalIdPrefix = "goflink-" + b.name + "-" + op.name
		}
		s.TransactionTimeoutMs = timeout.Milliseconds()
		interval := b.cfg.Duration(config.CheckpointInterval)
		switch {
		case interval <= 0:
			b.ps.add(dgLine, path+".delivery-guarantee",
				"exactly-once commits Kafka transactions on checkpoints: set %s", config.CheckpointInterval)
			good = false
		default:
			// A transaction lives from one checkpoint's barrier to the next one's completion:
			// at least the interval, and at least the minimum pause between checkpoints.
			gap, gapKey := interval, config.CheckpointInterval
			if pause := b.cfg.Duration(config.CheckpointMinPause); pause > gap {
				gap, gapKey = pause, config.CheckpointMinPause
			}
			if timeout <= gap {
				line, field := ttLine, path+".transaction-timeout"
				if line == 0 {
					line = dgLine
				}
				b.ps.add(line, field, "the transaction timeout (%s) must be longer than %s (%s), or transactions are aborted before their checkpoint commits them",
					config.FormatDuration(timeout), gapKey, config.FormatDuration(gap))
				good = false
			}
		}
	}
	if s.Properties, ok = b.kafkaProperties(op, true); !ok {
		good = false
	}
	if good {
		op.pbOp.Spec = &pb.Operator_KafkaSink{KafkaSink: s}
	}
}

// kafkaBrokers reads the required brokers field: host:port, or a list of them.
func (b *builder) kafkaBrokers(op *specOp) ([]string, bool) {
	e, ok := b.field(op, "brokers", true)
	if !ok {
		return nil, false
	}
	path := op.path + ".brokers"
	list, lines, ok := stringList(e.val, path, b.ps)
	if !ok {
		return nil, false
	}
	if len(list) == 0 {
		b.ps.add(e.line, path, "needs at least one broker (host:port)")
		return nil, false
	}
	for i, br := range list {
		host, port, err := net.SplitHostPort(br)
		if err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
				err = fmt.Errorf("bad port %q", port)
			} else if host == "" {
				err = fmt.Errorf("no host")
			}
		}
		if err != nil {
			b.ps.add(lines[i], fmt.Sprintf("%s[%d]", path, i), "want host:port, got %q", br)
			ok = false
		}
	}
	return list, ok
}

func (b *builder) kafkaTopic(e entry, path string) (string, bool) {
	t, ok := scalarString(e.val, path, b.ps)
	if ok && strings.TrimSpace(t) == "" {
		b.ps.add(e.line, path, "must not be empty")
		return "", false
	}
	return t, ok
}

// kafkaSchema reads the json format's declared fields: a map of field name to type. After a
// problem, the fields are those known (record.Invalid where the type is bad), and open when
// some names are not known.
func (b *builder) kafkaSchema(e entry, path string) (fields []record.Field, open, ok bool) {
	m := asMapping(e.val, path, b.ps)
	if m == nil {
		return nil, true, false
	}
	if len(m.entries) == 0 {
		b.ps.add(e.line, path, "needs at least one field")
		return nil, true, false
	}
	good := true
	for _, fe := range m.entries {
		fpath := path + "." + fe.key
		if !identifier.MatchString(fe.key) {
			b.ps.add(fe.line, fpath, "field names must be identifiers (letters, digits, _)")
			good, open = false, true
			continue
		}
		if slices.Contains(operator.KafkaMetadataFields, fe.key) {
			b.ps.add(fe.line, fpath, "%q is a metadata field the source adds itself (%s)", fe.key, strings.Join(operator.KafkaMetadataFields, ", "))
			good, open = false, true
			continue
		}
		f := record.Field{Name: fe.key}
		if v, ok := scalarString(fe.val, fpath, b.ps); !ok {
			good = false
		} else if t, err := record.ParseType(v); err != nil {
			b.ps.add(fe.line, fpath, "%v", err)
			good = false
		} else {
			f.Type = t
		}
		fields = append(fields, f)
	}
	return fields, open, good
}

// kafkaProperties reads the optional properties map of client settings; only the known keys
// are accepted.
func (b *builder) kafkaProperties(op *specOp, sink bool) (map[string]string, bool) {
	e, has := op.fields.get("properties")
	if !has {
		return nil, true
	}
	known := operator.KafkaSourceProperties
	if sink {
		known = operator.KafkaSinkProperties
	}
	path := op.path + ".properties"
	m := asMapping(e.val, path, b.ps)
	if m == nil {
		return nil, false
	}
	out := map[string]string{}
	m.checkKeys(path, known, "(supported: "+strings.Join(known, ", ")+")", b.ps)
	good := allKnown(m, known)
	for _, pe := range m.entries {
		v, ok := scalarString(pe.val, path+"."+pe.key, b.ps)
		if !ok {
			good = false
			continue
		}
		out[pe.key] = v
	}
	if !good {
		return out, false
	}
	for _, p := range operator.CheckKafkaProperties(out, sink) {
		line := e.line
		if pe, has := m.get(p.Property); has {
			line = pe.line
		}
		b.ps.add(line, path+"."+p.Property, "%s", p.Problem)
		good = false
	}
	return out, good
}

func allKnown(m *mapping, known []string) bool {
	for _, e := range m.entries {
		if !slices.Contains(known, e.key) {
			return false
		}
	}
	return true
}

// kafkaTimestamp parses an RFC 3339 time or an integer of epoch milliseconds.
func kafkaTimestamp(n *yaml.Node) (int64, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	if n.Tag == "!!int" {
		ms, err := strconv.ParseInt(n.Value, 10, 64)
		return ms, err == nil && ms >= 0
	}
	t, err := time.Parse(time.RFC3339Nano, n.Value)
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

// kafkaChoice reads an optional string field that must be one of choices: def when it is
// absent. line is where it was set (the operator's line when absent); ok is false after an
// error naming the field.
func (b *builder) kafkaChoice(op *specOp, path, field, def string, choices ...string) (v string, line int, ok bool) {
	e, has := op.fields.get(field)
	if !has {
		return def, op.line, true
	}
	if v, ok = scalarString(e.val, path+"."+field, b.ps); !ok {
		return def, e.line, false
	}
	if !slices.Contains(choices, v) {
		want := strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
		b.ps.add(e.line, path+"."+field, "unknown %s %q (want %s)", strings.ReplaceAll(field, "-", " "), v, want)
		return def, e.line, false
	}
	return v, e.line, true
}
