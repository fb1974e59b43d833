package kafka

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/operator"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// kafkaOffsetsState is the operator list state of the Kafka source.
const kafkaOffsetsState = "kafka-offsets"

// kafkaIdle is how long Emit asks the task to wait when nothing is buffered.
const kafkaIdle = 5 * time.Millisecond

// kafkaRequestTimeout bounds the metadata, list-offsets and commit requests.
const kafkaRequestTimeout = 30 * time.Second

// kafkaOffset is one element of the offsets state: the next offset to read of a partition.
type kafkaOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

type topicPartition struct {
	topic     string
	partition int32
}

// kafkaSource reads Kafka partitions without a consumer group. Each partition has a fixed
// owner subtask (kafkaPartitionOwner, Flink's rule). The partitions are listed in Open and
// then every partition.discovery.interval.ms (default 5 min; 0 or less: never), so partitions
// and topics (of a topic-pattern) created while the job runs are read too, from their start.
//
// Each subtask's position is the operator list state "kafka-offsets" (union distributed): one
// element per assigned partition with the next offset to read. Because every subtask sees all
// elements on restore, any subtask finds its partitions' offsets after a rescale. A partition
// without a restored offset (new since the checkpoint) is read from its start, so nothing is
// skipped. Without a restore, start offsets are resolved to concrete offsets in Open ("latest"
// included), so a checkpoint taken before the first record still pins the position.
//
// After a checkpoint completes, its offsets are committed to the consumer group group_id as a
// progress signal only (best effort, in the background; failures are logged). The source is
// unbounded: Emit never reports done.
type kafkaSource struct {
	spec   *kafkaspec.SourceConfig
	fields []record.Field // declared json fields

	ctx  *operator.Context
	out  operator.Output
	cl   *kgo.Client
	adm  *kadm.Client
	mine []topicPartition
	next map[topicPartition]int64
	row  record.Row
	hdrs []record.MapEntry // scratch for a record's headers

	pending []*kgo.Record
	rate    operator.RateLimiter

	// splits numbers the partitions for the watermark field after the source, which applies
	// per partition; lastSplit caches the partition of the last record.
	splits    map[topicPartition]int
	lastSplit topicPartition

	list       operator.ListState
	restoredID int64
	restored   map[topicPartition]int64
	snapshots  map[int64][]kafkaOffset // taken, not yet completed or aborted

	commitCtx    context.Context // also stops partition discovery
	cancelCommit context.CancelFunc
	commits      sync.WaitGroup

	discovered  chan []kafkaOffset // new owned partitions from discover (nil: discovery off)
	discoveries sync.WaitGroup

	// ends are the partitions' end offsets (the last stable offset when reading committed
	// records) as of their last fetch, for the pendingRecords metrics: per partition and in
	// all.
	ends     map[topicPartition]partitionEnd
	lagTotal *operator.Metric
}

// partitionEnd is a partition's end offset and its pendingRecords metric.
type partitionEnd struct {
	offset int64
	lag    *operator.Metric
}

func newKafkaSource(s *kafkaspec.SourceConfig) (*kafkaSource, error) {
	if len(s.Brokers) == 0 {
		return nil, errors.New("kafka source: no brokers")
	}
	if len(s.Topics) == 0 && s.TopicPattern == "" {
		return nil, errors.New("kafka source: no topics and no topic pattern")
	}
	k := &kafkaSource{spec: s, fields: s.Schema, snapshots: map[int64][]kafkaOffset{}}
	if s.Format == "json" {
		if _, err := kafkaspec.JSONSchema(k.fields); err != nil {
			return nil, fmt.Errorf("kafka source: %w", err)
		}
	}
	return k, nil
}

// InitializeState registers the offsets state; the restored offsets are applied in Open.
func (k *kafkaSource) InitializeState(sc operator.StateContext) error {
	l, err := sc.ListState(kafkaOffsetsState, pb.ListDistribution_LIST_DISTRIBUTION_UNION)
	if err != nil {
		return fmt.Errorf("kafka source: %w", err)
	}
	k.list, k.restoredID, k.restored = l, sc.RestoredCheckpointID(), nil
	if k.restoredID == 0 {
		return nil
	}
	k.restored = map[topicPartition]int64{}
	for i, b := range l.Get() {
		var o kafkaOffset
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("kafka source: restoring checkpoint %d: offsets element %d: %w", k.restoredID, i, err)
		}
		k.restored[topicPartition{o.Topic, o.Partition}] = o.Offset
	}
	return nil
}

func (k *kafkaSource) Open(ctx *operator.Context, out operator.Output) error {
	k.ctx, k.out = ctx, out
	k.row = make(record.Row, len(k.fields)+len(kafkaspec.Metadata))
	if k.spec.Format != "json" {
		k.row = make(record.Row, kafkaspec.RawSchema.Len())
	}
	k.rate = operator.RateLimiter{Rate: k.spec.Rate / float64(max(ctx.Parallelism, 1)), Now: ctx.Now}
	opts, client, err := clientOpts("source", k.spec.Brokers, k.spec.Properties, false)
	if err != nil {
		return err
	}
	opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if k.spec.Isolation != "read_uncommitted" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka source: %w", err)
	}
	k.cl, k.adm = cl, kadm.NewClient(cl)
	k.commitCtx, k.cancelCommit = context.WithCancel(context.Background())

	rctx, cancel := context.WithTimeout(context.Background(), kafkaRequestTimeout)
	defer cancel()
	all, err := k.partitions(rctx)
	if err != nil {
		return err
	}
	k.splits = map[topicPartition]int{}
	for _, tp := range all {
		if kafkaPartitionOwner(tp, ctx.Parallelism) == ctx.Subtask {
			k.mine = append(k.mine, tp)
			k.declareSplit(tp)
		}
	}
	if err := k.startOffsets(rctx); err != nil {
		return err
	}
	start := map[string]map[int32]kgo.Offset{}
	for _, tp := range k.mine {
		if start[tp.topic] == nil {
			start[tp.topic] = map[int32]kgo.Offset{}
		}
		start[tp.topic][tp.partition] = kgo.NewOffset().At(k.next[tp])
	}
	if len(start) > 0 {
		k.cl.AddConsumePartitions(start)
	}
	ctx.Log().Info("kafka source assigned partitions", "subtask", ctx.Subtask,
		"partitions", len(k.mine), "of", len(all), "restored_checkpoint", k.restoredID)
	k.restored = nil
	if interval := client.Discovery; interval > 0 {
		known := make(map[topicPartition]bool, len(all))
		for _, tp := range all {
			known[tp] = true
		}
		k.discovered = make(chan []kafkaOffset, 1)
		k.discoveries.Add(1)
		go k.discover(k.commitCtx, interval, known)
	}
	return nil
}

// kafkaPartitionOwner is the subtask that reads tp: Flink's KafkaSourceEnumerator rule, the
// topic's start index from its Java hash, then the partitions round-robin from there. A
// partition's owner never changes when partitions or topics are added.
func kafkaPartitionOwner(tp topicPartition, parallelism int) int {
	p := int32(max(parallelism, 1))
	start := (state.KeyHash(record.StringValue(tp.topic), record.String) * 31 & 0x7FFFFFFF) % p
	return int((start + tp.partition) % p)
}

// discover lists the partitions every interval and hands the new ones this subtask owns, with
// their earliest offsets, to Emit. New partitions are read from their start whatever the start
// option (as in Flink), so nothing written to them is skipped. Listing errors are logged and
// retried at the next interval.
func (k *kafkaSource) discover(ctx context.Context, interval time.Duration, known map[topicPartition]bool) {
	defer k.discoveries.Done()
	log := k.ctx.Log()
	t := time.NewTicker(interval)
	defer t.Stop()
	var found []kafkaOffset // owned, not yet taken by Emit
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		offs, err := k.newPartitions(ctx, known)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("kafka source: partition discovery failed; retrying at the next interval", "error", err)
			}
			continue
		}
		if len(offs) == 0 && len(found) == 0 {
			continue
		}
		found = append(found, offs...)
		select {
		case k.discovered <- found:
			found = nil
		default: // Emit has not taken the last batch yet: send both next time
		}
	}
}

// newPartitions lists the partitions, marks the new ones known and returns the earliest
// offsets of the new ones this subtask owns.
func (k *kafkaSource) newPartitions(ctx context.Context, known map[topicPartition]bool) ([]kafkaOffset, error) {
	rctx, cancel := context.WithTimeout(ctx, kafkaRequestTimeout)
	defer cancel()
	all, err := k.partitions(rctx)
	if err != nil {
		return nil, err
	}
	var mine []topicPartition
	var topics []string
	for _, tp := range all {
		if !known[tp] && kafkaPartitionOwner(tp, k.ctx.Parallelism) == k.ctx.Subtask {
			mine = append(mine, tp)
			if !slices.Contains(topics, tp.topic) {
				topics = append(topics, tp.topic)
			}
		}
	}
	var out []kafkaOffset
	if len(mine) > 0 {
		earliest, err := k.adm.ListStartOffsets(rctx, topics...)
		if err == nil {
			err = earliest.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("list start offsets: %w", err)
		}
		for _, tp := range mine {
			o, ok := earliest.Lookup(tp.topic, tp.partition)
			if !ok || o.Err != nil {
				return nil, fmt.Errorf("no start offset for %s[%d]", tp.topic, tp.partition)
			}
			out = append(out, kafkaOffset{Topic: tp.topic, Partition: tp.partition, Offset: o.Offset})
		}
	}
	// Known only once handled: a failed listing retries these partitions next time.
	for _, tp := range all {
		known[tp] = true
	}
	return out, nil
}

// adoptDiscovered starts reading the partitions discovery found, if any.
func (k *kafkaSource) adoptDiscovered() {
	var offs []kafkaOffset
	select {
	case offs = <-k.discovered:
	default:
		return
	}
	add := map[string]map[int32]kgo.Offset{}
	for _, o := range offs {
		tp := topicPartition{o.Topic, o.Partition}
		if _, have := k.next[tp]; have {
			continue
		}
		k.mine = append(k.mine, tp)
		k.declareSplit(tp)
		k.next[tp] = o.Offset
		if add[tp.topic] == nil {
			add[tp.topic] = map[int32]kgo.Offset{}
		}
		add[tp.topic][tp.partition] = kgo.NewOffset().At(o.Offset)
		k.ctx.Log().Info("kafka source: reading a new partition", "topic", tp.topic, "partition", tp.partition, "offset", o.Offset)
	}
	slices.SortFunc(k.mine, compareTopicPartitions)
	if len(add) > 0 {
		k.cl.AddConsumePartitions(add)
		k.cl.ForceMetadataRefresh() // fetch the new partitions now, not at the next refresh
	}
}

func compareTopicPartitions(a, b topicPartition) int {
	return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
}

// partitions lists the partitions of the source's topics, sorted by (topic, partition).
func (k *kafkaSource) partitions(ctx context.Context) ([]topicPartition, error) {
	names := k.spec.Topics
	var re *regexp.Regexp
	if p := k.spec.TopicPattern; p != "" {
		var err error
		if re, err = regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("kafka source: topic pattern: %w", err)
		}
		names = nil // list them all
	}
	topics, err := k.adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka source: list topics: %w", err)
	}
	if re != nil {
		maps.DeleteFunc(topics, func(name string, _ kadm.TopicDetail) bool { return !re.MatchString(name) })
	}
	var out []topicPartition
	for _, name := range k.spec.Topics {
		d, ok := topics[name]
		if !ok {
			return nil, fmt.Errorf("kafka source: topic %q does not exist", name)
		}
		if d.Err != nil {
			return nil, fmt.Errorf("kafka source: topic %q: %w", name, d.Err)
		}
	}
	for name, d := range topics {
		if d.Err != nil {
			return nil, fmt.Errorf("kafka source: topic %q: %w", name, d.Err)
		}
		for p := range d.Partitions {
			out = append(out, topicPartition{name, p})
		}
	}
	slices.SortFunc(out, compareTopicPartitions)
	return out, nil
}

// startOffsets resolves the next offset of every assigned partition: the restored one, else
// the start option's.
func (k *kafkaSource) startOffsets(ctx context.Context) error {
	k.next = make(map[topicPartition]int64, len(k.mine))
	var topics []string
	var unresolved []topicPartition
	for _, tp := range k.mine {
		if off, ok := k.restored[tp]; ok {
			k.next[tp] = off
			continue
		}
		unresolved = append(unresolved, tp)
		if !slices.Contains(topics, tp.topic) {
			topics = append(topics, tp.topic)
		}
	}
	if len(unresolved) == 0 {
		return nil
	}
	earliest, err := k.adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = earliest.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka source: list start offsets: %w", err)
	}
	lookup := func(l kadm.ListedOffsets, tp topicPartition) (int64, bool) {
		o, ok := l.Lookup(tp.topic, tp.partition)
		return o.Offset, ok && o.Err == nil
	}
	var from kadm.ListedOffsets // nil: earliest
	var committed kadm.OffsetResponses
	start := k.spec.Start
	if k.restoredID > 0 {
		start = "earliest" // a partition new since the checkpoint is read from its start
	}
	switch start {
	case "latest":
		if k.spec.Isolation == "read_uncommitted" {
			from, err = k.adm.ListEndOffsets(ctx, topics...)
		} else {
			from, err = k.adm.ListCommittedOffsets(ctx, topics...) // the last stable offset
		}
	case "timestamp":
		from, err = k.adm.ListOffsetsAfterMilli(ctx, k.spec.StartTimestampMs, topics...)
	case "committed":
		committed, err = k.adm.FetchOffsets(ctx, k.spec.GroupID)
		if errors.Is(err, kerr.GroupIDNotFound) {
			committed, err = nil, nil // nothing committed yet: from the start
		}
	}
	if err == nil && from != nil {
		err = from.Error()
	}
	if err == nil && committed != nil {
		err = committed.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka source: resolve start %q: %w", start, err)
	}
	for _, tp := range unresolved {
		off, ok := lookup(earliest, tp)
		if !ok {
			return fmt.Errorf("kafka source: no start offset for %s[%d]", tp.topic, tp.partition)
		}
		if o, ok := lookup(from, tp); ok { // nil from and committed have no offsets
			off = o
		}
		if o, ok := committed.Lookup(tp.topic, tp.partition); ok && o.Err == nil && o.At >= off {
			off = o.At
		}
		k.next[tp] = off
	}
	return nil
}

func (k *kafkaSource) Emit(limit int) (int, time.Duration, bool, error) {
	if k.discovered != nil {
		k.adoptDiscovered()
	}
	limit, wait := k.rate.Allowance(limit)
	if limit == 0 {
		return 0, wait, false, nil
	}
	if len(k.pending) == 0 {
		if len(k.mine) == 0 {
			return 0, 100 * time.Millisecond, false, nil
		}
		// A nil context drains what is buffered without waiting.
		fetches := k.cl.PollRecords(nil, limit) //nolint:staticcheck // nil: do not block
		var ferr error
		fetches.EachError(func(topic string, p int32, err error) {
			var loss *kgo.ErrDataLoss
			if errors.As(err, &loss) {
				k.ctx.Log().Error("kafka source: data loss (offset out of range, reset to the start)",
					"topic", topic, "partition", p, "error", err)
				return
			}
			if ferr == nil {
				ferr = fmt.Errorf("kafka source: fetch %s[%d]: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return 0, 0, false, ferr
		}
		k.noteEnds(fetches)
		k.pending = fetches.Records()
		if len(k.pending) == 0 {
			return 0, kafkaIdle, false, nil
		}
	}
	n := 0
	var err error
	for n < limit && len(k.pending) > 0 {
		r := k.pending[0]
		if r.Partition != k.lastSplit.partition || r.Topic != k.lastSplit.topic || n == 0 {
			k.lastSplit = topicPartition{r.Topic, r.Partition}
			k.ctx.SetSplit(k.splits[k.lastSplit])
		}
		if err = k.fill(r); err == nil {
			err = k.out.Emit(k.row)
		}
		if err != nil {
			break
		}
		k.pending[0] = nil
		k.pending = k.pending[1:]
		k.next[topicPartition{r.Topic, r.Partition}] = r.Offset + 1
		n++
	}
	k.rate.Emitted(n)
	k.updateLag()
	return n, 0, false, err
}

// noteEnds records the end offsets the fetched partitions reported.
func (k *kafkaSource) noteEnds(fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		end := p.HighWatermark
		if k.spec.Isolation != "read_uncommitted" {
			end = p.LastStableOffset
		}
		if end < 0 {
			return // not reported
		}
		tp := topicPartition{p.Topic, p.Partition}
		e, ok := k.ends[tp]
		if !ok {
			if k.ends == nil {
				k.ends = map[topicPartition]partitionEnd{}
				k.lagTotal = k.ctx.Metrics.Metric("pendingRecords")
			}
			e.lag = k.ctx.Metrics.Metric("pendingRecords", "topic", p.Topic, "partition", strconv.Itoa(int(p.Partition)))
		}
		e.offset = end
		k.ends[tp] = e
	})
}

// updateLag sets the pendingRecords metrics: the records between each partition's next offset
// and its end (Flink's source lag).
func (k *kafkaSource) updateLag() {
	if len(k.ends) == 0 {
		return
	}
	var total int64
	for tp, e := range k.ends {
		lag := int64(0)
		if next, ok := k.next[tp]; ok {
			lag = max(e.offset-next, 0)
		}
		e.lag.Set(float64(lag))
		total += lag
	}
	k.lagTotal.Set(float64(total))
}

// declareSplit numbers a partition the source reads from now on and declares it to the
// watermark field after the source: its watermark is held back by the partition until the
// partition has records or is idle.
func (k *kafkaSource) declareSplit(tp topicPartition) {
	if _, ok := k.splits[tp]; !ok {
		k.splits[tp] = len(k.splits)
	}
	k.ctx.DeclareSplit(k.splits[tp])
}

// fill lays out r in k.row.
func (k *kafkaSource) fill(r *kgo.Record) error {
	i := 0
	if k.spec.Format == "json" {
		if err := decodeJSONRecord(r.Value, k.fields, k.row); err != nil {
			return operator.EvalError(k.ctx.OperatorName, fmt.Errorf("kafka record %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err))
		}
		i = len(k.fields)
	} else {
		k.row[0] = record.StringValue(string(r.Key))
		k.row[1] = record.StringValue(string(r.Value))
		i = 2
	}
	k.row[i] = record.StringValue(r.Topic)
	k.row[i+1] = record.IntValue(int64(r.Partition))
	k.row[i+2] = record.IntValue(r.Offset)
	k.row[i+3] = record.TimeValue(r.Timestamp)
	k.hdrs = k.hdrs[:0]
	for _, h := range r.Headers {
		k.hdrs = append(k.hdrs, record.MapEntry{Key: h.Key, Value: string(h.Value)})
	}
	k.row[i+4] = record.MapOf(k.hdrs)
	return nil
}

// decodeJSONRecord decodes a JSON object into the declared fields of row. Absent and null
// fields get the zero value of their type (the record model has no nulls); unknown fields are
// ignored. Timestamps are RFC 3339 strings or epoch milliseconds; bytes are base64 strings;
// maps are objects, whose string values are taken as they are and other values as JSON text.
func decodeJSONRecord(value []byte, fields []record.Field, row record.Row) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(value, &obj); err != nil || obj == nil {
		return fmt.Errorf("value is not a JSON object")
	}
	for i, f := range fields {
		raw, ok := obj[f.Name]
		if !ok || string(raw) == "null" {
			row[i] = record.Value{}
			continue
		}
		v, err := decodeJSONValue(raw, f.Type)
		if err != nil {
			return fmt.Errorf("field %q: %w", f.Name, err)
		}
		row[i] = v
	}
	return nil
}

func decodeJSONValue(raw json.RawMessage, t record.Type) (record.Value, error) {
	switch t {
	case record.Int64:
		n, err := decodeJSON[json.Number](raw, "a number")
		if err != nil {
			return record.Value{}, err
		}
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			f, ferr := n.Float64()
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<63 {
				return record.Value{}, fmt.Errorf("want an int64, got %s", raw)
			}
			v = int64(f)
		}
		return record.IntValue(v), nil
	case record.Float64:
		f, err := decodeJSON[float64](raw, "a number")
		return record.FloatValue(f), err
	case record.Bool:
		b, err := decodeJSON[bool](raw, "true or false")
		return record.BoolValue(b), err
	case record.String:
		s, err := decodeJSON[string](raw, "a string")
		return record.StringValue(s), err
	case record.Bytes:
		s, err := decodeJSON[string](raw, "a base64 string")
		if err != nil {
			return record.Value{}, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return record.Value{}, fmt.Errorf("want a base64 string: %w", err)
		}
		return record.BytesValue(b), nil
	case record.Timestamp:
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			ts, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return record.Value{}, fmt.Errorf("want an RFC 3339 time or epoch milliseconds, got %s", raw)
			}
			return record.TimeValue(ts), nil
		}
		ms, err := decodeJSON[int64](raw, "an RFC 3339 time or epoch milliseconds")
		return record.TimeValue(time.UnixMilli(ms)), err
	case record.Map:
		obj, err := decodeJSON[map[string]json.RawMessage](raw, "an object")
		if err != nil {
			return record.Value{}, err
		}
		entries := make([]record.MapEntry, 0, len(obj))
		for k, v := range obj {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				s = string(v) // a number, bool, array or object as its JSON text
			}
			entries = append(entries, record.MapEntry{Key: k, Value: s})
		}
		return record.MapOf(entries), nil
	}
	return record.Value{}, fmt.Errorf("unsupported type %v", t)
}

// decodeJSON decodes raw as a T; its error says what was wanted ("want a number, got ...").
func decodeJSON[T any](raw json.RawMessage, want string) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("want %s, got %s", want, raw)
	}
	return v, nil
}

// SnapshotState stores the next offset of every assigned partition (sorted).
func (k *kafkaSource) SnapshotState(id int64) error {
	if k.list == nil {
		return fmt.Errorf("kafka source: snapshot of checkpoint %d without InitializeState", id)
	}
	offs := make([]kafkaOffset, len(k.mine))
	elems := make([][]byte, len(k.mine))
	for i, tp := range k.mine {
		offs[i] = kafkaOffset{Topic: tp.topic, Partition: tp.partition, Offset: k.next[tp]}
		elems[i], _ = json.Marshal(offs[i]) // strings and integers cannot fail
	}
	k.list.Update(elems)
	k.snapshots[id] = offs
	return nil
}

// NotifyCheckpointComplete commits the offsets of the newest completed checkpoint to the
// consumer group, in the background. The commit is only a progress signal for monitoring and
// for start: committed; failures are logged, never fatal.
func (k *kafkaSource) NotifyCheckpointComplete(id int64) error {
	var newest int64 = -1
	var offs []kafkaOffset
	for cp, o := range k.snapshots {
		if cp <= id {
			if cp > newest {
				newest, offs = cp, o
			}
			delete(k.snapshots, cp)
		}
	}
	if len(offs) == 0 || k.adm == nil {
		return nil
	}
	var os kadm.Offsets
	for _, o := range offs {
		os.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	}
	group, log := k.spec.GroupID, k.ctx.Log()
	k.commits.Add(1)
	go func() {
		defer k.commits.Done()
		ctx, cancel := context.WithTimeout(k.commitCtx, kafkaRequestTimeout)
		defer cancel()
		resp, err := k.adm.CommitOffsets(ctx, group, os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil && k.commitCtx.Err() == nil {
			log.Warn("kafka source: committing offsets to the consumer group failed (progress signal only)",
				"group", group, "checkpoint", newest, "error", err)
		}
	}()
	return nil
}

// NotifyCheckpointAborted forgets the aborted checkpoint's offsets.
func (k *kafkaSource) NotifyCheckpointAborted(id int64) error {
	delete(k.snapshots, id)
	return nil
}

func (k *kafkaSource) Close() error {
	if k.cancelCommit != nil {
		k.cancelCommit()
	}
	k.commits.Wait()
	k.discoveries.Wait()
	if k.cl != nil {
		k.cl.Close()
	}
	return nil
}

var (
	_ operator.Source             = (*kafkaSource)(nil)
	_ operator.Stateful           = (*kafkaSource)(nil)
	_ operator.Snapshotter        = (*kafkaSource)(nil)
	_ operator.CheckpointListener = (*kafkaSource)(nil)
)
