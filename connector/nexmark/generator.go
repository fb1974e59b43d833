package nexmark

import (
	"math"
	"math/bits"
	"strconv"
	"sync"
	"time"

	"github.com/goflink/goflink/record"
)

// The Nexmark generator's constants (GeneratorConfig and the model generators).
const (
	firstPersonID   = 1000 // GeneratorConfig.FIRST_PERSON_ID
	firstAuctionID  = 1000 // GeneratorConfig.FIRST_AUCTION_ID
	firstCategoryID = 10   // GeneratorConfig.FIRST_CATEGORY_ID
	numCategories   = 5    // AuctionGenerator.NUM_CATEGORIES

	personProportion  = 1
	auctionProportion = 3
	bidProportion     = 46
	totalProportion   = personProportion + auctionProportion + bidProportion

	personIDLead  = 10 // PersonGenerator.PERSON_ID_LEAD
	auctionIDLead = 10 // AuctionGenerator.AUCTION_ID_LEAD

	// The batch sizes the hot sellers, auctions and bidders are taken from (the *_RATIO
	// constants of the model generators; the configurable ratios are the odds of hotness).
	hotSellerBatch  = 100
	hotAuctionBatch = 100
	hotBidderBatch  = 100

	hotChannelsRatio = 2      // BidGenerator.HOT_CHANNELS_RATIO
	numChannels      = 10_000 // BidGenerator.CHANNELS_NUMBER

	minStringLength = 3 // StringsGenerator.MIN_STRING_LENGTH
	// reusableExtraLength is the length of StringsGenerator.REUSABLE_EXTRA_STRING: the extra
	// padding is a substring of it.
	reusableExtraLength = 1 << 20
)

// The event kinds, as Nexmark's Event.Type numbers them (the event_type field).
const (
	KindPerson  = 0
	KindAuction = 1
	KindBid     = 2
)

var (
	usStates   = []string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	usCities   = []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	firstNames = []string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames  = []string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	hotChannel = [...]string{"Google", "Facebook", "Baidu", "Apple"}

	// personNames holds every "first last" so that a person's name costs no allocation.
	personNames = func() []string {
		names := make([]string, 0, len(firstNames)*len(lastNames))
		for _, f := range firstNames {
			for _, l := range lastNames {
				names = append(names, f+" "+l)
			}
		}
		return names
	}()
)

// reusableExtra is StringsGenerator.REUSABLE_EXTRA_STRING: 1 MiB drawn once, from a fixed
// seed (Java draws it from an unseeded SplittableRandom), whatever the source's seed.
var reusableExtra = sync.OnceValue(func() string {
	r := splitRandom{seed: 0x6e65786d61726b} // "nexmark"
	return string(appendExactString(nil, &r, reusableExtraLength))
})

// channelNames are the names of BidGenerator's CHANNEL_URL_CACHE, "channel-0" on.
var channelNames = sync.OnceValue(func() []string {
	names := make([]string, numChannels)
	for i := range names {
		names[i] = "channel-" + strconv.Itoa(i)
	}
	return names
})

// channels are the URLs of the bid channels: BidGenerator's HOT_URLS and
// CHANNEL_URL_CACHE, which Java draws once per JVM from an unseeded SplittableRandom; here
// they are drawn from new SplittableRandom(seed), in the same order.
type channels struct {
	hotURLs [len(hotChannel)]string
	urls    [numChannels]string
}

func newChannels(seed int64) *channels {
	c := &channels{}
	r := splitRandom{seed: uint64(seed)}
	for i := range c.hotURLs {
		c.hotURLs[i] = baseURL(&r)
	}
	for i := range c.urls {
		url := baseURL(&r)
		if r.intn(10) > 0 {
			id := int32(bits.Reverse32(uint32(i)))
			if id < 0 && id != math.MinInt32 { // Math.abs leaves Integer.MIN_VALUE negative
				id = -id
			}
			url += "&channel_id=" + strconv.Itoa(int(id))
		}
		c.urls[i] = url
	}
	return c
}

// baseURL is BidGenerator.getBaseUrl.
func baseURL(r *splitRandom) string {
	b := []byte("https://www.nexmark.com/")
	for range 3 {
		b = appendString(b, r, 5, '_')
		b = append(b, '/')
	}
	return string(append(b, "item.htm?query=1"...))
}

// appendString appends StringsGenerator.nextString(random, maxLength, special): 3 to
// maxLength-1 random lower-case letters, each a special one with odds 1/13, trimmed of
// leading and trailing spaces (String.trim).
func appendString(b []byte, r *splitRandom, maxLength int32, special byte) []byte {
	start := len(b)
	for n := minStringLength + r.intn(maxLength-minStringLength); n > 0; n-- {
		if r.intn(13) == 0 {
			b = append(b, special)
		} else {
			b = append(b, byte('a'+r.intn(26)))
		}
	}
	end := len(b)
	for end > start && b[end-1] <= ' ' {
		end--
	}
	lead := 0
	for start+lead < end && b[start+lead] <= ' ' {
		lead++
	}
	if lead > 0 {
		copy(b[start:], b[start+lead:end])
	}
	return b[:end-lead]
}

// appendExactString appends length characters as StringsGenerator.nextExactString builds
// them, including its quirk: a negative nextInt gives characters below 'a' ('H' to '`').
func appendExactString(b []byte, r *splitRandom, length int) []byte {
	var rnd, n int32
	for ; length > 0; length-- {
		if n == 0 {
			rnd, n = r.nextInt(), 6
		}
		b = append(b, byte('a'+rnd%26))
		rnd /= 26
		n--
	}
	return b
}

// Generator makes the events of a nexmark source outside a job, for instance to compute a
// query's expected result: Event(n) is event n exactly as a source of the same
// configuration emits it, so events 0..N-1 are what a bounded source of N events emits over
// all its subtasks, whatever its parallelism. It is not safe for concurrent use.
type Generator struct{ g *generator }

// NewGenerator returns the generator of configuration c, which must hold values the spec
// fields accept (start from DefaultConfig); c.Events and c.Rate do not matter.
func NewGenerator(c Config) *Generator { return &Generator{g: newGenerator(c)} }

// Event returns event n (n >= 0) as a new row of Schema.
func (g *Generator) Event(n int64) record.Row {
	row := make(record.Row, numFields)
	g.g.fill(n, row)
	return row
}

// generator makes the events of one source: the event of number n is a pure function of
// the configuration (its seed included) and n. It is not safe for concurrent use (it reuses
// a buffer).
type generator struct {
	cfg      Config
	delayUs  float64 // GeneratorConfig.interEventDelayUs[0]
	baseMs   int64
	channels *channels
	names    []string // channelNames
	extra    string
	rng      splitRandom
	seedMix  uint64 // mix64(seed): event n's generator is new SplittableRandom(seedMix + n)
	buf      []byte
	// auctionEvents is the number of events in which numInFlightAuctions auctions are
	// generated (AuctionGenerator.nextAuctionLengthMs).
	auctionEvents int64
}

func newGenerator(c Config) *generator {
	return &generator{
		cfg:           c,
		delayUs:       1000000.0 / float64(c.FirstEventRate),
		baseMs:        c.BaseTimeMs,
		channels:      newChannels(c.Seed),
		names:         channelNames(),
		extra:         reusableExtra(),
		seedMix:       mix64(uint64(c.Seed)),
		auctionEvents: int64(c.InFlightAuctions) * totalProportion / auctionProportion,
	}
}

// kindOf returns the kind of event n.
func kindOf(n int64) int64 {
	switch rem := n % totalProportion; {
	case rem < personProportion:
		return KindPerson
	case rem < personProportion+auctionProportion:
		return KindAuction
	default:
		return KindBid
	}
}

// timestampMs is GeneratorConfig.timestampForEvent: the event time of event n, in
// milliseconds since the epoch.
func (g *generator) timestampMs(n int64) int64 {
	return g.baseMs + int64(float64(n)*g.delayUs)/1000
}

// lastPersonID is PersonGenerator.lastBase0PersonId: the last person id (base 0) generated
// by event n, n's own when it is a person.
func lastPersonID(n int64) int64 {
	epoch, offset := n/totalProportion, n%totalProportion
	if offset >= personProportion {
		offset = personProportion - 1
	}
	return epoch*personProportion + offset
}

// lastAuctionID is AuctionGenerator.lastBase0AuctionId: the last auction id (base 0)
// generated by event n, n's own when it is an auction; -1 before the first auction.
func lastAuctionID(n int64) int64 {
	epoch, offset := n/totalProportion, n%totalProportion
	switch {
	case offset < personProportion:
		epoch--
		offset = auctionProportion - 1
	case offset >= personProportion+auctionProportion:
		offset = auctionProportion - 1
	default:
		offset -= personProportion
	}
	return epoch*auctionProportion + offset
}

// nextPersonID is PersonGenerator.nextBase0PersonId: one of the active people, or one of the
// next personIDLead ones.
func (g *generator) nextPersonID(n int64) int64 {
	people := lastPersonID(n) + 1
	active := min(people, int64(g.cfg.ActivePeople))
	return people - active + g.rng.longn(active+personIDLead)
}

// nextAuctionID is AuctionGenerator.nextBase0AuctionId: one of the auctions likely in
// flight, or one of the next auctionIDLead ones.
func (g *generator) nextAuctionID(n int64) int64 {
	hi := lastAuctionID(n)
	lo := max(hi-int64(g.cfg.InFlightAuctions), 0)
	return lo + g.rng.longn(hi-lo+1+auctionIDLead)
}

// price is PriceGenerator.nextPrice: 10^(6u) * 100 rounded, from 100 to 100,000,000.
func (g *generator) price() int64 {
	return int64(math.Round(math.Pow(10, g.rng.float64()*6) * 100)) // Math.round, for x > 0
}

// nextExtra is StringsGenerator.nextExtra: padding that brings currentSize to avg on
// average (±20 %).
func (g *generator) nextExtra(currentSize, avg int) string {
	if currentSize > avg {
		return ""
	}
	avg -= currentSize
	delta := int(math.Round(float64(avg) * 0.2))
	size := avg - delta
	if delta != 0 {
		size += int(g.rng.intn(int32(2 * delta)))
	}
	if size < reusableExtraLength/2 {
		off := int(g.rng.intn(int32(reusableExtraLength - size)))
		return g.extra[off : off+size]
	}
	return string(appendExactString(nil, &g.rng, size))
}

// fill sets row (len(Schema)) to event n.
func (g *generator) fill(n int64, row record.Row) {
	g.rng.seed = g.seedMix + uint64(n)
	ts := g.timestampMs(n)
	clear(row)
	row[fEventType] = record.IntValue(kindOf(n))
	row[fDateTime] = record.TimeValue(time.UnixMilli(ts))
	switch kindOf(n) {
	case KindPerson:
		g.person(n, row)
	case KindAuction:
		g.auction(n, ts, row)
	default:
		g.bid(n, row)
	}
}

// person is PersonGenerator.nextPerson.
func (g *generator) person(n int64, row record.Row) {
	r := &g.rng
	first := r.intn(int32(len(firstNames)))
	name := personNames[int(first)*len(lastNames)+int(r.intn(int32(len(lastNames))))]
	b := appendString(g.buf[:0], r, 7, ' ')
	b = append(b, '@')
	b = appendString(b, r, 5, ' ')
	b = append(b, ".com"...)
	emailLen := len(b)
	for i := range 4 {
		if i > 0 {
			b = append(b, ' ')
		}
		c := r.intn(10000)
		b = append(b, byte('0'+c/1000), byte('0'+c/100%10), byte('0'+c/10%10), byte('0'+c%10))
	}
	g.buf = b
	s := string(b)
	email, card := s[:emailLen], s[emailLen:]
	city := usCities[r.intn(int32(len(usCities)))]
	state := usStates[r.intn(int32(len(usStates)))]
	size := 8 + len(name) + len(email) + len(card) + len(city) + len(state)

	row[fPersonID] = record.IntValue(lastPersonID(n) + firstPersonID)
	row[fPersonName] = record.StringValue(name)
	row[fPersonEmail] = record.StringValue(email)
	row[fPersonCard] = record.StringValue(card)
	row[fPersonCity] = record.StringValue(city)
	row[fPersonState] = record.StringValue(state)
	row[fExtra] = record.StringValue(g.nextExtra(size, g.cfg.AvgPersonSize))
}

// auction is AuctionGenerator.nextAuction.
func (g *generator) auction(n, ts int64, row record.Row) {
	r := &g.rng
	var seller int64
	if r.intn(int32(g.cfg.HotSellersRatio)) > 0 {
		seller = lastPersonID(n) / hotSellerBatch * hotSellerBatch
	} else {
		seller = g.nextPersonID(n)
	}
	category := firstCategoryID + int64(r.intn(numCategories))
	initialBid := g.price()
	// nextAuctionLengthMs: on average the time until numInFlightAuctions more auctions.
	horizon := g.timestampMs(n+g.auctionEvents) - ts
	expires := ts + 1 + r.longn(max(horizon*2, 1))
	b := appendString(g.buf[:0], r, 20, ' ')
	nameLen := len(b)
	b = appendString(b, r, 100, ' ')
	g.buf = b
	s := string(b)
	name, desc := s[:nameLen], s[nameLen:]
	reserve := initialBid + g.price()
	size := 8 + len(name) + len(desc) + 8 + 8 + 8 + 8 + 8

	row[fAuctionID] = record.IntValue(lastAuctionID(n) + firstAuctionID)
	row[fAuctionItemName] = record.StringValue(name)
	row[fAuctionDescription] = record.StringValue(desc)
	row[fAuctionInitialBid] = record.IntValue(initialBid)
	row[fAuctionReserve] = record.IntValue(reserve)
	row[fAuctionExpires] = record.TimeValue(time.UnixMilli(expires))
	row[fAuctionSeller] = record.IntValue(seller + firstPersonID)
	row[fAuctionCategory] = record.IntValue(category)
	row[fExtra] = record.StringValue(g.nextExtra(size, g.cfg.AvgAuctionSize))
}

// bid is BidGenerator.nextBid, except that the bidder is offset by FIRST_PERSON_ID once
// (the Java code adds it twice, so its bidders are no person ids).
func (g *generator) bid(n int64, row record.Row) {
	r := &g.rng
	var auction int64
	if r.intn(int32(g.cfg.HotAuctionRatio)) > 0 {
		auction = lastAuctionID(n) / hotAuctionBatch * hotAuctionBatch
	} else {
		auction = g.nextAuctionID(n)
	}
	var bidder int64
	if r.intn(int32(g.cfg.HotBiddersRatio)) > 0 {
		// The second person of the batch, so that hot bidders and hot sellers differ.
		bidder = lastPersonID(n)/hotBidderBatch*hotBidderBatch + 1
	} else {
		bidder = g.nextPersonID(n)
	}
	price := g.price()
	var channel, url string
	if r.intn(hotChannelsRatio) > 0 {
		i := r.intn(int32(len(hotChannel)))
		channel, url = hotChannel[i], g.channels.hotURLs[i]
	} else {
		i := r.intn(numChannels)
		channel, url = g.names[i], g.channels.urls[i]
	}

	row[fBidAuction] = record.IntValue(auction + firstAuctionID)
	row[fBidBidder] = record.IntValue(bidder + firstPersonID)
	row[fBidPrice] = record.IntValue(price)
	row[fBidChannel] = record.StringValue(channel)
	row[fBidURL] = record.StringValue(url)
	row[fExtra] = record.StringValue(g.nextExtra(8+8+8+8, g.cfg.AvgBidSize))
}
