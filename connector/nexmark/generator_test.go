package nexmark

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goflink/goflink/record"
)

// TestSplitRandomMatchesJava checks splitRandom against values java.util.SplittableRandom
// printed (OpenJDK 17).
func TestSplitRandomMatchesJava(t *testing.T) {
	r := splitRandom{seed: 0}
	if got, want := r.nextLong(), int64(-2152535657050944081); got != want {
		t.Errorf("new SplittableRandom(0).nextLong() = %d, want %d", got, want)
	}
	r = splitRandom{seed: 12345}
	got := fmt.Sprint(r.nextInt(), r.intn(13), r.intn(10000), r.intn(1<<20), r.intn(2147483647), r.nextLong(), r.float64())
	if want := "-1526108289 7 9675 763244 493042293 6217189988962137646 0.12265221496336498"; got != want {
		t.Errorf("new SplittableRandom(12345) draws %s, want %s", got, want)
	}
}

// formatRow prints a row as testdata/ReferenceDump.java prints an event.
func formatRow(row record.Row) string {
	f := make([]string, numFields)
	for i, v := range row {
		switch Schema.Field(i).Type {
		case record.Int64:
			f[i] = fmt.Sprint(v.Int())
		case record.Timestamp:
			if v != (record.Value{}) {
				f[i] = fmt.Sprint(v.Time().UnixMilli())
			} else {
				f[i] = "0"
			}
		default:
			f[i] = v.Str()
		}
	}
	return strings.Join(f, "\t")
}

// TestMatchesJavaGenerator compares events with those the Java model generators
// (PersonGenerator, AuctionGenerator, BidGenerator of nexmark-flink) make from the same
// per-event SplittableRandom; testdata/ReferenceDump.java says how the files were made.
func TestMatchesJavaGenerator(t *testing.T) {
	for _, tc := range []struct {
		file              string
		seed, rate, first int64
		events            int64
	}{
		{"testdata/java-seed0-rate10000000.tsv", 0, 10_000_000, 0, 500},
		{"testdata/java-seed42-rate1000.tsv", 42, 1000, 0, 500},
		// Far enough for the active-people and in-flight-auctions windows to apply.
		{"testdata/java-seed-3-rate1000-from123456789.tsv", -3, 1000, 123_456_789, 300},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c := DefaultConfig()
			c.Seed, c.FirstEventRate = tc.seed, tc.rate
			g := newGenerator(c)
			row := make(record.Row, numFields)
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			n := tc.first
			for ; sc.Scan(); n++ {
				g.fill(n, row)
				if got, want := formatRow(row), sc.Text(); got != want {
					t.Fatalf("event %d:\n got %q\nwant %q", n, got, want)
				}
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			if n != tc.first+tc.events {
				t.Fatalf("compared %d events, want %d", n-tc.first, tc.events)
			}
		})
	}
}

// TestProportions checks the kinds of 5,000 events: 1 person, 3 auctions, 46 bids in every 50.
func TestProportions(t *testing.T) {
	g := newGenerator(DefaultConfig())
	row := make(record.Row, numFields)
	var counts [3]int
	for n := range int64(5000) {
		g.fill(n, row)
		counts[row[fEventType].Int()]++
		if n%50 == 49 {
			block := n / 50
			if want := [3]int{int(block + 1), 3 * int(block+1), 46 * int(block+1)}; counts != want {
				t.Fatalf("after %d events: %d persons, %d auctions, %d bids, want %v", n+1, counts[0], counts[1], counts[2], want)
			}
		}
	}
	if want := [3]int{100, 300, 4600}; counts != want {
		t.Errorf("counts = %v, want %v", counts, want)
	}
}

// TestIDsConsistent follows 20,000 events and checks the Nexmark id rules: persons and
// auctions are numbered from 1000 in order; a seller or bidder is a person already generated
// or one of the next PERSON_ID_LEAD (10); a bid is for an auction already generated or one of
// the next AUCTION_ID_LEAD, and, when not one of the hot auctions, one of the last
// in-flight-auctions.
func TestIDsConsistent(t *testing.T) {
	c := DefaultConfig()
	g := newGenerator(c)
	row := make(record.Row, numFields)
	lastPerson, lastAuction := int64(firstPersonID-1), int64(firstAuctionID-1)
	hotSellers, hotBids := 0, 0
	sellers := map[int64]bool{}
	for n := range int64(20_000) {
		g.fill(n, row)
		switch row[fEventType].Int() {
		case KindPerson:
			if id := row[fPersonID].Int(); id != lastPerson+1 {
				t.Fatalf("event %d: person %d after %d", n, id, lastPerson)
			}
			lastPerson++
		case KindAuction:
			if id := row[fAuctionID].Int(); id != lastAuction+1 {
				t.Fatalf("event %d: auction %d after %d", n, id, lastAuction)
			}
			lastAuction++
			s := row[fAuctionSeller].Int()
			if s < firstPersonID || s > lastPerson+personIDLead {
				t.Fatalf("event %d: seller %d, last person %d", n, s, lastPerson)
			}
			if s == (lastPerson-firstPersonID)/hotSellerBatch*hotSellerBatch+firstPersonID {
				hotSellers++
			}
			sellers[s] = true
			if exp, at := row[fAuctionExpires].Time(), row[fDateTime].Time(); !exp.After(at) {
				t.Fatalf("event %d: auction expires at %v, not after its time %v", n, exp, at)
			}
		case KindBid:
			a := row[fBidAuction].Int()
			if a < firstAuctionID || a > lastAuction+auctionIDLead {
				t.Fatalf("event %d: bid for auction %d, last auction %d", n, a, lastAuction)
			}
			hot := (lastAuction-firstAuctionID)/hotAuctionBatch*hotAuctionBatch + firstAuctionID
			if a == hot {
				hotBids++
			} else if a < lastAuction-int64(c.InFlightAuctions) {
				t.Fatalf("event %d: bid for auction %d, neither hot (%d) nor in flight (last %d)", n, a, hot, lastAuction)
			}
			if b := row[fBidBidder].Int(); b < firstPersonID || b > lastPerson+personIDLead {
				t.Fatalf("event %d: bidder %d, last person %d", n, b, lastPerson)
			}
			if p := row[fBidPrice].Int(); p < 100 || p > 100_000_000 {
				t.Fatalf("event %d: price %d", n, p)
			}
		}
	}
	// Odds 1 - 1/4 of a hot seller, 1 - 1/2 (and a little more) of a hot auction.
	if auctions := lastAuction - firstAuctionID + 1; hotSellers < int(auctions)*65/100 || hotSellers > int(auctions)*85/100 {
		t.Errorf("%d of %d auctions by a hot seller, want about 3/4", hotSellers, auctions)
	}
	if bids := 20_000 * 46 / 50; hotBids < bids*45/100 || hotBids > bids*60/100 {
		t.Errorf("%d of %d bids for a hot auction, want about 1/2", hotBids, bids)
	}
	if len(sellers) < 50 {
		t.Errorf("only %d distinct sellers", len(sellers))
	}
}

// TestTimestamps checks that event n happens at base-time + n/first-event-rate, in whole
// milliseconds.
func TestTimestamps(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, rate := range []int64{1, 3, 1000, 7_000, 10_000_000} {
		c := DefaultConfig()
		c.FirstEventRate, c.BaseTimeMs = rate, base.UnixMilli()
		g := newGenerator(c)
		row := make(record.Row, numFields)
		for _, n := range []int64{0, 1, 2, 49, 50, 999, 12_345, 1_000_000} {
			g.fill(n, row)
			want := base.Add(time.Duration(n * int64(time.Second) / rate).Truncate(time.Millisecond))
			got := row[fDateTime].Time()
			// Java's double arithmetic (n * (1e6/rate), truncated) may fall 1 ms short when
			// 1e6/rate is inexact; it is exact for the rates that divide 1e6.
			if !got.Equal(want) && (1_000_000%rate == 0 || !got.Equal(want.Add(-time.Millisecond))) {
				t.Errorf("rate %d: event %d at %v, want %v", rate, n, got, want)
			}
		}
	}
}

// TestFieldFormats checks the person and bid fields against the Nexmark formats.
func TestFieldFormats(t *testing.T) {
	g := newGenerator(DefaultConfig())
	row := make(record.Row, numFields)
	for n := range int64(2000) {
		g.fill(n, row)
		switch row[fEventType].Int() {
		case KindPerson:
			if card := row[fPersonCard].Str(); len(card) != 19 || card[4] != ' ' || card[9] != ' ' || card[14] != ' ' {
				t.Fatalf("event %d: credit card %q", n, card)
			}
			if e := row[fPersonEmail].Str(); !strings.HasSuffix(e, ".com") || !strings.Contains(e, "@") {
				t.Fatalf("event %d: email %q", n, e)
			}
			if row[fBidURL].Str() != "" || row[fAuctionID].Int() != 0 {
				t.Fatalf("event %d: a person with bid or auction fields: %v", n, row)
			}
		case KindBid:
			if u := row[fBidURL].Str(); !strings.HasPrefix(u, "https://www.nexmark.com/") {
				t.Fatalf("event %d: url %q", n, u)
			}
			if size := 32 + len(row[fExtra].Str()); size < 80 || size > 120 {
				t.Fatalf("event %d: bid of %d bytes, want 100 ± 20 %%", n, size)
			}
		}
	}
}
