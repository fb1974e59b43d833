package worker

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/storage"
)

// Channel state written for an unaligned checkpoint reads back buffer for buffer, by
// channel; a damaged handle is an error, never a panic.
func TestChannelStateRoundTrip(t *testing.T) {
	e0 := &pb.JobEdge{Source: 0, Target: 1}
	e1 := &pb.JobEdge{Source: 2, Target: 1, SideOutput: "late"}
	in := []channelData{
		{key: keyOf(e0, 0), bufs: []*buffer{data("a1"), {data: []byte("a2"), records: 3}}},
		{key: keyOf(e1, 1), bufs: []*buffer{data("b1")}},
		{key: keyOf(e0, 1)}, // nothing: not written
	}
	out := []channelData{{key: keyOf(&pb.JobEdge{Source: 1, Target: 3}, 2), bufs: []*buffer{data("o1"), data("")}}}
	dir := t.TempDir()
	root := storage.NewRoot(storage.NewLocal(dir))
	f, err := root.CreateFile(context.Background(), 4, "channels")
	if err != nil {
		t.Fatal(err)
	}
	inLocs, outLocs, err := writeChannelState(f, in, out)
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if len(inLocs) != 2 || len(outLocs) != 1 {
		t.Fatalf("locations: %d input, %d output; want 2 and 1", len(inLocs), len(outLocs))
	}
	if got, want := h.GetSize(), int64(5*bufferHeader+8); got != want {
		t.Errorf("channel state file of %d bytes, want %d (5 buffers, 8 bytes of records)", got, want)
	}
	handle := &pb.ChannelStateHandle{File: h, Input: inLocs, Output: outLocs}
	r, err := readChannelState(context.Background(), root, handle)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(r.input(e0, 0)); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("input of edge 0 subtask 0 = %q", got)
	}
	if got := r.input(e0, 0); got != nil {
		t.Error("input taken twice")
	}
	if err := r.checkInputsUsed(); err == nil {
		t.Error("checkInputsUsed with edge 2's buffers left: nil error")
	}
	if got := names(r.input(e1, 1)); !slices.Equal(got, []string{"b1"}) {
		t.Errorf("input of the side output edge = %q", got)
	}
	if err := r.checkInputsUsed(); err != nil {
		t.Errorf("checkInputsUsed after all were taken: %v", err)
	}
	// Output buffers go to their subpartition; one for an edge the task lacks is an error.
	p := newResultPartition("k", 3, 1, nil)
	if err := r.queueOutput([]*pb.JobEdge{{Source: 1, Target: 3}}, []*resultPartition{p}); err != nil {
		t.Fatal(err)
	}
	if got := p.subs[2].size(); got != 2 {
		t.Errorf("subpartition 2 holds %d restored buffers, want 2", got)
	}
	r2, _ := readChannelState(context.Background(), root, handle)
	if err := r2.queueOutput([]*pb.JobEdge{{Source: 1, Target: 4}}, []*resultPartition{newResultPartition("k", 3, 1, nil)}); err == nil {
		t.Error("queueOutput onto other edges: nil error")
	}

	var whole bytes.Buffer
	if _, _, err := writeChannelState(&whole, in, out); err != nil {
		t.Fatal(err)
	}
	for _, loc := range []*pb.ChannelBuffers{
		{Offset: -1, Size: 2},
		{Offset: 0, Size: int64(whole.Len()) + 1},
		{Offset: 0, Size: 5, Buffers: 1},                   // a truncated buffer
		{Offset: 0, Size: inLocs[0].GetSize(), Buffers: 5}, // a wrong count
		{Offset: 1, Size: 9, Buffers: 1},                   // a length beyond the range
	} {
		if _, err := readBuffers(whole.Bytes(), loc); !errors.Is(err, record.ErrCorrupt) {
			t.Errorf("readBuffers(%v) = %v, want ErrCorrupt", loc, err)
		}
	}
}
