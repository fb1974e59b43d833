package nexmark

import (
	"math"
	"time"

	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// Schema is the output schema of the nexmark source: one flat row for the three kinds of
// event (see the package doc).
var Schema = record.MustSchema(
	record.Field{Name: "event_type", Type: record.Int64},
	record.Field{Name: "person_id", Type: record.Int64},
	record.Field{Name: "person_name", Type: record.String},
	record.Field{Name: "person_email_address", Type: record.String},
	record.Field{Name: "person_credit_card", Type: record.String},
	record.Field{Name: "person_city", Type: record.String},
	record.Field{Name: "person_state", Type: record.String},
	record.Field{Name: "auction_id", Type: record.Int64},
	record.Field{Name: "auction_item_name", Type: record.String},
	record.Field{Name: "auction_description", Type: record.String},
	record.Field{Name: "auction_initial_bid", Type: record.Int64},
	record.Field{Name: "auction_reserve", Type: record.Int64},
	record.Field{Name: "auction_expires", Type: record.Timestamp},
	record.Field{Name: "auction_seller", Type: record.Int64},
	record.Field{Name: "auction_category", Type: record.Int64},
	record.Field{Name: "bid_auction", Type: record.Int64},
	record.Field{Name: "bid_bidder", Type: record.Int64},
	record.Field{Name: "bid_price", Type: record.Int64},
	record.Field{Name: "bid_channel", Type: record.String},
	record.Field{Name: "bid_url", Type: record.String},
	record.Field{Name: "date_time", Type: record.Timestamp},
	record.Field{Name: "extra", Type: record.String},
)

// The positions of Schema's fields.
const (
	fEventType = iota
	fPersonID
	fPersonName
	fPersonEmail
	fPersonCard
	fPersonCity
	fPersonState
	fAuctionID
	fAuctionItemName
	fAuctionDescription
	fAuctionInitialBid
	fAuctionReserve
	fAuctionExpires
	fAuctionSeller
	fAuctionCategory
	fBidAuction
	fBidBidder
	fBidPrice
	fBidChannel
	fBidURL
	fDateTime
	fExtra
	numFields
)

// DefaultBaseTime is the event time of event 0 when the spec sets no base-time: a fixed
// instant, so that runs are reproducible.
var DefaultBaseTime = time.Date(2015, 7, 15, 0, 0, 0, 0, time.UTC)

// DefaultConfig returns the configuration of a spec that sets only what it must: Nexmark's
// defaults (NexmarkConfiguration), with the benchmark's event-time rate of 10 M events/s.
func DefaultConfig() Config {
	return Config{
		FirstEventRate:   10_000_000,
		BaseTimeMs:       DefaultBaseTime.UnixMilli(),
		AvgPersonSize:    200,
		AvgAuctionSize:   500,
		AvgBidSize:       100,
		HotAuctionRatio:  2,
		HotSellersRatio:  4,
		HotBiddersRatio:  4,
		ActivePeople:     1000,
		InFlightAuctions: 100,
	}
}

// Config is the configuration of a nexmark source (the job graph stores it as JSON).
type Config struct {
	// Events bounds the source to events 0..Events-1; nil generates for ever.
	Events *int64 `json:"events,omitempty"`
	// Rate is the events per second of the whole source; 0 is unlimited.
	Rate float64 `json:"rate,omitempty"`
	// Seed selects the events: the same seed and event number give the same event.
	Seed int64 `json:"seed"`
	// FirstEventRate is the generator's event-time rate (events per second of event time):
	// event n happens at BaseTimeMs + n/FirstEventRate seconds, in whole milliseconds.
	FirstEventRate int64 `json:"first_event_rate"`
	// BaseTimeMs is the event time of event 0, in milliseconds since the epoch.
	BaseTimeMs int64 `json:"base_time_ms"`
	// The average sizes, in Nexmark's idealised bytes, the extra field pads each kind to.
	AvgPersonSize  int `json:"avg_person_size"`
	AvgAuctionSize int `json:"avg_auction_size"`
	AvgBidSize     int `json:"avg_bid_size"`
	// A bid is for a hot auction, by a hot bidder, and an auction by a hot seller with
	// odds 1 - 1/ratio.
	HotAuctionRatio int `json:"hot_auction_ratio"`
	HotSellersRatio int `json:"hot_sellers_ratio"`
	HotBiddersRatio int `json:"hot_bidders_ratio"`
	// ActivePeople is how many of the latest people other bidders and sellers are chosen
	// from; InFlightAuctions how many of the latest auctions other bids are for.
	ActivePeople     int `json:"active_people"`
	InFlightAuctions int `json:"in_flight_auctions"`
}

// maxAvgSize bounds the avg-*-size fields: the padding is cut out of a 1 MiB string.
const maxAvgSize = reusableExtraLength / 2

// intFields are the spec fields read into an int of Config, with their bounds.
var intFields = []struct {
	name string
	min  int64
	max  int64
	set  func(c *Config, v int)
}{
	{"avg-person-size", 0, maxAvgSize, func(c *Config, v int) { c.AvgPersonSize = v }},
	{"avg-auction-size", 0, maxAvgSize, func(c *Config, v int) { c.AvgAuctionSize = v }},
	{"avg-bid-size", 0, maxAvgSize, func(c *Config, v int) { c.AvgBidSize = v }},
	{"hot-auction-ratio", 1, math.MaxInt32, func(c *Config, v int) { c.HotAuctionRatio = v }},
	{"hot-sellers-ratio", 1, math.MaxInt32, func(c *Config, v int) { c.HotSellersRatio = v }},
	{"hot-bidders-ratio", 1, math.MaxInt32, func(c *Config, v int) { c.HotBiddersRatio = v }},
	{"active-people", 1, math.MaxInt32 - personIDLead, func(c *Config, v int) { c.ActivePeople = v }},
	{"in-flight-auctions", 1, math.MaxInt32, func(c *Config, v int) { c.InFlightAuctions = v }},
}

// fieldNames are the spec fields of the nexmark type.
var fieldNames = func() []string {
	names := []string{"events", "rate", "seed", "first-event-rate", "base-time"}
	for _, f := range intFields {
		names = append(names, f.name)
	}
	return names
}()

// Type is the nexmark source operator type. Register it in both the JobManager's and the
// TaskManager's registry.
var Type = operator.Define(operator.Type{Name: "nexmark", Role: operator.RoleSource, Fields: fieldNames, NotRescalable: true},
	plan, func(c Config, _, _ *record.Schema) (any, error) { return newSource(c), nil })

func plan(p *operator.Planner) (Config, *operator.Shape) {
	c := DefaultConfig()
	if e, ok := p.Field("events"); ok {
		if n, ok := e.Int(); ok {
			if n <= 0 {
				e.Problemf("must be positive, got %d", n)
			}
			c.Events = &n
		}
	}
	if e, ok := p.Field("rate"); ok {
		if r, ok := e.Float(); ok {
			if r < 0 {
				e.Problemf("must not be negative, got %v", r)
			}
			c.Rate = r
		}
	}
	if e, ok := p.Field("seed"); ok {
		c.Seed, _ = e.Int()
	}
	if e, ok := p.Field("first-event-rate"); ok {
		if r, ok := e.Int(); ok {
			if r <= 0 {
				e.Problemf("must be positive, got %d", r)
			} else {
				c.FirstEventRate = r
			}
		}
	}
	if e, ok := p.Field("base-time"); ok {
		if ms, ok := baseTime(e.Value); ok {
			c.BaseTimeMs = ms
		}
	}
	for _, f := range intFields {
		e, ok := p.Field(f.name)
		if !ok {
			continue
		}
		v, ok := e.Int()
		if !ok {
			continue
		}
		if v < f.min || v > f.max {
			e.Problemf("must be from %d to %d, got %d", f.min, f.max, v)
			continue
		}
		f.set(&c, int(v))
	}
	return c, operator.KnownShape(Schema)
}

// baseTime reads base-time: epoch milliseconds, or an RFC 3339 time.
func baseTime(v spec.Value) (int64, bool) {
	if v.IsInt() {
		return v.Int()
	}
	s, ok := v.String()
	if !ok {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		v.Problemf("want epoch milliseconds or an RFC 3339 time such as %q, got %q",
			DefaultBaseTime.Format(time.RFC3339), s)
		return 0, false
	}
	return t.UnixMilli(), true
}
