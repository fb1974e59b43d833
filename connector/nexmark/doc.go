// Package nexmark is a source operator type, nexmark, that generates the Person, Auction and
// Bid events of the Nexmark benchmark with the logic of the Nexmark generator
// (github.com/nexmark/nexmark, module nexmark-flink, package generator: GeneratorConfig,
// NexmarkGenerator and model/*Generator; defaults of NexmarkConfiguration).
//
//	operators:
//	  - {name: events, type: nexmark, events: 1000000, rate: 50000}
//
// # Fields
//
//   - events: the number of events (> 0); the source ends after events 0..events-1. Without
//     it the source is unbounded.
//   - rate: events per second of the whole source, shared evenly by the subtasks; default
//     unlimited.
//   - seed: selects the events (default 0).
//   - first-event-rate: the event-time rate, events per second (default 10,000,000, the
//     benchmark's rate): event n happens n/first-event-rate seconds after base-time, in
//     whole milliseconds as GeneratorConfig.timestampForEvent computes it. It spaces the
//     timestamps only; rate paces the emission.
//   - base-time: the time of event 0, epoch milliseconds or RFC 3339; default
//     2015-07-15T00:00:00Z, so that runs are reproducible.
//   - avg-person-size, avg-auction-size, avg-bid-size (200, 500, 100): the idealised sizes
//     the extra field pads events to, ±20 %.
//   - hot-auction-ratio, hot-sellers-ratio, hot-bidders-ratio (2, 4, 4): a bid is for a hot
//     auction, by a hot bidder, and an auction by a hot seller, with odds 1 - 1/ratio.
//   - active-people (1000), in-flight-auctions (100): how many of the latest people and
//     auctions the other sellers, bidders and auctions are chosen from.
//
// Bad values are problems of the job spec, reported when it is built.
//
// # Schema
//
// Every event is one row of Schema; the fields of the other kinds are zero (0, "", the
// zero timestamp):
//
//	event_type            int64      0 person, 1 auction, 2 bid (Nexmark's Event.Type)
//	person_id             int64
//	person_name           string
//	person_email_address  string
//	person_credit_card    string
//	person_city           string
//	person_state          string
//	auction_id            int64
//	auction_item_name     string
//	auction_description   string
//	auction_initial_bid   int64
//	auction_reserve       int64
//	auction_expires       timestamp
//	auction_seller        int64      a person_id
//	auction_category      int64
//	bid_auction           int64      an auction_id
//	bid_bidder            int64      a person_id
//	bid_price             int64
//	bid_channel           string
//	bid_url               string
//	date_time             timestamp  the event time, every kind
//	extra                 string     padding to the average size
//
// Timestamps have millisecond precision, as in Nexmark.
//
// # Events
//
// Event n (from 0) is a person, an auction or a bid as n % 50 is 0, 1-3 or 4-49: 2 %, 6 %
// and 92 %. Its ids, prices, names and other fields follow the Java model generators, drawn
// in the same order from the same generator, java.util.SplittableRandom, which splitRandom
// reproduces bit for bit. The events are a pure function of the configuration and n: the
// generator of event n is new SplittableRandom(mix64(seed) + n), where mix64 is
// SplittableRandom's own mixer (mix64(0) = 0, so with seed 0 it is seeded with the event
// id, as the Java generator seeded java.util.Random before nexmark/nexmark#57). So the same
// seed gives the same events whatever the parallelism: subtask i of p emits the events n
// with n % p == i, in increasing order. NewGenerator makes the same events outside a job, to
// compute what a query over them should give.
//
// TestMatchesJavaGenerator compares 1,300 events, every field, with those the Java
// PersonGenerator, AuctionGenerator and BidGenerator make from the same per-event
// SplittableRandom (testdata/ReferenceDump.java says how the reference files were made).
//
// What differs from the Java generator:
//
//   - The Java generator draws all events of a reader from one unseeded SplittableRandom
//     (since nexmark/nexmark#57), so its events differ in every run; no run of it can be
//     compared with this one value for value. Its bid channel URLs and the 1 MiB string the
//     extra padding is cut from are drawn once per JVM, also unseeded; here the URLs are
//     drawn from new SplittableRandom(seed) in the Java order and the string from a fixed
//     seed.
//   - Event ids and numbers start at 0 and make one timeline. Flink's Nexmark table source
//     starts them at 1 (so its first event has id 2) and splits the id range into one
//     contiguous block per subtask, each with its own timeline starting at the base time
//     and delays multiplied by the parallelism. Its base time is the wall clock at
//     planning; here it is fixed unless base-time sets it.
//   - bid_bidder is offset by FIRST_PERSON_ID (1000) once, so that it is a person id; the
//     Java code (since nexmark/nexmark#15) adds it twice.
//   - No out-of-order groups (outOfOrderGroupSize is 1, Nexmark's default), one constant
//     event-time rate (no rate shapes or next-event-rate), no wall-clock event time: the
//     emission pace is the rate field's alone.
//   - The proportions 1:3:46 and the batches of 100 the hot ids come from are fixed.
package nexmark
