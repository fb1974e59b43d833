package worker

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"

	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/storage"
)

// This file holds the channel state of unaligned checkpoints: the in-flight buffers a task
// persists with its snapshot (input buffers that came before a channel's barrier, output
// buffers the barrier overtook), the file they are written to, and their restore.

// channelKey names a channel of a task by its job edge and the subtask at its other end.
type channelKey struct {
	source, target int32
	side           string
	subtask        int32
}

func keyOf(e *pb.JobEdge, subtask int32) channelKey {
	return channelKey{source: e.GetSource(), target: e.GetTarget(), side: e.GetSideOutput(), subtask: subtask}
}

func (k channelKey) String() string {
	s := fmt.Sprintf("edge %d->%d", k.source, k.target)
	if k.side != "" {
		s += " (side output " + k.side + ")"
	}
	return fmt.Sprintf("%s, subtask %d", s, k.subtask)
}

// channelData is one channel's buffers, oldest first.
type channelData struct {
	key  channelKey
	bufs []*buffer
}

// bufferHeader is a buffer's record count and length in a channel state file.
const bufferHeader = 8

// writeChannelState writes the buffers of in and out to w (see pb.ChannelStateHandle) and
// returns where each channel's lie.
func writeChannelState(w io.Writer, in, out []channelData) (input, output []*pb.ChannelBuffers, err error) {
	bw := bufio.NewWriter(w)
	var off int64
	write := func(cs []channelData) ([]*pb.ChannelBuffers, error) {
		var locs []*pb.ChannelBuffers
		for _, c := range cs {
			if len(c.bufs) == 0 {
				continue
			}
			loc := &pb.ChannelBuffers{
				SourceVertex: c.key.source, TargetVertex: c.key.target, SideOutput: c.key.side, Subtask: c.key.subtask,
				Offset: off, Buffers: int32(len(c.bufs)),
			}
			for _, b := range c.bufs {
				var h [bufferHeader]byte
				binary.BigEndian.PutUint32(h[:4], uint32(b.records))
				binary.BigEndian.PutUint32(h[4:], uint32(len(b.data)))
				if _, err := bw.Write(h[:]); err != nil {
					return nil, err
				}
				if _, err := bw.Write(b.data); err != nil {
					return nil, err
				}
				off += bufferHeader + int64(len(b.data))
			}
			loc.Size = off - loc.GetOffset()
			locs = append(locs, loc)
		}
		return locs, nil
	}
	if input, err = write(in); err != nil {
		return nil, nil, err
	}
	if output, err = write(out); err != nil {
		return nil, nil, err
	}
	return input, output, bw.Flush()
}

// readBuffers parses the buffers of loc in data, a whole channel state file.
func readBuffers(data []byte, loc *pb.ChannelBuffers) ([]*buffer, error) {
	off, size := loc.GetOffset(), loc.GetSize()
	if off < 0 || size < 0 || off > int64(len(data)) || size > int64(len(data))-off {
		return nil, fmt.Errorf("%w: buffers at %d+%d outside the file of %d bytes", record.ErrCorrupt, off, size, len(data))
	}
	rest := data[off : off+size]
	bufs := make([]*buffer, 0, min(int(loc.GetBuffers()), len(rest)/bufferHeader))
	for len(rest) > 0 {
		if len(rest) < bufferHeader {
			return nil, fmt.Errorf("%w: truncated buffer header", record.ErrCorrupt)
		}
		n := binary.BigEndian.Uint32(rest[:4])
		l := binary.BigEndian.Uint32(rest[4:8])
		rest = rest[bufferHeader:]
		if n > maxBufferRecords || l > uint32(len(rest)) {
			return nil, fmt.Errorf("%w: buffer of %d records and %d bytes in %d bytes left", record.ErrCorrupt, n, l, len(rest))
		}
		bufs = append(bufs, &buffer{data: rest[:l:l], records: int(n)})
		rest = rest[l:]
	}
	if len(bufs) != int(loc.GetBuffers()) {
		return nil, fmt.Errorf("%w: %d buffers where the handle says %d", record.ErrCorrupt, len(bufs), loc.GetBuffers())
	}
	return bufs, nil
}

// recoveredChannels is the channel state a task restored, by channel, until it is queued:
// input buffers into the input channels, output buffers into the result partitions, each
// before anything new.
type recoveredChannels struct {
	in, out map[channelKey][]*buffer
}

// readChannelState reads channel state handle h from root.
func readChannelState(ctx context.Context, root storage.Root, h *pb.ChannelStateHandle) (*recoveredChannels, error) {
	data, err := root.ReadFile(ctx, h.GetFile())
	if err != nil {
		return nil, err
	}
	r := &recoveredChannels{in: map[channelKey][]*buffer{}, out: map[channelKey][]*buffer{}}
	for _, side := range []struct {
		locs []*pb.ChannelBuffers
		to   map[channelKey][]*buffer
	}{{h.GetInput(), r.in}, {h.GetOutput(), r.out}} {
		for _, loc := range side.locs {
			bufs, err := readBuffers(data, loc)
			if err != nil {
				return nil, fmt.Errorf("channel state file %s: %w", h.GetFile().GetPath(), err)
			}
			k := channelKey{source: loc.GetSourceVertex(), target: loc.GetTargetVertex(), side: loc.GetSideOutput(), subtask: loc.GetSubtask()}
			side.to[k] = append(side.to[k], bufs...)
		}
	}
	return r, nil
}

// input takes the restored buffers of the input channel from producer subtask on edge e.
func (r *recoveredChannels) input(e *pb.JobEdge, subtask int32) []*buffer {
	if r == nil {
		return nil
	}
	k := keyOf(e, subtask)
	bufs := r.in[k]
	delete(r.in, k)
	return bufs
}

// queueOutput queues the restored output buffers on the task's result partitions (one per
// edge of edges), ahead of anything the task emits.
func (r *recoveredChannels) queueOutput(edges []*pb.JobEdge, parts []*resultPartition) error {
	if r == nil {
		return nil
	}
	for i, e := range edges {
		for sub, s := range parts[i].subs {
			k := keyOf(e, int32(sub))
			for _, b := range r.out[k] {
				s.add(b, 0)
			}
			delete(r.out, k)
		}
	}
	for k := range r.out {
		return fmt.Errorf("the checkpoint's channel state has output buffers for %s, which the task does not have", k)
	}
	return nil
}

// checkInputsUsed fails when restored input buffers were left for channels the task does not
// have (its job graph changed).
func (r *recoveredChannels) checkInputsUsed() error {
	if r == nil {
		return nil
	}
	for k := range r.in {
		return fmt.Errorf("the checkpoint's channel state has input buffers for %s, which the task does not have", k)
	}
	return nil
}
