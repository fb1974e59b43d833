package nexmark_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/connector/nexmark"
	"github.com/goflink/goflink/job"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

func build(spec string) (*pb.JobGraph, error) {
	ops, err := operator.NewRegistry(nexmark.Type)
	if err != nil {
		return nil, err
	}
	return job.Build(job.Request{Spec: []byte(spec), SpecName: "spec.yaml"}, job.Env{Operators: ops})
}

// configOf decodes the configuration of the job graph's operator named name.
func configOf(t *testing.T, g *pb.JobGraph, name string) nexmark.Config {
	t.Helper()
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			if op.GetName() == name {
				var c nexmark.Config
				if err := json.Unmarshal(op.GetConfig(), &c); err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
	}
	t.Fatalf("no operator %q in %v", name, g)
	return nexmark.Config{}
}

// TestBuildWithFilter builds the job of the brief: bids only, printed.
func TestBuildWithFilter(t *testing.T) {
	g, err := build(`name: bids
operators:
  - {name: n, type: nexmark, events: 1000}
  - {name: bids, type: filter, condition: event_type == 2}
  - {name: out, type: print}
`)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	c := configOf(t, g, "n")
	want := nexmark.DefaultConfig()
	if c.Events == nil || *c.Events != 1000 {
		t.Errorf("events = %v, want 1000", c.Events)
	}
	c.Events = nil
	if c != want {
		t.Errorf("configuration = %+v, want the defaults %+v", c, want)
	}
	for _, v := range g.GetVertices() {
		for _, op := range v.GetOperators() {
			if op.GetName() != "bids" {
				continue
			}
			s, err := record.SchemaFromProto(op.GetInputSchema())
			if err != nil {
				t.Fatal(err)
			}
			if !s.Equal(nexmark.Schema) {
				t.Errorf("the filter reads %v, want %v", s, nexmark.Schema)
			}
		}
	}
}

// TestBuildFields reads every field.
func TestBuildFields(t *testing.T) {
	for _, tc := range []struct {
		base string
		want time.Time
	}{
		{`"2026-12-01T10:00:00.5Z"`, time.Date(2026, 12, 1, 10, 0, 0, 5e8, time.UTC)},
		{`1700000000123`, time.UnixMilli(1700000000123)},
	} {
		g, err := build(`name: x
operators:
  - name: n
    type: nexmark
    rate: 2500.5
    seed: -7
    first-event-rate: 1000
    base-time: ` + tc.base + `
    avg-person-size: 0
    avg-auction-size: 1000
    avg-bid-size: 50
    hot-auction-ratio: 1
    hot-sellers-ratio: 10
    hot-bidders-ratio: 100
    active-people: 5
    in-flight-auctions: 6
  - {name: out, type: print}
`)
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		c := configOf(t, g, "n")
		want := nexmark.Config{Rate: 2500.5, Seed: -7, FirstEventRate: 1000, BaseTimeMs: tc.want.UnixMilli(),
			AvgPersonSize: 0, AvgAuctionSize: 1000, AvgBidSize: 50, HotAuctionRatio: 1, HotSellersRatio: 10,
			HotBiddersRatio: 100, ActivePeople: 5, InFlightAuctions: 6}
		if c != want {
			t.Errorf("base-time %s: configuration = %+v, want %+v", tc.base, c, want)
		}
	}
}

// TestBuildProblems reports bad fields as spec problems naming them.
func TestBuildProblems(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		want         []string
	}{
		{"events zero", `events: 0`, []string{`"n".events: must be positive, got 0`}},
		{"events negative", `events: -5`, []string{`"n".events: must be positive, got -5`}},
		{"events text", `events: many`, []string{`"n".events: want an integer`}},
		{"rate negative", `rate: -1`, []string{`"n".rate: must not be negative, got -1`}},
		{"first-event-rate zero", `first-event-rate: 0`, []string{`"n".first-event-rate: must be positive, got 0`}},
		{"first-event-rate fraction", `first-event-rate: 0.5`, []string{`"n".first-event-rate: want an integer`}},
		{"base-time", `base-time: yesterday`, []string{`"n".base-time: want epoch milliseconds or an RFC 3339 time such as "2015-07-15T00:00:00Z", got "yesterday"`}},
		{"ratio zero", `hot-auction-ratio: 0`, []string{`"n".hot-auction-ratio: must be from 1 to 2147483647, got 0`}},
		{"size negative", `avg-bid-size: -1`, []string{`"n".avg-bid-size: must be from 0 to 524288, got -1`}},
		{"size too big", `avg-person-size: 1000000`, []string{`"n".avg-person-size: must be from 0 to 524288, got 1000000`}},
		{"active people", `active-people: 0`, []string{`"n".active-people: must be from 1 to`}},
		{"seed text", `seed: abc`, []string{`"n".seed: want an integer`}},
		{"unknown field", `speed: 3`, []string{`unknown field "speed" for type nexmark`}},
		{"several", `events: 0, rate: -2, in-flight-auctions: 0`, []string{`"n".events: must be positive`, `"n".rate: must not be negative`, `"n".in-flight-auctions: must be from 1`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := build("name: x\noperators:\n  - {name: n, type: nexmark, " + tc.fields + "}\n  - {name: out, type: print}\n")
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

// TestRunsInCluster runs the job of TestBuildWithFilter with parallelism 2 on a mini cluster
// (whose JobManager and TaskManagers register the type themselves): it finishes after
// printing the 920 bids of 1000 events, each once.
func TestRunsInCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	var out miniclustertest.Buffer
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagers: 1, Slots: 2, Stdout: &out, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Parallelism: 2, Spec: []byte(`name: bids
operators:
  - {name: n, type: nexmark, events: 1000}
  - {name: bids, type: filter, condition: event_type == 2}
  - {name: out, type: print}
`)})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if s := last.GetStatus(); s != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%s), want FINISHED", s, last.GetFailureCause())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1000*46/50 {
		t.Fatalf("printed %d lines, want 920; first: %q", len(lines), lines[0])
	}
	distinct := map[string]bool{}
	for _, l := range lines {
		_, row, _ := strings.Cut(l, "> ") // the subtask's prefix
		if !strings.HasPrefix(row, `{"event_type":2,`) {
			t.Fatalf("printed %q, not a bid", l)
		}
		distinct[row] = true
	}
	if len(distinct) != len(lines) {
		t.Errorf("printed %d distinct bids of %d", len(distinct), len(lines))
	}
	t.Logf("first bid: %s", lines[0])
}
