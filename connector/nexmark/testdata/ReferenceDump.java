// ReferenceDump prints events of the Java Nexmark model generators as nexmark_test.go
// compares them (TestMatchesJavaGenerator), one tab-separated line per event in the order of
// the package's Schema, timestamps in epoch milliseconds. Run it against the sources of
// github.com/nexmark/nexmark (nexmark-flink, commit 6b3646c) with three changes, none to the
// generation logic: BidGenerator's static SplittableRandom is new SplittableRandom(seed) and
// StringsGenerator's new SplittableRandom(0x6e65786d61726bL) instead of unseeded, and a stub
// NexmarkConfiguration (its fields and defaults, without Flink). See the package doc.
//
//	java -Dnexmark.seed=SEED ReferenceDump SEED FIRST_EVENT_RATE EVENTS [FIRST_EVENT]
import com.github.nexmark.flink.NexmarkConfiguration;
import com.github.nexmark.flink.generator.GeneratorConfig;
import com.github.nexmark.flink.generator.model.AuctionGenerator;
import com.github.nexmark.flink.generator.model.BidGenerator;
import com.github.nexmark.flink.generator.model.PersonGenerator;
import com.github.nexmark.flink.model.Auction;
import com.github.nexmark.flink.model.Bid;
import com.github.nexmark.flink.model.Person;
import java.util.SplittableRandom;

public class ReferenceDump {
  static long mix64(long z) {
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  public static void main(String[] args) {
    long seed = Long.parseLong(args[0]);
    NexmarkConfiguration conf = new NexmarkConfiguration();
    conf.firstEventRate = Integer.parseInt(args[1]);
    long events = Long.parseLong(args[2]);
    long first = args.length > 3 ? Long.parseLong(args[3]) : 0;
    long baseTime = 1436918400000L; // 2015-07-15T00:00:00Z
    GeneratorConfig config = new GeneratorConfig(conf, baseTime, 0, 0, -1, 0);
    StringBuilder sb = new StringBuilder();
    for (long n = first; n < first + events; n++) {
      // What NexmarkGenerator.nextEvent does for event n, with a generator seeded per event.
      SplittableRandom random = new SplittableRandom(mix64(seed) + n);
      long ts = config.timestampForEvent(n);
      long rem = n % config.totalProportion;
      String[] f = {"", "0", "", "", "", "", "", "0", "", "", "0", "0", "0", "0", "0", "0", "0", "0", "", "", "", ""};
      if (rem < config.personProportion) {
        Person p = PersonGenerator.nextPerson(n, random, ts, config);
        f[0] = "0"; f[1] = "" + p.id; f[2] = p.name; f[3] = p.emailAddress; f[4] = p.creditCard;
        f[5] = p.city; f[6] = p.state; f[20] = "" + p.dateTime.toEpochMilli(); f[21] = p.extra;
      } else if (rem < config.personProportion + config.auctionProportion) {
        Auction a = AuctionGenerator.nextAuction(n, n, random, ts, config);
        f[0] = "1"; f[7] = "" + a.id; f[8] = a.itemName; f[9] = a.description; f[10] = "" + a.initialBid;
        f[11] = "" + a.reserve; f[12] = "" + a.expires.toEpochMilli(); f[13] = "" + a.seller;
        f[14] = "" + a.category; f[20] = "" + a.dateTime.toEpochMilli(); f[21] = a.extra;
      } else {
        Bid b = BidGenerator.nextBid(n, random, ts, config);
        f[0] = "2"; f[15] = "" + b.auction;
        f[16] = "" + (b.bidder - GeneratorConfig.FIRST_PERSON_ID); // the Java code adds it twice
        f[17] = "" + b.price; f[18] = b.channel; f[19] = b.url; f[20] = "" + b.dateTime.toEpochMilli(); f[21] = b.extra;
      }
      sb.append(String.join("\t", f)).append('\n');
    }
    System.out.print(sb);
  }
}
