package worker

import (
	"context"
	"fmt"
	"math"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// fuzzMaxFields bounds the schemas FuzzRecordReader builds.
const fuzzMaxFields = 8

// fuzzSchema builds a schema from types, one field per byte (the byte picks the type).
func fuzzSchema(types []byte) *record.Schema {
	n := min(len(types), fuzzMaxFields)
	fields := make([]record.Field, n)
	for i := range n {
		fields[i] = record.Field{Name: fmt.Sprintf("f%d", i), Type: record.Type(1 + int(types[i])%int(record.Map))}
	}
	return record.MustSchema(fields...)
}

func typesOf(s *record.Schema) []byte {
	b := make([]byte, s.Len())
	for i := range s.Len() {
		b[i] = byte(s.Field(i).Type - 1)
	}
	return b
}

// seedBuffers returns the buffers a recordWriter writes for rows of s, with and without
// timestamps.
func seedBuffers(f *testing.F, s *record.Schema, rows []record.Row, timestamps bool) []*buffer {
	e := &pb.JobEdge{Partitioner: pb.Partitioner_PARTITIONER_FORWARD, Schema: s.Proto(), Timestamps: timestamps}
	p := newResultPartition("fuzz/0/0/0/e0", 1, 1024, nil)
	var out int64
	stamp := int64(1700000000000)
	w, err := newRecordWriter(context.Background(), e, &pb.JobVertex{Parallelism: 1, MaxParallelism: 128}, 0, p, &out, &stamp)
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Emit(r); err != nil {
			f.Fatal(err)
		}
		stamp += 1000
	}
	if err := w.Flush(); err != nil {
		f.Fatal(err)
	}
	var bufs []*buffer
	for b, _ := p.subs[0].poll(true); b != nil; b, _ = p.subs[0].poll(true) {
		bufs = append(bufs, b)
	}
	return bufs
}

// FuzzRecordReader decodes an arbitrary data buffer (the records bytes and record count of a
// SubscribeResponse, which any peer on the network can send) against an arbitrary input
// schema, as a task does with every buffer of its input channels. It must never panic, and
// a buffer it accepts must hold exactly the records it says it holds.
func FuzzRecordReader(f *testing.F) {
	withMap := record.MustSchema(
		record.Field{Name: "k", Type: record.String}, record.Field{Name: "h", Type: record.Map},
		record.Field{Name: "ok", Type: record.Bool}, record.Field{Name: "f", Type: record.Float64},
	)
	seeds := []struct {
		s    *record.Schema
		rows []record.Row
	}{
		{strIntSchema, []record.Row{
			{record.StringValue("a"), record.IntValue(1)},
			{record.StringValue("héllo"), record.IntValue(math.MinInt64)},
			{record.StringValue(""), record.IntValue(0)},
		}},
		{withMap, []record.Row{
			{record.StringValue("x"), record.MapValue(map[string]string{"a": "1", "b": ""}), record.BoolValue(true), record.FloatValue(math.Inf(1))},
		}},
	}
	for _, sd := range seeds {
		for _, ts := range []bool{false, true} {
			for _, b := range seedBuffers(f, sd.s, sd.rows, ts) {
				f.Add(typesOf(sd.s), b.data, int32(b.records), ts)
			}
		}
	}
	f.Add([]byte{}, []byte{}, int32(0), false)

	f.Fuzz(func(t *testing.T, types, data []byte, records int32, timestamps bool) {
		s := fuzzSchema(types)
		row := make(record.Row, s.Len())
		rr, err := newRecordReader(&buffer{data: data, records: int(records)}, timestamps)
		if err != nil {
			return
		}
		if records > maxBufferRecords {
			t.Fatalf("accepted a buffer of %d records, more than the writer ever puts in one (%d)", records, maxBufferRecords)
		}
		decoded := 0
		for {
			_, ok, err := rr.next(s, row)
			if err != nil {
				return
			}
			if !ok {
				break
			}
			decoded++
			if decoded > int(records) {
				t.Fatalf("decoded %d records from a buffer of %d", decoded, records)
			}
		}
		// A buffer that decodes holds exactly its records.
		if decoded != int(records) {
			t.Fatalf("a buffer of %d records decoded as %d", records, decoded)
		}
		if len(rr.data) != 0 {
			t.Fatalf("a buffer of %d records decoded with %d bytes left over", records, len(rr.data))
		}
	})
}
