package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/goflink/goflink/connector/nexmark"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// nexmarkQuery is one spec of examples/nexmark and what it must commit.
type nexmarkQuery struct {
	name   string // the spec's file name without .yaml
	events int64  // the test's event count (the example's is larger)
	seed   int64  // the source's seed (the examples' is 0)
	// cols are the output's fields, in order, and their types.
	cols []record.Field
	// want returns the query's result over the events as rows of values of cols (int64,
	// float64, string, time.Time), computed as the SQL query defines it.
	want func(events []nexmarkEvent) [][]any
	// minWindows is how many windows the reference's rows must come from, so that the
	// test exercises several firings (0 for the queries without windows).
	minWindows int
	windowOf   func(row []any) int64 // the window a row of want belongs to (its end or start)
	// ties says that some window of the reference has several rows (q5's auctions with
	// the same count), so that the test covers them.
	ties bool
}

// nexmarkEvent holds the fields of a nexmark row the queries read; ts is date_time in
// milliseconds.
type nexmarkEvent struct {
	kind                            int64
	personID                        int64
	personName                      string
	auctionSeller                   int64
	bidAuction, bidBidder, bidPrice int64
	dateTime                        time.Time
	ts                              int64
	extra                           string
}

func field(name string, t record.Type) record.Field { return record.Field{Name: name, Type: t} }

// bidCols are the fields of q0.
var bidCols = []record.Field{field("auction", record.Int64), field("bidder", record.Int64), field("price", record.Int64),
	field("date_time", record.Timestamp), field("extra", record.String)}

// nexmarkQueries are the examples with their references. The event counts are
// test-sized; at the examples' 10,000 events/s of event time, 150,000 events span 15 s, so
// that q5 fires 12 sliding windows (2 s slide), and q8 the 10 s windows [0 s, 10 s) and
// [10 s, 20 s); q7's 110,000 events reach into its second window too. q5 runs with seed 19,
// whose events hold 6 windows with two hottest auctions in 15 s (seed 0's first is at 36 s).
var nexmarkQueries = []nexmarkQuery{
	{name: "q0", events: 20_000, cols: bidCols, want: func(evs []nexmarkEvent) [][]any {
		var rows [][]any
		for _, e := range bids(evs) {
			rows = append(rows, []any{e.bidAuction, e.bidBidder, e.bidPrice, e.dateTime, e.extra})
		}
		return rows
	}},
	{name: "q1", events: 20_000, cols: []record.Field{field("auction", record.Int64), field("bidder", record.Int64),
		field("price", record.Float64), field("date_time", record.Timestamp), field("extra", record.String)},
		want: func(evs []nexmarkEvent) [][]any {
			var rows [][]any
			for _, e := range bids(evs) {
				// 0.908 * price as DECIMAL(23, 3): the double nearest to the decimal.
				rows = append(rows, []any{e.bidAuction, e.bidBidder, float64(e.bidPrice*908) / 1000, e.dateTime, e.extra})
			}
			return rows
		}},
	{name: "q2", events: 100_000, cols: []record.Field{field("auction", record.Int64), field("price", record.Int64)},
		want: func(evs []nexmarkEvent) [][]any {
			var rows [][]any
			for _, e := range bids(evs) {
				if e.bidAuction%123 == 0 {
					rows = append(rows, []any{e.bidAuction, e.bidPrice})
				}
			}
			return rows
		}},
	{name: "q5", events: 150_000, cols: []record.Field{field("auction", record.Int64), field("num", record.Int64),
		field("starttime", record.Timestamp), field("endtime", record.Timestamp)},
		want: wantQ5, minWindows: 10, windowOf: func(row []any) int64 { return row[3].(time.Time).UnixMilli() },
		seed: 19, ties: true},
	{name: "q7", events: 110_000, cols: []record.Field{field("auction", record.Int64), field("price", record.Int64),
		field("bidder", record.Int64), field("date_time", record.Timestamp), field("extra", record.String)},
		want: wantQ7, minWindows: 2, windowOf: func(row []any) int64 { return tumble(row[3].(time.Time).UnixMilli(), 10_000) }},
	{name: "q8", events: 150_000, cols: []record.Field{field("id", record.Int64), field("name", record.String),
		field("stime", record.Timestamp)},
		want: wantQ8, minWindows: 2, windowOf: func(row []any) int64 { return row[2].(time.Time).UnixMilli() }},
}

func bids(evs []nexmarkEvent) []nexmarkEvent {
	var out []nexmarkEvent
	for _, e := range evs {
		if e.kind == nexmark.KindBid {
			out = append(out, e)
		}
	}
	return out
}

// tumble is the start of the tumbling window of size ms that holds ts (ts >= 0).
func tumble(ts, size int64) int64 { return ts - ts%size }

func ms(v int64) time.Time { return time.UnixMilli(v) }

// wantQ5: per HOP window (10 s, sliding by 2 s) the auctions whose bid count is the
// window's largest, with ties.
func wantQ5(evs []nexmarkEvent) [][]any {
	const size, slide = 10_000, 2_000
	counts := map[int64]map[int64]int64{} // window end → auction → bids
	for _, e := range bids(evs) {
		for end := tumble(e.ts, slide) + slide; end-size <= e.ts; end += slide {
			if counts[end] == nil {
				counts[end] = map[int64]int64{}
			}
			counts[end][e.bidAuction]++
		}
	}
	var rows [][]any
	for end, perAuction := range counts {
		maxn := slices.Max(slices.Collect(maps.Values(perAuction)))
		for auction, num := range perAuction {
			if num >= maxn {
				rows = append(rows, []any{auction, num, ms(end - size), ms(end)})
			}
		}
	}
	return rows
}

// wantQ7: the bids whose price is the maximum of a 10 s tumbling window ending at e, with
// e - 10 s <= date_time <= e (BETWEEN is inclusive: a bid at e also meets the window before
// its own).
func wantQ7(evs []nexmarkEvent) [][]any {
	const size = 10_000
	maxPrice := map[int64]int64{} // window end → max price
	bs := bids(evs)
	for _, e := range bs {
		end := tumble(e.ts, size) + size
		maxPrice[end] = max(maxPrice[end], e.bidPrice)
	}
	var rows [][]any
	for end, price := range maxPrice {
		for _, e := range bs {
			if e.bidPrice == price && e.ts >= end-size && e.ts <= end {
				rows = append(rows, []any{e.bidAuction, e.bidPrice, e.bidBidder, e.dateTime, e.extra})
			}
		}
	}
	return rows
}

// wantQ8: the persons (id, name, window) of a 10 s tumbling window in which the person, as a
// seller, created an auction; each once (both sides are GROUP BYs).
func wantQ8(evs []nexmarkEvent) [][]any {
	const size = 10_000
	type person struct {
		id    int64
		name  string
		start int64
	}
	type seller struct{ id, start int64 }
	persons, sellers := map[person]bool{}, map[seller]bool{}
	for _, e := range evs {
		switch e.kind {
		case nexmark.KindPerson:
			persons[person{e.personID, e.personName, tumble(e.ts, size)}] = true
		case nexmark.KindAuction:
			sellers[seller{e.auctionSeller, tumble(e.ts, size)}] = true
		}
	}
	var rows [][]any
	for p := range persons {
		if sellers[seller{p.id, p.start}] {
			rows = append(rows, []any{p.id, p.name, ms(p.start)})
		}
	}
	return rows
}

// TestNexmarkExamples runs every spec of examples/nexmark with parallelism 2, exactly-once
// checkpoints every 100 ms and fewer events, on a mini cluster of two TaskManagers (so the
// shuffles cross the network), and checks that the committed output is, as a multiset,
// what the query's SQL gives over the same events, computed here from nexmark.Generator.
// Each run fails once, in the source's task when the events reach half their event-time
// span (the source paced to about a second, so that checkpoints usually completed before):
// the output must be the same after the restore of the sources, windows and joins.
func TestNexmarkExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	specs, _ := filepath.Glob(filepath.Join("..", "examples", "nexmark", "*.yaml"))
	var names []string
	for _, q := range nexmarkQueries {
		names = append(names, q.name+".yaml")
	}
	for _, s := range specs {
		if !slices.Contains(names, filepath.Base(s)) {
			t.Errorf("%s has no reference here: add it to nexmarkQueries", s)
		}
	}
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 2, Slots: 1})
	for _, q := range nexmarkQueries {
		t.Run(q.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			out := filepath.Join(t.TempDir(), "out")
			spec, cfg := nexmarkSpec(t, q, out)
			start := time.Now()
			id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: spec, SpecName: q.name + ".yaml", Parallelism: 2,
				Config: map[string]string{
					"execution.checkpointing.interval": "100ms", "execution.checkpointing.mode": "EXACTLY_ONCE",
					"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "10ms",
					"restart-strategy.fixed-delay.attempts": "4",
				}})
			if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			// q0 to q2 have no shuffle: each subtask is a region of its own, restarted alone.
			last := watchFinished(t, ctx, cl, id, -1)
			ran := time.Since(start)
			// Usually the restart restores a checkpoint; on a slow machine the failure may come
			// before the first one completed, and the job starts over.
			if last.GetRestarts() < 1 {
				t.Fatalf("the job finished after %d restarts, want at least 1 (the fail operator's)", last.GetRestarts())
			}

			rows := q.want(nexmarkEvents(cfg))
			want := canonicalRows(q.cols, rows)
			got := committedNexmark(t, out, q.cols)
			if len(want) == 0 {
				t.Fatalf("the reference of %s over %d events is empty", q.name, q.events)
			}
			if q.minWindows > 0 {
				windows := map[int64]int{}
				for _, row := range rows {
					windows[q.windowOf(row)]++
				}
				if len(windows) < q.minWindows {
					t.Fatalf("the reference's %d rows come from %d windows, want at least %d", len(want), len(windows), q.minWindows)
				}
				if q.ties && slices.Max(slices.Collect(maps.Values(windows))) < 2 {
					t.Fatalf("no window of the reference has several rows: pick a seed with ties")
				}
			}
			compareMultisets(t, got, want)
			t.Logf("%s: %d events, %d rows as the SQL gives them; the job ran %v, restarted %d times, the last time from checkpoint %d",
				q.name, q.events, len(want), ran.Round(time.Millisecond), last.GetRestarts(), last.GetRestoredCheckpointId())
		})
	}
}

// nexmarkSpec reads examples/nexmark/<q>.yaml and returns it with q's event count and its
// file sink writing to out, with the configuration of its nexmark source. The source is
// paced to emit its events in about a second, and a fail operator after it fails its task
// once (attempt 0), at the first event in the second half of the events' time span.
func nexmarkSpec(t *testing.T, q nexmarkQuery, out string) ([]byte, nexmark.Config) {
	t.Helper()
	path := filepath.Join("..", "examples", "nexmark", q.name+".yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	ops := mapValue(doc.Content[0], "operators")
	if ops == nil || ops.Kind != yaml.SequenceNode {
		t.Fatalf("%s: no list of operators", path)
	}
	sources, sinks := 0, 0
	var source string
	for i, op := range ops.Content {
		switch typ := mapValue(op, "type"); {
		case typ == nil:
			t.Fatalf("%s: an operator without a type", path)
		case typ.Value == "nexmark":
			if sources++; i != 0 {
				t.Fatalf("%s: the nexmark source is operator %d, want it first", path, i)
			}
			source = mapValue(op, "name").Value
			setMapValue(op, "events", strconv.FormatInt(q.events, 10))
			setMapValue(op, "rate", strconv.FormatInt(q.events, 10))
			if q.seed != 0 {
				setMapValue(op, "seed", strconv.FormatInt(q.seed, 10))
			}
		case typ.Value == "file":
			sinks++
			setMapValue(op, "path", out)
		case typ.Value == "print":
			t.Fatalf("%s: a print sink; the test reads the committed output of a file sink", path)
		}
	}
	if sources != 1 || sinks != 1 {
		t.Fatalf("%s: %d nexmark sources and %d file sinks, want one of each", path, sources, sinks)
	}
	cfg := nexmarkConfig(t, &doc)
	if cfg.Events == nil || *cfg.Events != q.events {
		t.Fatalf("the source's events = %v, want %d", cfg.Events, q.events)
	}
	// The readers of the source read the fail operator: the one after the source reads it
	// as the operator before it, the others name it.
	const failOp = "fail-once"
	for _, op := range ops.Content[1:] {
		if in := mapValue(op, "inputs"); in != nil {
			for _, name := range append([]*yaml.Node{in}, in.Content...) {
				if name.Kind == yaml.ScalarNode && name.Value == source {
					name.SetString(failOp)
				}
			}
		}
	}
	mid := cfg.BaseTimeMs + q.events/2*1000/cfg.FirstEventRate
	var fail yaml.Node
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(`{name: %s, type: fail, inputs: [%s], attempt: 0, when: "date_time.UnixMilli() >= %d"}`,
		failOp, source, mid)), &fail); err != nil {
		t.Fatal(err)
	}
	ops.Content = slices.Insert(ops.Content, 1, fail.Content[0])
	spec, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return spec, nexmarkConfig(t, &doc)
}

// nexmarkConfig builds a spec and returns the configuration of its nexmark source.
func nexmarkConfig(t *testing.T, doc *yaml.Node) nexmark.Config {
	t.Helper()
	spec, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	g, err := job.Build(job.Request{Spec: spec, SpecName: "spec.yaml"}, job.Env{Operators: operator.MustRegistry(coordinator.ConnectorTypes...)})
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, spec)
	}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			if op.GetType() == nexmark.Type.Name {
				var c nexmark.Config
				if err := json.Unmarshal(op.GetConfig(), &c); err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
	}
	t.Fatalf("no nexmark operator in the job graph of\n%s", spec)
	return nexmark.Config{}
}

// mapValue returns the value of key in a YAML mapping node, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setMapValue sets key of a YAML mapping node to a scalar value (an integer when it reads as
// one), adding the key when missing.
func setMapValue(m *yaml.Node, key, value string) {
	v := mapValue(m, key)
	if v == nil {
		k := &yaml.Node{}
		k.SetString(key)
		v = &yaml.Node{}
		m.Content = append(m.Content, k, v)
	}
	v.SetString(value)
	if _, err := strconv.ParseInt(value, 10, 64); err == nil {
		v.Tag = "!!int"
	}
}

// nexmarkEvents generates the events of a bounded source of configuration c: events
// 0..events-1, which its subtasks emit between them whatever the parallelism.
func nexmarkEvents(c nexmark.Config) []nexmarkEvent {
	g := nexmark.NewGenerator(c)
	idx := func(name string) int { return nexmark.Schema.Index(name) }
	kind, pid, pname, seller := idx("event_type"), idx("person_id"), idx("person_name"), idx("auction_seller")
	auction, bidder, price, dt, extra := idx("bid_auction"), idx("bid_bidder"), idx("bid_price"), idx("date_time"), idx("extra")
	evs := make([]nexmarkEvent, *c.Events)
	for n := range evs {
		r := g.Event(int64(n))
		evs[n] = nexmarkEvent{kind: r[kind].Int(), personID: r[pid].Int(), personName: r[pname].Str(),
			auctionSeller: r[seller].Int(), bidAuction: r[auction].Int(), bidBidder: r[bidder].Int(), bidPrice: r[price].Int(),
			dateTime: r[dt].Time(), ts: r[dt].Time().UnixMilli(), extra: r[extra].Str()}
	}
	return evs
}

// canonicalRows renders rows of values of cols, one string per row, as canonicalValue does.
func canonicalRows(cols []record.Field, rows [][]any) []string {
	out := make([]string, len(rows))
	for i, row := range rows {
		parts := make([]string, len(row))
		for j, v := range row {
			parts[j] = cols[j].Name + "=" + canonicalValue(v)
		}
		out[i] = strings.Join(parts, " ")
	}
	return out
}

// canonicalValue renders an int64, float64, string or time.Time (in milliseconds).
func canonicalValue(v any) string {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		return strconv.Quote(v)
	case time.Time:
		return "ms:" + strconv.FormatInt(v.UnixMilli(), 10)
	}
	panic(fmt.Sprintf("canonicalValue of %T", v))
}

// committedNexmark reads the committed JSON lines under dir, checks that each has exactly
// the fields cols, and renders them as canonicalRows does.
func committedNexmark(t *testing.T, dir string, cols []record.Field) []string {
	t.Helper()
	var rows [][]any
	for _, obj := range committedRows[map[string]json.RawMessage](t, dir) {
		if got, want := slices.Sorted(maps.Keys(obj)), fieldNames(cols); !slices.Equal(got, want) {
			t.Fatalf("a committed row has the fields %v, want %v", got, want)
		}
		row := make([]any, len(cols))
		for i, c := range cols {
			v, err := decodeJSONValue(obj[c.Name], c.Type)
			if err != nil {
				t.Fatalf("field %s of a committed row: %v", c.Name, err)
			}
			row[i] = v
		}
		rows = append(rows, row)
	}
	return canonicalRows(cols, rows)
}

func fieldNames(cols []record.Field) []string {
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	return slices.Sorted(slices.Values(names))
}

// decodeJSONValue decodes a field of a file sink's JSON line as a value of type typ.
func decodeJSONValue(raw json.RawMessage, typ record.Type) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch typ {
	case record.Int64:
		if n, ok := v.(json.Number); ok {
			return n.Int64()
		}
	case record.Float64:
		if n, ok := v.(json.Number); ok {
			return n.Float64()
		}
	case record.String:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case record.Timestamp:
		if s, ok := v.(string); ok {
			return time.Parse(time.RFC3339Nano, s)
		}
	}
	return nil, fmt.Errorf("%s is no %v", raw, typ)
}

// compareMultisets fails the test unless got and want hold the same rows as often.
func compareMultisets(t *testing.T, got, want []string) {
	t.Helper()
	count := map[string]int{}
	for _, r := range want {
		count[r]++
	}
	for _, r := range got {
		count[r]--
	}
	var missing, extra []string
	for _, r := range slices.Sorted(maps.Keys(count)) {
		for n := count[r]; n > 0; n-- {
			missing = append(missing, r)
		}
		for n := count[r]; n < 0; n++ {
			extra = append(extra, r)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return
	}
	show := func(rows []string) string {
		if len(rows) > 5 {
			return strings.Join(rows[:5], "\n  ") + fmt.Sprintf("\n  … and %d more", len(rows)-5)
		}
		return strings.Join(rows, "\n  ")
	}
	t.Errorf("committed %d rows, the query gives %d: %d missing, %d extra\nmissing:\n  %s\nextra:\n  %s",
		len(got), len(want), len(missing), len(extra), show(missing), show(extra))
}
