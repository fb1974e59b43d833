package worker

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// This file holds the decision logic for checkpoint barriers arriving on a task's input
// channels, after Flink's SingleCheckpointBarrierHandler (aligned, exactly-once) and
// CheckpointBarrierTracker (at-least-once). It does no I/O and starts no goroutines: the task's
// goroutine feeds it the barriers, cancellation markers and end-of-partition events it reads,
// in the order it reads them, and the handler answers through barrierActions.

// barrierActions is what a barrier handler asks of its task.
//
// The handler calls these methods from inside its own methods, on the task's goroutine. They
// must not call back into the handler; in particular unblockAll only makes the stashed buffers
// of blocked channels due, and the task delivers them (possibly barriers among them) after the
// handler method has returned.
type barrierActions interface {
	// blockChannel stops delivery of channel ch's buffers until unblockAll (aligned mode).
	blockChannel(ch int)
	// unblockAll resumes every blocked channel (buffers stashed while blocked are processed in arrival order first).
	unblockAll()
	// triggerCheckpoint performs the task's checkpoint for barrier b once it is aligned (pre-barrier, broadcast barrier, snapshot...). alignment is the time from the first to the last barrier.
	triggerCheckpoint(b *pb.CheckpointBarrier, alignment time.Duration) error
	// abortCheckpoint declines checkpoint id to the JobManager with reason and forwards a cancellation marker downstream.
	abortCheckpoint(id int64, reason pb.CheckpointFailureReason) error
	// triggerUnaligned performs the task's checkpoint for barrier b at once, unaligned: the
	// input channels not in skip (those whose barrier was processed in order, or that ended)
	// start collecting their in-flight buffers as channel state. alignment is the time spent
	// aligned before.
	triggerUnaligned(b *pb.CheckpointBarrier, skip []bool, alignment time.Duration) error
	// completeChannelState ends the collection of unaligned checkpoint id's channel state:
	// every channel delivered its barrier or ended.
	completeChannelState(id int64) error
}

// barrierHandler consumes the checkpoint events of a task's input channels (indexed
// 0..channels-1). An error returned by any method fails the task; the handler's state after an
// error is unspecified. Errors come from the barrierActions, or from events that break the
// channel protocol (a channel out of range, an event after a channel's end of partition, a
// barrier from a channel that the handler blocked).
type barrierHandler interface {
	processBarrier(b *pb.CheckpointBarrier, ch int) error
	processCancellation(id int64, ch int) error
	processEndOfPartition(ch int) error
}

// maxTrackedCheckpoints bounds how many checkpoints the at-least-once tracker follows at once
// (Flink's CheckpointBarrierTracker.MAX_CHECKPOINTS_TO_TRACK). When a new checkpoint would
// exceed it the oldest one is forgotten without notice; it can never complete at this task.
const maxTrackedCheckpoints = 50

// channelSet is the bookkeeping shared by both handlers: which channels exist and which of them
// have delivered their end of partition.
type channelSet struct {
	ended   []bool
	numOpen int
}

func newChannelSet(channels int) channelSet {
	if channels < 1 {
		panic(fmt.Sprintf("barrier handler needs at least one input channel, got %d", channels))
	}
	return channelSet{ended: make([]bool, channels), numOpen: channels}
}

// checkOpen returns an error unless ch is a channel that has not ended.
func (s *channelSet) checkOpen(ch int, event string) error {
	if ch < 0 || ch >= len(s.ended) {
		return fmt.Errorf("%s on input channel %d: the task has %d input channels", event, ch, len(s.ended))
	}
	if s.ended[ch] {
		return fmt.Errorf("%s on input channel %d after its end of partition", event, ch)
	}
	return nil
}

// checkBarrier returns an error unless b is a barrier and ch a channel that has not ended.
func (s *channelSet) checkBarrier(b *pb.CheckpointBarrier, ch int) error {
	if b == nil {
		return errors.New("nil checkpoint barrier")
	}
	return s.checkOpen(ch, "checkpoint barrier")
}

// end marks channel ch as ended.
func (s *channelSet) end(ch int) error {
	if err := s.checkOpen(ch, "end of partition"); err != nil {
		return err
	}
	s.ended[ch] = true
	s.numOpen--
	return nil
}

// alignedHandler implements exactly-once checkpoints (Flink's SingleCheckpointBarrierHandler
// with checkpoints-after-tasks-finish enabled, aligned and alternating).
//
// The first barrier of checkpoint N starts its alignment; every barrier of N blocks the channel
// it came on, so that records after the barrier wait. When every channel that was open at the
// start has delivered barrier N or ended, the task checkpoints and all channels resume. A newer
// barrier subsumes a pending checkpoint; a cancellation marker aborts it.
//
// Unaligned: a barrier of a checkpoint taken unaligned (it overtook the buffers before it,
// isPriority) switches the checkpoint to unaligned at once, as does an aligned barrier of a
// checkpoint that may go unaligned once its aligned-checkpoint timeout passed (checked when a
// barrier arrives and by the task's timer, alignmentTimeout): the task checkpoints at once
// and resumes its channels, while those whose barrier is still to come collect their
// in-flight buffers until it arrives; then the checkpoint is done here.
type alignedHandler struct {
	actions  barrierActions
	now      func() time.Time
	channels channelSet

	// currentID is the newest checkpoint id seen (barrier or cancellation marker), -1 at first.
	currentID int64
	// lastDoneID is the newest checkpoint id that completed its alignment or was aborted.
	// A checkpoint is pending while currentID != lastDoneID.
	lastDoneID int64

	// The alignment of the pending checkpoint, meaningful only while one is pending.
	barrier    *pb.CheckpointBarrier // the first barrier of currentID
	aligned    []bool                // channels that delivered barrier currentID or ended since
	numAligned int
	target     int       // open channels when the checkpoint started
	numBlocked int       // channels blocked by this alignment
	blocked    []bool    // channels blocked by this alignment
	start      time.Time // arrival of the first barrier
	// unaligned: the pending checkpoint was taken unaligned; it is done once every channel
	// delivered its barrier or ended.
	unaligned bool
}

// newAlignedHandler returns the barrier handler for CHECKPOINTING_MODE_EXACTLY_ONCE. now is the
// clock used to measure alignment time.
func newAlignedHandler(channels int, a barrierActions, now func() time.Time) barrierHandler {
	return &alignedHandler{
		actions:    a,
		now:        now,
		channels:   newChannelSet(channels),
		currentID:  -1,
		lastDoneID: -1,
		aligned:    make([]bool, channels),
		blocked:    make([]bool, channels),
	}
}

// isPending reports whether checkpoint currentID is being aligned.
func (h *alignedHandler) isPending() bool {
	return h.currentID >= 0 && h.currentID != h.lastDoneID
}

// processBarrier handles barrier b from channel ch: an obsolete barrier is ignored (its
// channel stays unblocked); a newer one aborts the pending checkpoint (subsumed) and starts its
// own; the channel is blocked, and the checkpoint triggered once all channels are aligned.
func (h *alignedHandler) processBarrier(b *pb.CheckpointBarrier, ch int) error {
	if err := h.channels.checkBarrier(b, ch); err != nil {
		return err
	}
	id := b.GetCheckpointId()
	if id < h.currentID || (id == h.currentID && !h.isPending()) {
		// Obsolete: this checkpoint was completed, aborted or subsumed here already.
		return nil
	}
	if id > h.currentID {
		if h.isPending() {
			if err := h.abort(h.currentID, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_SUBSUMED); err != nil {
				return err
			}
		}
		h.startAlignment(b)
	}
	if h.aligned[ch] {
		return fmt.Errorf("second barrier of checkpoint %d on input channel %d, which is blocked", id, ch)
	}
	if h.unaligned {
		return h.markAligned(ch)
	}
	if priorityBarrier(b) || h.timedOut(b) {
		if !priorityBarrier(b) {
			h.blocked[ch] = true // processed in order: nothing of its channel is in flight
		}
		h.aligned[ch] = true
		h.numAligned++
		return h.switchToUnaligned()
	}
	h.actions.blockChannel(ch)
	h.blocked[ch] = true
	h.numBlocked++
	return h.markAligned(ch)
}

// timedOut reports whether barrier b's checkpoint may go unaligned and has run longer than
// its aligned-checkpoint timeout (measured from its trigger on the JobManager, as Flink).
func (h *alignedHandler) timedOut(b *pb.CheckpointBarrier) bool {
	deadline, ok := alignmentDeadline(b)
	return ok && !h.now().Before(deadline)
}

// alignmentDeadline is when checkpoint b switches to unaligned, for a barrier of a checkpoint
// that starts aligned and may go unaligned.
func alignmentDeadline(b *pb.CheckpointBarrier) (time.Time, bool) {
	if !b.GetUnaligned() || b.GetAlignedTimeoutMs() <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(b.GetTimestampMs() + b.GetAlignedTimeoutMs()), true
}

// alignmentDeadline returns when the pending aligned checkpoint switches to unaligned, if it
// may; the task calls alignmentTimeout then.
func (h *alignedHandler) alignmentDeadline() (time.Time, bool) {
	if !h.isPending() || h.unaligned {
		return time.Time{}, false
	}
	return alignmentDeadline(h.barrier)
}

// alignmentTimeout switches the pending aligned checkpoint to unaligned if its
// aligned-checkpoint timeout has passed.
func (h *alignedHandler) alignmentTimeout() error {
	if !h.isPending() || h.unaligned || !h.timedOut(h.barrier) {
		return nil
	}
	return h.switchToUnaligned()
}

// switchToUnaligned takes the pending checkpoint unaligned now: its barrier goes on as a
// priority event, the blocked channels resume, and the others collect their in-flight
// buffers until their barrier arrives.
func (h *alignedHandler) switchToUnaligned() error {
	h.unaligned = true
	b := proto.Clone(h.barrier).(*pb.CheckpointBarrier)
	b.Unaligned, b.AlignedTimeoutMs = true, 0
	var alignment time.Duration
	if h.target > 1 {
		alignment = h.now().Sub(h.start)
	}
	skip := slices.Clone(h.blocked)
	for ch, ended := range h.channels.ended {
		skip[ch] = skip[ch] || ended
	}
	if err := h.actions.triggerUnaligned(b, skip, alignment); err != nil {
		return err
	}
	if h.numBlocked > 0 {
		h.numBlocked = 0
		clear(h.blocked)
		h.actions.unblockAll()
	}
	if h.numAligned < h.target {
		return nil
	}
	return h.completeUnaligned()
}

// completeUnaligned ends the pending unaligned checkpoint: every channel delivered its
// barrier or ended.
func (h *alignedHandler) completeUnaligned() error {
	id := h.currentID
	h.lastDoneID = id
	h.resetAlignment()
	return h.actions.completeChannelState(id)
}

// processCancellation handles a cancellation marker for checkpoint id from channel ch. It
// aborts id if id is newer than anything seen, or if it is the checkpoint being aligned and at
// least one channel is aligned; afterwards barriers of id are obsolete. Other markers are
// ignored: their checkpoint was already completed or aborted here.
func (h *alignedHandler) processCancellation(id int64, ch int) error {
	if err := h.channels.checkOpen(ch, "cancellation marker"); err != nil {
		return err
	}
	if id > h.currentID || (id == h.currentID && h.numAligned > 0) {
		return h.abort(id, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER)
	}
	return nil
}

// processEndOfPartition closes channel ch. Checkpoints continue after tasks finish, so the
// ended channel counts as aligned for the pending checkpoint, which may complete it.
func (h *alignedHandler) processEndOfPartition(ch int) error {
	if err := h.channels.end(ch); err != nil {
		return err
	}
	if !h.isPending() || h.aligned[ch] {
		return nil
	}
	return h.markAligned(ch)
}

// startAlignment begins aligning the checkpoint of barrier b, whose id is newer than any seen.
func (h *alignedHandler) startAlignment(b *pb.CheckpointBarrier) {
	h.currentID = b.GetCheckpointId()
	h.resetAlignment()
	h.barrier = b
	h.target = h.channels.numOpen
	h.start = h.now()
}

// markAligned records channel ch as aligned for the pending checkpoint and, when it was the
// last one, triggers the checkpoint and resumes all channels.
func (h *alignedHandler) markAligned(ch int) error {
	h.aligned[ch] = true
	h.numAligned++
	if h.numAligned < h.target {
		return nil
	}
	if h.unaligned {
		return h.completeUnaligned()
	}
	var alignment time.Duration
	if h.target > 1 {
		alignment = h.now().Sub(h.start)
	}
	b := h.barrier
	blocked := h.numBlocked > 0
	h.lastDoneID = h.currentID
	h.resetAlignment()
	if err := h.actions.triggerCheckpoint(b, alignment); err != nil {
		// The task fails; its channels may stay blocked.
		return err
	}
	if blocked {
		h.actions.unblockAll()
	}
	return nil
}

// abort ends the pending alignment, if any, and declines checkpoint id. Afterwards no
// checkpoint up to id is pending, so later barriers of id are obsolete.
func (h *alignedHandler) abort(id int64, reason pb.CheckpointFailureReason) error {
	h.currentID = max(h.currentID, id)
	h.lastDoneID = max(h.lastDoneID, id)
	blocked := h.numBlocked > 0
	h.resetAlignment()
	if blocked {
		h.actions.unblockAll()
	}
	return h.actions.abortCheckpoint(id, reason)
}

// resetAlignment forgets the alignment in progress.
func (h *alignedHandler) resetAlignment() {
	h.barrier = nil
	clear(h.aligned)
	h.numAligned = 0
	h.numBlocked = 0
	clear(h.blocked)
	h.target = 0
	h.unaligned = false
}

// trackedCheckpoint is one checkpoint followed by the at-least-once tracker.
type trackedCheckpoint struct {
	id int64
	// barrier is the first barrier of id; nil for an entry created by a cancellation marker.
	barrier    *pb.CheckpointBarrier
	aligned    []bool // channels that delivered a barrier or cancellation marker of id
	numAligned int
	target     int // open channels when the entry was created
	aborted    bool
}

// markAligned records channel ch and returns how many channels are aligned.
func (c *trackedCheckpoint) markAligned(ch int) int {
	if !c.aligned[ch] {
		c.aligned[ch] = true
		c.numAligned++
	}
	return c.numAligned
}

// trackerHandler implements at-least-once barrier tracking (Flink's CheckpointBarrierTracker).
// It never blocks a channel: it counts the barriers of each checkpoint and triggers it once
// every channel delivered one, so records after the barrier on fast channels are processed
// before the checkpoint and replayed after a recovery.
type trackerHandler struct {
	actions  barrierActions
	channels channelSet
	// pending holds at most maxTrackedCheckpoints entries, oldest first, ids strictly increasing.
	pending []*trackedCheckpoint
	// latestID is the newest checkpoint id tracked (barrier or cancellation marker), -1 at first.
	latestID int64
}

// newTrackerHandler returns the barrier handler for CHECKPOINTING_MODE_AT_LEAST_ONCE. Nothing is
// blocked, so the tracker reports zero alignment time and does not use the clock.
func newTrackerHandler(channels int, a barrierActions, _ func() time.Time) barrierHandler {
	return &trackerHandler{
		actions:  a,
		channels: newChannelSet(channels),
		latestID: -1,
	}
}

// find returns the position of checkpoint id in pending, or -1.
func (h *trackerHandler) find(id int64) int {
	return slices.IndexFunc(h.pending, func(c *trackedCheckpoint) bool { return c.id == id })
}

// processBarrier counts barrier b from channel ch. When all channels delivered a barrier of
// its checkpoint, that entry and all older ones (subsumed) are dropped and the checkpoint is
// triggered unless it was aborted. The first barrier of an id is tracked only if the id is
// newer than every tracked one; older ids can never complete.
func (h *trackerHandler) processBarrier(b *pb.CheckpointBarrier, ch int) error {
	if err := h.channels.checkBarrier(b, ch); err != nil {
		return err
	}
	id := b.GetCheckpointId()
	if id > h.latestID && h.channels.numOpen == 1 {
		// A single channel: its barrier is the last one.
		return h.actions.triggerCheckpoint(b, 0)
	}
	pos := h.find(id)
	if pos < 0 {
		if id <= h.latestID {
			return nil
		}
		h.latestID = id
		h.track(id, b, ch)
		return nil
	}
	c := h.pending[pos]
	if c.markAligned(ch) < c.target {
		return nil
	}
	h.pending = slices.Delete(h.pending, 0, pos+1)
	if c.aborted {
		return nil
	}
	return h.actions.triggerCheckpoint(c.barrier, 0)
}

// track appends a new entry for checkpoint id with channel ch aligned, forgetting the oldest
// entry if there are too many.
func (h *trackerHandler) track(id int64, b *pb.CheckpointBarrier, ch int) *trackedCheckpoint {
	c := &trackedCheckpoint{
		id:      id,
		barrier: b,
		aligned: make([]bool, len(h.channels.ended)),
		target:  h.channels.numOpen,
	}
	c.markAligned(ch)
	h.pending = append(h.pending, c)
	if len(h.pending) > maxTrackedCheckpoints {
		h.pending = slices.Delete(h.pending, 0, 1)
	}
	return c
}

// processCancellation handles a cancellation marker for checkpoint id from channel ch: every
// older tracked checkpoint is dropped and aborted, and id is aborted; each is declined once.
// The marker counts as id's barrier from ch, so the entry goes once all channels reported.
func (h *trackerHandler) processCancellation(id int64, ch int) error {
	if err := h.channels.checkOpen(ch, "cancellation marker"); err != nil {
		return err
	}
	const reason = pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER
	if id > h.latestID && h.channels.numOpen == 1 {
		return h.actions.abortCheckpoint(id, reason)
	}
	if err := h.abortOlder(id, reason); err != nil {
		return err
	}
	if len(h.pending) > 0 && h.pending[0].id == id {
		c := h.pending[0]
		// Still count the marker, so that the entry goes once every channel reported.
		if c.markAligned(ch) == c.target {
			h.pending = slices.Delete(h.pending, 0, 1)
		}
		if c.aborted {
			return nil
		}
		c.aborted = true
		return h.actions.abortCheckpoint(id, reason)
	}
	if id > h.latestID {
		// Unseen and newer than anything tracked (so nothing is tracked any more): remember it
		// as aborted, so that its barriers do not start it.
		h.latestID = id
		c := h.track(id, nil, ch)
		c.aborted = true
		return h.actions.abortCheckpoint(id, reason)
	}
	// A trailing marker of a checkpoint that is no longer tracked.
	return nil
}

// processEndOfPartition closes channel ch and aborts every tracked checkpoint that was not
// aborted yet, declining it with CHECKPOINT_DECLINED_INPUT_END_OF_STREAM.
func (h *trackerHandler) processEndOfPartition(ch int) error {
	if err := h.channels.end(ch); err != nil {
		return err
	}
	return h.abortOlder(math.MaxInt64, pb.CheckpointFailureReason_CHECKPOINT_FAILURE_REASON_CHECKPOINT_DECLINED_INPUT_END_OF_STREAM)
}

// abortOlder drops every tracked checkpoint older than id, oldest first, and declines those not
// aborted yet with reason.
func (h *trackerHandler) abortOlder(id int64, reason pb.CheckpointFailureReason) error {
	for len(h.pending) > 0 && h.pending[0].id < id {
		c := h.pending[0]
		h.pending = slices.Delete(h.pending, 0, 1)
		if !c.aborted {
			c.aborted = true
			if err := h.actions.abortCheckpoint(c.id, reason); err != nil {
				return err
			}
		}
	}
	return nil
}
