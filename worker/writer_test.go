package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

var (
	strIntSchema = record.MustSchema(
		record.Field{Name: "key", Type: record.String},
		record.Field{Name: "value", Type: record.Int64},
	)
	intIntSchema = record.MustSchema(
		record.Field{Name: "key", Type: record.Int64},
		record.Field{Name: "value", Type: record.Int64},
	)
	strSchema = record.MustSchema(record.Field{Name: "s", Type: record.String})
	intSchema = record.MustSchema(record.Field{Name: "value", Type: record.Int64})
)

// writerSetup describes one recordWriter under test.
type writerSetup struct {
	schema   *record.Schema
	part     pb.Partitioner
	key      string // HASH only
	subtask  int
	n        int // consumer parallelism
	maxPar   int
	capacity int // subpartition queue capacity
}

type testWriter struct {
	*recordWriter
	p   *resultPartition
	out *int64
}

func newTestWriter(ctx context.Context, t *testing.T, s writerSetup) *testWriter {
	t.Helper()
	if s.maxPar == 0 {
		s.maxPar = 128
	}
	if s.capacity == 0 {
		s.capacity = 1024
	}
	e := &pb.JobEdge{Partitioner: s.part, Key: s.key, Schema: s.schema.Proto()}
	p := newResultPartition("test/0/0/0/e0", subpartitions(e, s.n), s.capacity, nil)
	out := new(int64)
	w, err := newRecordWriter(ctx, e,
		&pb.JobVertex{Parallelism: int32(s.n), MaxParallelism: int32(s.maxPar)},
		s.subtask, p, out, nil)
	if err != nil {
		t.Fatalf("newRecordWriter(%+v): %v", s, err)
	}
	return &testWriter{recordWriter: w, p: p, out: out}
}

func (w *testWriter) emit(t *testing.T, rows ...record.Row) {
	t.Helper()
	for _, r := range rows {
		if err := w.Emit(r); err != nil {
			t.Fatalf("Emit(%v): %v", r, err)
		}
	}
}

// queued takes every buffer currently queued on subpartition c, without waiting.
func (w *testWriter) queued(c int) []*buffer {
	var out []*buffer
	for {
		b, _ := w.p.subs[c].poll(true)
		if b == nil {
			return out
		}
		out = append(out, b)
	}
}

// decode returns the rows of a data buffer; it fails unless the buffer holds exactly
// b.records rows and nothing else.
func decode(t *testing.T, s *record.Schema, b *buffer) []record.Row {
	t.Helper()
	if b.event != nil {
		t.Fatalf("decode: buffer is event %v, want data", b.event)
	}
	data := b.data
	rows := make([]record.Row, 0, b.records)
	for i := range b.records {
		dst := make(record.Row, s.Len())
		n, err := record.DecodeRow(data, s, dst)
		if err != nil {
			t.Fatalf("decode record %d of %d: %v", i, b.records, err)
		}
		rows = append(rows, dst)
		data = data[n:]
	}
	if len(data) != 0 {
		t.Fatalf("buffer of %d records has %d trailing bytes", b.records, len(data))
	}
	return rows
}

// decodeAll decodes the data buffers of bufs in order.
func decodeAll(t *testing.T, s *record.Schema, bufs []*buffer) []record.Row {
	t.Helper()
	var rows []record.Row
	for _, b := range bufs {
		rows = append(rows, decode(t, s, b)...)
	}
	return rows
}

func rowsEqual(a, b []record.Row) bool { return slices.EqualFunc(a, b, slices.Equal) }

func TestRecordWriterHash(t *testing.T) {
	strKeys := []string{"", "a", "b", "apple", "banana", "héllo", "日本", "key-42", "x"}
	tests := []struct {
		name   string
		schema *record.Schema
		n      int
		maxPar int
		rows   func(i int) record.Row
		// key is the key expression (default "key") and keyOf what it evaluates to.
		key   string
		keyOf func(record.Row) record.Value
	}{
		{"string keys n3", strIntSchema, 3, 128, func(i int) record.Row {
			return record.Row{record.StringValue(strKeys[i%len(strKeys)] + fmt.Sprint(i%17)), record.IntValue(int64(i))}
		}, "", nil},
		{"int keys n4", intIntSchema, 4, 128, func(i int) record.Row {
			return record.Row{record.IntValue(int64(i%50 - 25)), record.IntValue(int64(i))}
		}, "", nil},
		{"int keys n1", intIntSchema, 1, 128, func(i int) record.Row {
			return record.Row{record.IntValue(int64(i * 7919)), record.IntValue(int64(i))}
		}, "", nil},
		{"int keys n5 maxPar 7", intIntSchema, 5, 7, func(i int) record.Row {
			return record.Row{record.IntValue(int64(i % 31)), record.IntValue(int64(i))}
		}, "", nil},
		{"string keys n2 maxPar 32768", strIntSchema, 2, state.UpperBoundMaxParallelism, func(i int) record.Row {
			return record.Row{record.StringValue(fmt.Sprintf("user-%d", i%23)), record.IntValue(int64(i))}
		}, "", nil},
		{"int keys modulo a power of two n3", intIntSchema, 3, 128, func(i int) record.Row {
			return record.Row{record.IntValue(int64(i*7919 - 5000)), record.IntValue(int64(i))}
		}, "key % 1024", func(r record.Row) record.Value { return record.IntValue(r[0].Int() % 1024) }},
		{"int keys expression n2 maxPar 1000", intIntSchema, 2, 1000, func(i int) record.Row {
			return record.Row{record.IntValue(int64(i)), record.IntValue(int64(i * 3))}
		}, "key * 31 + value % 7", func(r record.Row) record.Value { return record.IntValue(r[0].Int()*31 + r[1].Int()%7) }},
		{"string keys concatenated n4", strIntSchema, 4, 128, func(i int) record.Row {
			return record.Row{record.StringValue(strKeys[i%len(strKeys)]), record.IntValue(int64(i))}
		}, "key + '/' + key", func(r record.Row) record.Value { return record.StringValue(r[0].Str() + "/" + r[0].Str()) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t.Context(), t, writerSetup{
				schema: tc.schema, part: pb.Partitioner_PARTITIONER_HASH, key: cmp.Or(tc.key, "key"), n: tc.n, maxPar: tc.maxPar,
			})
			keyOf := tc.keyOf
			if keyOf == nil {
				keyOf = func(r record.Row) record.Value { return r[0] }
			}
			const total = 2000
			want := make([][]record.Row, tc.n) // per channel, in emit order
			for i := range total {
				r := tc.rows(i)
				w.emit(t, r)
				kt := tc.schema.Field(0).Type
				c := state.OperatorIndexForKeyGroup(state.KeyGroup(keyOf(r), kt, tc.maxPar), tc.maxPar, tc.n)
				want[c] = append(want[c], r)
			}
			if err := w.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			used := 0
			for c := range tc.n {
				got := decodeAll(t, tc.schema, w.queued(c))
				if !rowsEqual(got, want[c]) {
					t.Errorf("channel %d got %d rows %.200v, want %d rows %.200v", c, len(got), got, len(want[c]), want[c])
				}
				if len(got) > 0 {
					used++
				}
			}
			if tc.n > 1 && used < 2 {
				t.Errorf("all keys went to %d channel(s) of %d", used, tc.n)
			}
			if *w.out != total {
				t.Errorf("out counter = %d, want %d", *w.out, total)
			}
		})
	}
}

func TestRecordWriterHashKeyExpression(t *testing.T) {
	// The key is an expression over the record, not necessarily a field.
	w := newTestWriter(t.Context(), t, writerSetup{
		schema: intIntSchema, part: pb.Partitioner_PARTITIONER_HASH, key: "key % 10", n: 3,
	})
	want := make([][]record.Row, 3)
	for i := range 300 {
		r := record.Row{record.IntValue(int64(i)), record.IntValue(int64(-i))}
		w.emit(t, r)
		c := state.OperatorIndexForKeyGroup(state.KeyGroup(record.IntValue(int64(i%10)), record.Int64, 128), 128, 3)
		want[c] = append(want[c], r)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		if got := decodeAll(t, intIntSchema, w.queued(c)); !rowsEqual(got, want[c]) {
			t.Errorf("channel %d got %d rows, want %d", c, len(got), len(want[c]))
		}
	}
}

func TestRecordWriterForward(t *testing.T) {
	tests := []struct {
		name    string
		subtask int
		n       int
	}{
		{"subtask 0 of 1", 0, 1},
		{"subtask 1 of 3", 1, 3},
		{"subtask 3 of 4", 3, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t.Context(), t, writerSetup{
				schema: intSchema, part: pb.Partitioner_PARTITIONER_FORWARD, subtask: tc.subtask, n: tc.n,
			})
			var want []record.Row
			for i := range 100 {
				r := record.Row{record.IntValue(int64(i))}
				w.emit(t, r)
				want = append(want, r)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			// A forward edge connects subtask i to consumer subtask i only: one subpartition.
			if n := len(w.p.subs); n != 1 {
				t.Fatalf("forward partition has %d subpartitions, want 1", n)
			}
			if got := decodeAll(t, intSchema, w.queued(0)); !rowsEqual(got, want) {
				t.Errorf("forward subpartition got %d rows, want %d", len(got), len(want))
			}
		})
	}
}

func TestNewRecordWriterErrors(t *testing.T) {
	tests := []struct {
		name    string
		part    pb.Partitioner
		key     string
		subtask int
		n       int
	}{
		{"forward to fewer consumers", pb.Partitioner_PARTITIONER_FORWARD, "", 2, 2},
		{"unspecified partitioner", pb.Partitioner_PARTITIONER_UNSPECIFIED, "", 0, 2},
		{"hash key not in schema", pb.Partitioner_PARTITIONER_HASH, "nope", 0, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newResultPartition("k", tc.n, 1, nil)
			_, err := newRecordWriter(t.Context(),
				&pb.JobEdge{Partitioner: tc.part, Key: tc.key, Schema: intSchema.Proto()},
				&pb.JobVertex{Parallelism: int32(tc.n), MaxParallelism: 128}, tc.subtask, p, new(int64), nil)
			if err == nil {
				t.Errorf("newRecordWriter(%v, key %q, subtask %d of %d) = nil error, want an error", tc.part, tc.key, tc.subtask, tc.n)
			}
		})
	}
}

func TestRecordWriterRebalance(t *testing.T) {
	tests := []struct {
		name    string
		subtask int
		n       int
	}{
		{"subtask 0 of 1", 0, 1},
		{"subtask 0 of 3", 0, 3},
		{"subtask 2 of 3", 2, 3},
		{"subtask 4 to 3 consumers", 4, 3},
		{"subtask 7 to 5 consumers", 7, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t.Context(), t, writerSetup{
				schema: intSchema, part: pb.Partitioner_PARTITIONER_REBALANCE, subtask: tc.subtask, n: tc.n,
			})
			const total = 101
			want := make([][]record.Row, tc.n)
			for i := range total {
				r := record.Row{record.IntValue(int64(i))}
				w.emit(t, r)
				c := (tc.subtask + i) % tc.n
				want[c] = append(want[c], r)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			for c := range tc.n {
				if got := decodeAll(t, intSchema, w.queued(c)); !rowsEqual(got, want[c]) {
					t.Errorf("channel %d got %.120v, want %.120v", c, got, want[c])
				}
			}
		})
	}
}

func TestRecordWriterPacksBuffers(t *testing.T) {
	tests := []struct {
		name   string
		schema *record.Schema
		n      int
		total  int
		row    func(i int) record.Row
	}{
		{"fixed width", intSchema, 1, 10_000, func(i int) record.Row {
			return record.Row{record.IntValue(int64(i))}
		}},
		{"fixed width two channels", intSchema, 2, 20_001, func(i int) record.Row {
			return record.Row{record.IntValue(int64(i))}
		}},
		{"variable strings", strSchema, 1, 5_000, func(i int) record.Row {
			return record.Row{record.StringValue(strings.Repeat(string(rune('a'+i%26)), i*37%700))}
		}},
		{"large strings", strSchema, 3, 300, func(i int) record.Row {
			return record.Row{record.StringValue(strings.Repeat("z", 3000+i*131%20_000))}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t.Context(), t, writerSetup{
				schema: tc.schema, part: pb.Partitioner_PARTITIONER_REBALANCE, n: tc.n, capacity: 4096,
			})
			want := make([][]record.Row, tc.n)
			for i := range tc.total {
				r := tc.row(i)
				w.emit(t, r)
				want[i%tc.n] = append(want[i%tc.n], r)
			}
			if got := *w.out; got != int64(tc.total) {
				t.Errorf("out counter = %d, want %d", got, tc.total)
			}
			full := make([][]*buffer, tc.n) // buffers sent by Emit because they were full
			for c := range tc.n {
				full[c] = w.queued(c)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			for c := range tc.n {
				rest := w.queued(c)
				if len(rest) > 1 {
					t.Errorf("channel %d: Flush queued %d buffers, want at most 1", c, len(rest))
				}
				bufs := append(full[c], rest...)
				records := 0
				for i, b := range bufs {
					if len(b.data) > maxBufferBytes {
						t.Errorf("channel %d buffer %d holds %d bytes, want at most %d", c, i, len(b.data), maxBufferBytes)
					}
					if b.records < 1 {
						t.Errorf("channel %d buffer %d holds %d records, want at least 1", c, i, b.records)
					}
					records += b.records
				}
				if records != len(want[c]) {
					t.Errorf("channel %d buffers count %d records, want %d", c, records, len(want[c]))
				}
				// Every buffer sent before Flush was full: the next record would not have fit.
				for i, b := range full[c] {
					if i+1 == len(bufs) {
						break // the last record filled the buffer exactly
					}
					next := bufs[i+1]
					first := decode(t, tc.schema, next)[0]
					if room := maxBufferBytes - len(b.data); room >= len(record.AppendRow(nil, tc.schema, first)) {
						t.Errorf("channel %d buffer %d was sent with %d bytes free, but the next record needs %d",
							c, i, room, len(record.AppendRow(nil, tc.schema, first)))
					}
				}
				if got := decodeAll(t, tc.schema, bufs); !rowsEqual(got, want[c]) {
					t.Errorf("channel %d decoded %d rows that differ from the %d emitted", c, len(got), len(want[c]))
				}
			}
		})
	}
}

func TestRecordWriterBuffersUntilFull(t *testing.T) {
	w := newTestWriter(t.Context(), t, writerSetup{schema: intSchema, part: pb.Partitioner_PARTITIONER_FORWARD, n: 1})
	perBuffer := maxBufferBytes / 8 // int64 rows take 8 bytes
	for i := range perBuffer - 1 {
		w.emit(t, record.Row{record.IntValue(int64(i))})
	}
	if got := w.queued(0); len(got) != 0 {
		t.Fatalf("after %d small records %d buffers were queued, want 0 before the buffer is full", perBuffer-1, len(got))
	}
	w.emit(t, record.Row{record.IntValue(-1)})
	got := w.queued(0)
	if len(got) != 1 || got[0].records != perBuffer {
		t.Fatalf("after %d records queued %d buffers, want 1 of %d records", perBuffer, len(got), perBuffer)
	}
}

// Rows of an empty schema take no bytes; a buffer of them is flushed at maxBufferRecords, the
// most a reader accepts.
func TestRecordWriterFlushesEmptyRowsAtMaxRecords(t *testing.T) {
	w := newTestWriter(t.Context(), t, writerSetup{schema: record.MustSchema(), part: pb.Partitioner_PARTITIONER_FORWARD, n: 1})
	for range maxBufferRecords + 1 {
		w.emit(t, record.Row{})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := w.queued(0)
	if len(got) != 2 || got[0].records != maxBufferRecords || got[1].records != 1 {
		t.Fatalf("%d empty rows queued %d buffers, want one of %d and one of 1", maxBufferRecords+1, len(got), maxBufferRecords)
	}
	for i, b := range got {
		if _, err := newRecordReader(b, false); err != nil {
			t.Errorf("buffer %d: %v", i, err)
		}
	}
}

func TestRecordWriterOversizedRecord(t *testing.T) {
	small := func(s string) record.Row { return record.Row{record.StringValue(s)} }
	big := small(strings.Repeat("B", maxBufferBytes+100))
	// exact is a record whose encoding is exactly maxBufferBytes.
	exact := small(strings.Repeat("E", maxBufferBytes-3))
	if n := len(record.AppendRow(nil, strSchema, exact)); n != maxBufferBytes {
		t.Fatalf("exact record encodes to %d bytes, want %d", n, maxBufferBytes)
	}
	tests := []struct {
		name string
		rows []record.Row
		want [][]record.Row // buffers, in order
	}{
		{"big between small", []record.Row{small("a"), small("b"), big, small("c")},
			[][]record.Row{{small("a"), small("b")}, {big}, {small("c")}}},
		{"big first", []record.Row{big, small("c")},
			[][]record.Row{{big}, {small("c")}}},
		{"two bigs", []record.Row{big, big},
			[][]record.Row{{big}, {big}}},
		{"exactly one buffer", []record.Row{small("a"), exact, small("b")},
			[][]record.Row{{small("a")}, {exact}, {small("b")}}},
		{"big last", []record.Row{small("a"), big},
			[][]record.Row{{small("a")}, {big}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t.Context(), t, writerSetup{schema: strSchema, part: pb.Partitioner_PARTITIONER_FORWARD, n: 1})
			w.emit(t, tc.rows...)
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			bufs := w.queued(0)
			if len(bufs) != len(tc.want) {
				t.Fatalf("got %d buffers, want %d", len(bufs), len(tc.want))
			}
			for i, b := range bufs {
				got := decode(t, strSchema, b)
				if !rowsEqual(got, tc.want[i]) {
					t.Errorf("buffer %d holds %d records of %d bytes, want %d records", i, b.records, len(b.data), len(tc.want[i]))
				}
			}
			if *w.out != int64(len(tc.rows)) {
				t.Errorf("out counter = %d, want %d", *w.out, len(tc.rows))
			}
		})
	}
}

func TestRecordWriterRecordLimit(t *testing.T) {
	// A string of length l encodes to l plus a 4-byte uvarint length at this size.
	atLimit := record.Row{record.StringValue(strings.Repeat("L", maxRecordBytes-4))}
	overLimit := record.Row{record.StringValue(strings.Repeat("O", maxRecordBytes-3))}
	if n := len(record.AppendRow(nil, strSchema, atLimit)); n != maxRecordBytes {
		t.Fatalf("atLimit encodes to %d bytes, want %d", n, maxRecordBytes)
	}
	small := func(s string) record.Row { return record.Row{record.StringValue(s)} }
	tests := []struct {
		name    string
		before  []record.Row
		wantErr bool
	}{
		{"at the limit", nil, false},
		{"over the limit into an empty buffer", nil, true},
		{"over the limit after buffered records", []record.Row{small("a"), small("b")}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t.Context(), t, writerSetup{schema: strSchema, part: pb.Partitioner_PARTITIONER_FORWARD, n: 1})
			w.emit(t, tc.before...)
			r := atLimit
			if tc.wantErr {
				r = overLimit
			}
			err := w.Emit(r)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Emit(record of %d bytes) = %v, want error %v", len(record.AppendRow(nil, strSchema, r)), err, tc.wantErr)
			}
			w.emit(t, small("after"))
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			want := append(slices.Clone(tc.before), small("after"))
			if !tc.wantErr {
				want = []record.Row{atLimit, small("after")}
			}
			got := decodeAll(t, strSchema, w.queued(0))
			if !rowsEqual(got, want) {
				t.Errorf("delivered %d records, want %d (the rejected record must not be sent, the others must)", len(got), len(want))
			}
			if *w.out != int64(len(want)) {
				t.Errorf("out counter = %d, want %d", *w.out, len(want))
			}
		})
	}
}

func TestRecordWriterEndOfPartition(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		total int
	}{
		{"every channel has data", 3, 7},
		{"one channel without data", 3, 2},
		{"no data at all", 2, 0},
		{"single channel", 1, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWriter(t.Context(), t, writerSetup{schema: intSchema, part: pb.Partitioner_PARTITIONER_REBALANCE, n: tc.n})
			want := make([][]record.Row, tc.n)
			for i := range tc.total {
				r := record.Row{record.IntValue(int64(i))}
				w.emit(t, r)
				want[i%tc.n] = append(want[i%tc.n], r)
			}
			if err := w.EndOfPartition(); err != nil {
				t.Fatalf("EndOfPartition: %v", err)
			}
			for c := range tc.n {
				bufs := w.queued(c)
				if len(bufs) == 0 || !bufs[len(bufs)-1].isEndOfPartition() {
					t.Fatalf("channel %d: %d buffers, want the last to be end-of-partition", c, len(bufs))
				}
				data := bufs[:len(bufs)-1]
				for i, b := range data {
					if b.event != nil {
						t.Errorf("channel %d buffer %d is event %v before end-of-partition", c, i, b.event)
					}
				}
				if got := decodeAll(t, intSchema, data); !rowsEqual(got, want[c]) {
					t.Errorf("channel %d got %v before end-of-partition, want %v", c, got, want[c])
				}
				if len(want[c]) == 0 && len(data) != 0 {
					t.Errorf("channel %d got %d empty data buffers, want none", c, len(data))
				}
			}
		})
	}
}

// TestRecordWriterBlocksOnFullQueue checks backpressure: with the subpartition queue full (its
// capacity and the overdraft buffers), the writer blocks until the consumer takes a buffer or the task is cancelled. synctest.Wait
// returns once the writer goroutine is durably blocked, so no sleep is needed.
func TestRecordWriterBlocksOnFullQueue(t *testing.T) {
	fill := record.Row{record.StringValue(strings.Repeat("f", maxBufferBytes))} // flushes on Emit
	emitFill := func(w *testWriter) error { return w.Emit(fill) }
	flushSmall := func(w *testWriter) error {
		if err := w.Emit(record.Row{record.StringValue("small")}); err != nil {
			return err
		}
		return w.Flush()
	}
	endOfPartition := func(w *testWriter) error { return w.EndOfPartition() }
	tests := []struct {
		name   string
		op     func(w *testWriter) error
		cancel bool // else the consumer takes one buffer
		// wantEOP says the blocked operation queues end-of-partition (else a data buffer).
		wantEOP bool
	}{
		{"Emit unblocked by the consumer", emitFill, false, false},
		{"Emit cancelled", emitFill, true, false},
		{"Flush unblocked by the consumer", flushSmall, false, false},
		{"Flush cancelled", flushSmall, true, false},
		{"EndOfPartition unblocked by the consumer", endOfPartition, false, true},
		{"EndOfPartition cancelled", endOfPartition, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				w := newTestWriter(ctx, t, writerSetup{
					schema: strSchema, part: pb.Partitioner_PARTITIONER_FORWARD, n: 1, capacity: 1,
				})
				for range 1 + maxOverdraftBuffers {
					w.emit(t, fill) // fills the queue
				}
				if w.available() {
					t.Fatal("available() with the queue over its capacity, want false")
				}
				if got := w.p.subs[0].size(); got != 1+maxOverdraftBuffers {
					t.Fatalf("queue holds %d buffers after a full buffer, want 1", got)
				}
				done := make(chan error, 1)
				go func() { done <- tc.op(w) }()
				synctest.Wait() // the goroutine has returned or is blocked for good
				select {
				case err := <-done:
					t.Fatalf("operation returned %v with the queue full, want it to block", err)
				default:
				}
				if tc.cancel {
					cancel()
					if err := <-done; !errors.Is(err, context.Canceled) {
						t.Errorf("blocked operation returned %v after cancel, want %v", err, context.Canceled)
					}
					// Only the filling buffers are queued; the blocked one was dropped.
					if got := w.queued(0); len(got) != 1+maxOverdraftBuffers || got[0].event != nil || got[0].records != 1 {
						t.Errorf("after cancel the queue holds %d buffers, want only the %d filling ones", len(got), 1+maxOverdraftBuffers)
					}
					return
				}
				first, _ := w.p.subs[0].poll(true)
				if got := decode(t, strSchema, first); !rowsEqual(got, []record.Row{fill}) {
					t.Errorf("first queued buffer holds %d records, want the filling record", len(got))
				}
				if err := <-done; err != nil {
					t.Errorf("blocked operation returned %v after the consumer took a buffer, want nil", err)
				}
				got := w.queued(0)
				last := got[len(got)-1]
				if len(got) != 1+maxOverdraftBuffers || last.isEndOfPartition() != tc.wantEOP || (!tc.wantEOP && last.records != 1) {
					t.Errorf("after unblocking the queue holds %d buffers, want %d, the last the blocked one (end-of-partition %v)", len(got), 1+maxOverdraftBuffers, tc.wantEOP)
				}
			})
		})
	}
}

// EndOfPartition flushes and queues the end-of-partition event on every channel.
func (w *recordWriter) EndOfPartition() error { return w.BroadcastEvent(endOfPartition) }
