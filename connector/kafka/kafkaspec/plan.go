package kafkaspec

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// DefaultTransactionTimeout is the exactly-once sink's transaction.timeout.ms when the spec
// sets none: the brokers' default cap (transaction.max.timeout.ms is 15 minutes), so a
// checkpoint may take that long before its transaction is aborted.
const DefaultTransactionTimeout = 15 * time.Minute

// planSource plans a kafka operator without inputs. It emits RawSchema for format raw; for
// format json the declared schema followed by the metadata fields.
func planSource(p *operator.Planner) (SourceConfig, *operator.Shape) {
	c := SourceConfig{Brokers: brokers(p), GroupID: "goflink-" + p.Job + "-" + p.Name}

	// What to read: exactly one of topic, topics and topic-pattern.
	var named []string
	for _, k := range []string{"topic", "topics", "topic-pattern"} {
		if _, has := p.Field(k); has {
			named = append(named, k)
		}
	}
	switch len(named) {
	case 0:
		p.Problemf("kafka needs the field \"topic\" (or \"topics\" or \"topic-pattern\")")
	case 1:
		switch e, _ := p.Field(named[0]); named[0] {
		case "topic":
			if t, ok := e.NonEmpty(); ok {
				c.Topics = []string{t}
			}
		case "topics":
			c.Topics = topics(e)
		case "topic-pattern":
			if pat, ok := e.NonEmpty(); ok {
				if _, err := regexp.Compile(pat); err != nil {
					e.Problemf("not a valid regular expression: %v", err)
				}
				c.TopicPattern = pat
			}
		}
	default:
		p.Problemf("give only one of %s", strings.Join(named, ", "))
	}

	var startOK bool // after a bad start, what it was meant to be is unknown
	c.Start, startOK = p.Choice("start", "earliest", "earliest", "latest", "committed", "timestamp")
	if e, has := p.Field("start-timestamp"); has {
		if startOK && c.Start != "timestamp" {
			e.Problemf("only used with start: timestamp")
		} else if ms, ok := timestamp(e.Value); ok {
			c.StartTimestampMs = ms
		} else {
			e.Problemf("want an RFC 3339 time (2026-01-02T15:04:05Z) or epoch milliseconds, got %s", e.Kind())
		}
	} else if c.Start == "timestamp" {
		p.At("start").Problemf("start: timestamp needs the field \"start-timestamp\"")
	}

	c.Format, _ = p.Choice("format", "raw", "raw", "json")
	var declared []record.Field // with record.Invalid for a bad type
	declaredOpen := true        // the declared fields are not known
	if e, has := p.Field("schema"); has {
		if c.Format == "raw" {
			e.Problemf("only used with format: json")
		} else {
			declared, declaredOpen = declaredSchema(e)
			for _, f := range declared {
				if f.Type != record.Invalid {
					c.Schema = append(c.Schema, f)
				}
			}
		}
	} else if c.Format == "json" {
		p.At("format").Problemf("format: json needs the field \"schema\" (field name: type)")
	}
	if e, has := p.Field("rate"); has {
		if rate, ok := e.Float(); ok && rate < 0 {
			e.Problemf("must not be negative, got %v", rate)
		} else {
			c.Rate = rate
		}
	}
	c.Isolation, _ = p.Choice("isolation", "read_committed", "read_committed", "read_uncommitted")
	if e, has := p.Field("group-id"); has {
		c.GroupID, _ = e.NonEmpty()
	}
	c.Properties = properties(p, false)

	switch c.Format {
	case "":
		return c, operator.UnknownShape()
	case "raw":
		return c, operator.KnownShape(RawSchema)
	}
	return c, operator.NewShape(append(declared, Metadata...), declaredOpen)
}

// planSink plans a kafka operator with inputs.
func planSink(p *operator.Planner) (SinkConfig, *operator.Shape) {
	c := SinkConfig{Brokers: brokers(p)}
	if e, ok := p.Require("topic"); ok {
		c.Topic, _ = e.NonEmpty()
	}
	c.Format, _ = p.Choice("format", "json", "json", "raw") // "" after a bad format: unknown
	if e, has := p.Field("key"); has {
		c.Key, _, _, _ = p.Expr(e.Value, expression.Options{})
	}
	if e, has := p.Field("headers"); has {
		c.Headers, _, _, _ = p.Expr(e.Value, expression.Options{Want: record.Map})
	}
	if e, has := p.Field("value"); has {
		if c.Format == "json" {
			e.Problemf("only used with format: raw (format json writes the whole row)")
		} else {
			c.Value, _, _, _ = p.Expr(e.Value, expression.Options{})
		}
	} else if c.Format == "raw" {
		p.Problemf("format: raw needs the field \"value\" (an expression)")
	}

	c.DeliveryGuarantee, _ = p.Choice("delivery-guarantee", "at-least-once", "exactly-once", "at-least-once", "none")
	exactlyOnce, known := c.DeliveryGuarantee == "exactly-once", c.DeliveryGuarantee != ""
	timeout := DefaultTransactionTimeout
	if e, has := p.Field("transaction-timeout"); has {
		if d, ok := e.Duration(); ok {
			if d < time.Millisecond {
				e.Problemf("must be at least 1 ms, got %s", e.Kind())
			} else {
				timeout = d
			}
		}
		if known && !exactlyOnce {
			e.Problemf("only used with delivery-guarantee: exactly-once")
		}
	}
	if e, has := p.Field("transactional-id-prefix"); has {
		c.TransactionalIDPrefix, _ = e.NonEmpty()
		if known && !exactlyOnce {
			e.Problemf("only used with delivery-guarantee: exactly-once")
		}
	}
	if exactlyOnce {
		if c.TransactionalIDPrefix == "" {
			c.TransactionalIDPrefix = "goflink-" + p.Job + "-" + p.Name
		}
		c.TransactionTimeoutMs = timeout.Milliseconds()
		checkTransactionTimeout(p, timeout)
	}
	c.Properties = properties(p, true)
	return c, nil
}

// checkTransactionTimeout checks that an exactly-once sink's transactions outlive the time
// from one checkpoint's barrier to the next one's completion: at least the interval, and at
// least the minimum pause between checkpoints.
func checkTransactionTimeout(p *operator.Planner, timeout time.Duration) {
	interval := p.Config.Duration(config.CheckpointInterval)
	if interval <= 0 {
		p.At("delivery-guarantee").Problemf("exactly-once commits Kafka transactions on checkpoints: set %s", config.CheckpointInterval)
		return
	}
	gap, gapKey := interval, config.CheckpointInterval
	if pause := p.Config.Duration(config.CheckpointMinPause); pause > gap {
		gap, gapKey = pause, config.CheckpointMinPause
	}
	if timeout <= gap {
		at := p.At("transaction-timeout")
		if _, has := p.Field("transaction-timeout"); !has {
			at = p.At("delivery-guarantee").At(at.Path()) // at the guarantee, naming the timeout
		}
		at.Problemf("the transaction timeout (%s) must be longer than %s (%s), or transactions are aborted before their checkpoint commits them",
			config.FormatDuration(timeout), gapKey, config.FormatDuration(gap))
	}
}

// brokers reads the required brokers field: host:port, or a list of them.
func brokers(p *operator.Planner) []string {
	e, ok := p.Require("brokers")
	if !ok {
		return nil
	}
	list, ok := e.Names()
	if !ok {
		return nil
	}
	if len(list) == 0 {
		e.Problemf("needs at least one broker (host:port)")
		return nil
	}
	var out []string
	for _, v := range list {
		br, _ := v.String()
		host, port, err := net.SplitHostPort(br)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
			v.Problemf("want host:port, got %q", br)
		}
		out = append(out, br)
	}
	return out
}

// topics reads the topics field: a non-empty list of distinct names.
func topics(e spec.Entry) []string {
	list, ok := e.Names()
	if !ok {
		return nil
	}
	if len(list) == 0 {
		e.Problemf("needs at least one topic")
	}
	var out []string
	for _, v := range list {
		t, ok := v.NonEmpty()
		switch {
		case !ok:
		case slices.Contains(out, t):
			v.Problemf("topic %q is listed twice", t)
		default:
			out = append(out, t)
		}
	}
	return out
}

// declaredSchema reads the json format's declared fields (operator.DeclaredFields); the
// metadata fields' names are the source's own.
func declaredSchema(e spec.Entry) (fields []record.Field, open bool) {
	return operator.DeclaredFields(e, func(name string) string {
		if slices.ContainsFunc(Metadata, func(f record.Field) bool { return f.Name == name }) {
			return fmt.Sprintf("%q is a metadata field the source adds itself (topic, partition, offset, timestamp, headers)", name)
		}
		return ""
	})
}

// properties reads the optional properties map of client settings; only the known keys are
// accepted, and their values are checked as the runtime reads them.
func properties(p *operator.Planner, sink bool) map[string]string {
	e, has := p.Field("properties")
	if !has {
		return nil
	}
	known := SourceProperties
	if sink {
		known = SinkProperties
	}
	m, ok := e.Map()
	if !ok {
		return nil
	}
	good := m.CheckKeys(known, "(supported: "+strings.Join(known, ", ")+")")
	out := map[string]string{}
	for _, pe := range m.Entries() {
		v, ok := pe.String()
		good = good && ok
		out[pe.Key] = v
	}
	if !good {
		return out
	}
	_, problems := ParseProperties(out, sink)
	for _, pr := range problems {
		at := e.At(e.Path() + "." + pr.Property)
		if pe, has := m.Get(pr.Property); has {
			at = pe
		}
		at.Problemf("%s", pr.Problem)
	}
	return out
}

// timestamp parses an RFC 3339 time or an integer of epoch milliseconds.
func timestamp(v spec.Value) (int64, bool) {
	if !v.IsScalar() {
		return 0, false
	}
	if v.IsInt() {
		ms, err := strconv.ParseInt(v.Text(), 10, 64)
		return ms, err == nil && ms >= 0
	}
	t, err := time.Parse(time.RFC3339Nano, v.Text())
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}
