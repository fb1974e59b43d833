package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/goflink/goflink/internal/faultinject"
	pb "github.com/goflink/goflink/proto/goflink/v1"
	"github.com/goflink/goflink/record"
)

// TwoPhaseCommitter is the transactional system a two-phase-commit sink writes to, after
// Flink's TwoPhaseCommitSinkFunction. A transaction's data must stay invisible
// to readers until Commit.
type TwoPhaseCommitter[Txn any] interface {
	// BeginTransaction starts a transaction.
	BeginTransaction() (Txn, error)
	// Write adds a record to the transaction.
	Write(txn Txn, row record.Row) error
	// PreCommit makes the transaction durable so that a later Commit, possibly by another
	// process after a failure, cannot fail for lack of data. No writes follow.
	PreCommit(txn Txn) error
	// Commit makes a pre-committed transaction visible. It must be idempotent: a transaction
	// that is already committed is a success. After a restore it is called again for every
	// transaction pre-committed into the restored checkpoint; an error there means data loss
	// and fails the task.
	Commit(txn Txn) error
	// Abort discards a transaction that is open or pre-committed (never a committed one). It
	// must be idempotent.
	Abort(txn Txn) error
	// Encode and Decode store a transaction in checkpoint state. Encode is called for open
	// and pre-committed transactions and must capture whatever Commit and Abort need.
	Encode(txn Txn) []byte
	Decode(b []byte) (Txn, error)
}

// LingeringAborter is optionally implemented by a TwoPhaseCommitter whose transactions can
// outlive every record of them in checkpoint state: ones an earlier attempt began or
// pre-committed after the checkpoint the job restores from (Flink aborts these through
// transactional-ID probing in Kafka). The sink calls AbortLingering once in Open, after
// re-committing and aborting the restored transactions and before beginning its first one.
//
// In subtask s of p it must abort exactly the transactions begun by subtasks i with
// i % p == s (by any earlier attempt) that are not in referenced. referenced holds every
// transaction of every subtask's restored state (empty on a fresh start), so transactions a
// concurrently recovering subtask still has to commit are never touched, also after
// rescaling.
type LingeringAborter[Txn any] interface {
	AbortLingering(referenced []Txn) error
}

// TwoPhaseStateName is the operator list state of a two-phase-commit sink.
const TwoPhaseStateName = "pending-transactions"

// twoPhaseState is one element of the pending-transactions list state: what one subtask had
// open and pre-committed at a checkpoint. The state is union-distributed: on restore every
// subtask sees every element, recovers the elements of the subtasks i with i % p == itself,
// and knows all transactions still referenced (for LingeringAborter). Flink splits the list
// instead; a union lets a subtask tell a lingering transaction from one that another subtask
// is about to re-commit, whatever the rescaling.
type twoPhaseState struct {
	Version     int              `json:"v"`
	Subtask     int              `json:"subtask"`
	Parallelism int              `json:"parallelism"`
	Current     []byte           `json:"current,omitempty"`
	Pending     []twoPhasePended `json:"pending,omitempty"`
}

type twoPhasePended struct {
	Checkpoint int64  `json:"checkpoint"`
	Txn        []byte `json:"txn"`
}

// endOfInput is the checkpoint ID under which EndInput pre-commits the last transaction
// (Flink's CommittableMessage.EOI).
const endOfInput = math.MaxInt64

type pendingTxn[Txn any] struct {
	checkpoint int64
	txn        Txn
}

// TwoPhaseSink runs a TwoPhaseCommitter as an exactly-once sink on the checkpoint hooks:
//
//   - records go to the current transaction;
//   - PrepareSnapshotPreBarrier(N) pre-commits it as pending[N] and begins the next one, so
//     records after barrier N land in the next transaction;
//   - SnapshotState(N) stores the current transaction and every pending one;
//   - NotifyCheckpointComplete(N) commits every pending transaction ≤ N in order (a
//     notification may be skipped or lost: the next one, or the restore, commits them);
//   - NotifyCheckpointAborted is a no-op: its transaction is committed with the next completed
//     checkpoint, or aborted on restore if no completed checkpoint holds it;
//   - on restore (in Open, as InitializeState runs before the Context exists) every restored
//     pending transaction is committed again, then the restored open ones are aborted, then
//     lingering ones (LingeringAborter);
//   - EndInput with checkpointing leaves everything to the final checkpoint: the task does not
//     end before a checkpoint covering the rest of its input completed, which pre-commits and
//     commits it; without checkpointing it pre-commits and commits everything, so a bounded
//     job's output is complete and visible when it finishes;
//   - Close aborts the current transaction, not the pending ones: a restore commits or aborts
//     them; when the job ends for good instead (cancelled, or failed), EndJob commits those of
//     completed checkpoints and aborts the others before Close.
//
// Without checkpointing (no PrepareSnapshotPreBarrier or notifications) a subtask writes one
// transaction, committed at its EndInput: a bounded job's output appears when it finishes, an
// unbounded job's never (the transaction is aborted at Close), and a subtask that fails
// before its EndInput leaves nothing visible. There is no exactly-once guarantee then: a
// restart runs from the beginning, so the output of subtasks that had already reached
// EndInput is written again.
type TwoPhaseSink[Txn any] struct {
	Base
	name      string // for errors, e.g. "file sink"
	committer TwoPhaseCommitter[Txn]

	list       ListState
	restoredID int64
	restored   [][]byte

	cur     Txn
	hasCur  bool
	pending []pendingTxn[Txn] // ascending checkpoint IDs

	// Flink's committer metrics: commits that succeeded and failed (a failed one is retried),
	// and the pre-committed transactions waiting for their checkpoint.
	committedOK, committedFailed, pendingCount *Metric
}

// Bind names the sink in its errors (e.g. "file sink") and gives it the system it writes to;
// call it when building the sink.
func (s *TwoPhaseSink[Txn]) Bind(name string, c TwoPhaseCommitter[Txn]) {
	s.name, s.committer = name, c
}

// Current returns the open transaction (false when none is open).
func (s *TwoPhaseSink[Txn]) Current() (Txn, bool) { return s.cur, s.hasCur }

// Pending returns the pre-committed transactions not committed yet, oldest first.
func (s *TwoPhaseSink[Txn]) Pending() []Txn {
	out := make([]Txn, len(s.pending))
	for i, p := range s.pending {
		out[i] = p.txn
	}
	return out
}

// RestoredID is the checkpoint the sink was restored from (0: a fresh start).
func (s *TwoPhaseSink[Txn]) RestoredID() int64 { return s.restoredID }

func (s *TwoPhaseSink[Txn]) errorf(format string, args ...any) error {
	return fmt.Errorf(s.name+": "+format, args...)
}

// InitializeState registers the pending-transactions state and keeps what was restored;
// recovery happens in Open.
func (s *TwoPhaseSink[Txn]) InitializeState(sc StateContext) error {
	l, err := sc.ListState(TwoPhaseStateName, pb.ListDistribution_LIST_DISTRIBUTION_UNION)
	if err != nil {
		return s.errorf("%w", err)
	}
	s.list, s.restoredID = l, sc.RestoredCheckpointID()
	s.restored = nil
	for _, e := range l.Get() {
		s.restored = append(s.restored, slices.Clone(e))
	}
	return nil
}

// Open recovers the restored transactions and begins the first one.
func (s *TwoPhaseSink[Txn]) Open(ctx *Context, out Output) error {
	if err := s.Base.Open(ctx, out); err != nil {
		return err
	}
	s.committedOK = ctx.Metrics.Metric("numCommittablesSuccess")
	s.committedFailed = ctx.Metrics.Metric("numCommittablesFailure")
	s.pendingCount = ctx.Metrics.Metric("pendingCommittables")
	if err := s.recover(); err != nil {
		return err
	}
	return s.begin()
}

func (s *TwoPhaseSink[Txn]) begin() error {
	txn, err := s.committer.BeginTransaction()
	if err != nil {
		return s.errorf("begin transaction: %w", err)
	}
	s.cur, s.hasCur = txn, true
	return nil
}

// recover commits every pending transaction of the restored elements this subtask is
// responsible for, aborts their open transactions, then lets the committer abort lingering
// ones.
func (s *TwoPhaseSink[Txn]) recover() error {
	sub, par := s.ctx.Subtask, max(s.ctx.Parallelism, 1)
	var referenced []Txn
	committed, aborted := 0, 0
	for i, b := range s.restored {
		var st twoPhaseState
		if err := json.Unmarshal(b, &st); err != nil {
			return s.errorf("restoring checkpoint %d: transaction state element %d: %w", s.restoredID, i, err)
		}
		if st.Version != 1 || st.Subtask < 0 || st.Parallelism < 1 {
			return s.errorf("restoring checkpoint %d: invalid transaction state element %d (version %d, subtask %d of %d)",
				s.restoredID, i, st.Version, st.Subtask, st.Parallelism)
		}
		mine := st.Subtask%par == sub
		for _, p := range st.Pending {
			txn, err := s.committer.Decode(p.Txn)
			if err != nil {
				return s.errorf("restoring checkpoint %d: transaction of checkpoint %d: %w", s.restoredID, p.Checkpoint, err)
			}
			referenced = append(referenced, txn)
			if !mine {
				continue
			}
			// Always commit: the checkpoint may have completed with the notification lost.
			if err := s.committer.Commit(txn); err != nil {
				return s.errorf("restoring checkpoint %d: re-committing the transaction of checkpoint %d of subtask %d failed (its data would be lost): %w",
					s.restoredID, p.Checkpoint, st.Subtask, err)
			}
			committed++
		}
		if st.Current == nil {
			continue
		}
		txn, err := s.committer.Decode(st.Current)
		if err != nil {
			return s.errorf("restoring checkpoint %d: open transaction of subtask %d: %w", s.restoredID, st.Subtask, err)
		}
		referenced = append(referenced, txn)
		if mine {
			if err := s.committer.Abort(txn); err != nil {
				return s.errorf("restoring checkpoint %d: aborting the open transaction of subtask %d: %w", s.restoredID, st.Subtask, err)
			}
			aborted++
		}
	}
	s.restored = nil
	if la, ok := s.committer.(LingeringAborter[Txn]); ok {
		if err := la.AbortLingering(referenced); err != nil {
			return s.errorf("aborting lingering transactions: %w", err)
		}
	}
	if s.restoredID > 0 {
		s.ctx.Log().Info("restored two-phase-commit sink", "checkpoint", s.restoredID,
			"recommitted", committed, "aborted", aborted)
	}
	return nil
}

// Process writes a record into the open transaction.
func (s *TwoPhaseSink[Txn]) Process(row record.Row) error {
	if !s.hasCur {
		return s.errorf("record after end of input")
	}
	if err := s.committer.Write(s.cur, row); err != nil {
		return s.errorf("%w", err)
	}
	return nil
}

// PrepareSnapshotPreBarrier pre-commits the current transaction as the one of checkpoint id
// and begins the next.
func (s *TwoPhaseSink[Txn]) PrepareSnapshotPreBarrier(id int64) error {
	if !s.hasCur {
		return nil // after EndInput
	}
	if n := len(s.pending); n > 0 && s.pending[n-1].checkpoint >= id {
		return s.errorf("checkpoint %d prepared after checkpoint %d", id, s.pending[n-1].checkpoint)
	}
	if err := s.committer.PreCommit(s.cur); err != nil {
		return s.errorf("pre-commit for checkpoint %d: %w", id, err)
	}
	s.pending = append(s.pending, pendingTxn[Txn]{id, s.cur})
	s.pendingCount.Set(float64(len(s.pending)))
	s.hasCur = false
	return s.begin()
}

// SnapshotState stores the open transaction and every pre-committed one.
func (s *TwoPhaseSink[Txn]) SnapshotState(id int64) error {
	if s.list == nil {
		return s.errorf("snapshot of checkpoint %d without InitializeState", id)
	}
	st := twoPhaseState{Version: 1, Subtask: s.ctx.Subtask, Parallelism: s.ctx.Parallelism}
	if s.hasCur {
		st.Current = s.committer.Encode(s.cur)
	}
	for _, p := range s.pending {
		st.Pending = append(st.Pending, twoPhasePended{p.checkpoint, s.committer.Encode(p.txn)})
	}
	b, err := json.Marshal(st)
	if err != nil {
		return s.errorf("snapshot of checkpoint %d: %w", id, err)
	}
	s.list.Update([][]byte{b})
	return nil
}

// NotifyCheckpointComplete commits every pending transaction of a checkpoint ≤ id.
func (s *TwoPhaseSink[Txn]) NotifyCheckpointComplete(id int64) error {
	if len(s.pending) > 0 && s.pending[0].checkpoint <= id {
		faultinject.Hit(faultinject.BeforeCommit)
	}
	return s.commitUpTo(id)
}

// NotifyCheckpointAborted does nothing: the aborted checkpoint's transaction stays pending.
func (s *TwoPhaseSink[Txn]) NotifyCheckpointAborted(int64) error { return nil }

// commitUpTo commits the pending transactions ≤ id in ascending order. One that fails stays
// pending (and in the next snapshot); the first error is returned after trying them all.
func (s *TwoPhaseSink[Txn]) commitUpTo(id int64) error {
	var first error
	kept := s.pending[:0]
	for _, p := range s.pending {
		if p.checkpoint > id {
			kept = append(kept, p)
			continue
		}
		if err := s.committer.Commit(p.txn); err != nil {
			s.committedFailed.Inc()
			kept = append(kept, p)
			if first == nil {
				if p.checkpoint == endOfInput {
					first = s.errorf("commit at end of input: %w", err)
				} else {
					first = s.errorf("commit of checkpoint %d: %w", p.checkpoint, err)
				}
			}
		}
	}
	s.committedOK.Set(s.committedOK.Value() + float64(len(s.pending)-len(kept)))
	clear(s.pending[len(kept):])
	s.pending = kept
	s.pendingCount.Set(float64(len(kept)))
	return first
}

// EndInput without checkpointing pre-commits the current transaction and commits everything.
// With checkpointing it does nothing: the final checkpoint commits the rest.
func (s *TwoPhaseSink[Txn]) EndInput() error {
	if s.ctx.Checkpointing {
		return nil
	}
	if s.hasCur {
		if err := s.committer.PreCommit(s.cur); err != nil {
			return s.errorf("pre-commit at end of input: %w", err)
		}
		s.pending = append(s.pending, pendingTxn[Txn]{endOfInput, s.cur})
		var zero Txn
		s.cur, s.hasCur = zero, false
	}
	return s.commitUpTo(endOfInput)
}

// EndJob ends the pending transactions when the job ends for good (cancelled, or failed with
// no restart to follow), which would otherwise wait for a restore that never comes (an
// unended PostgreSQL prepared transaction holds its locks forever): those of checkpoints up
// to lastCompleted are committed (their notification may not have arrived), the others are
// aborted, as a restore from lastCompleted would (they belong to checkpoints that never
// complete). One whose commit fails stays pending, for a restore from that checkpoint: it is
// never aborted. Close then aborts the open transaction.
func (s *TwoPhaseSink[Txn]) EndJob(lastCompleted int64) error {
	if len(s.pending) == 0 {
		return nil
	}
	err := s.commitUpTo(lastCompleted)
	kept := s.pending[:0]
	aborted := 0
	for _, p := range s.pending {
		if p.checkpoint <= lastCompleted {
			kept = append(kept, p)
			continue
		}
		if aerr := s.committer.Abort(p.txn); aerr != nil {
			kept = append(kept, p)
			err = errors.Join(err, s.errorf("abort the transaction of checkpoint %d at the end of the job: %w", p.checkpoint, aerr))
			continue
		}
		aborted++
	}
	clear(s.pending[len(kept):])
	s.pending = kept
	s.pendingCount.Set(float64(len(kept)))
	if aborted > 0 {
		s.ctx.Log().Info("aborted the transactions of checkpoints that will not complete: the job ended",
			"count", aborted, "last_completed_checkpoint", lastCompleted)
	}
	return err
}

// Close aborts the current transaction; pending ones are left for a restore to commit (or
// were ended by EndJob).
func (s *TwoPhaseSink[Txn]) Close() error {
	if !s.hasCur {
		return nil
	}
	var zero Txn
	txn := s.cur
	s.cur, s.hasCur = zero, false
	if err := s.committer.Abort(txn); err != nil {
		return s.errorf("abort: %w", err)
	}
	return nil
}

var (
	_ Operator           = (*TwoPhaseSink[int])(nil)
	_ Stateful           = (*TwoPhaseSink[int])(nil)
	_ PreBarrier         = (*TwoPhaseSink[int])(nil)
	_ Snapshotter        = (*TwoPhaseSink[int])(nil)
	_ CheckpointListener = (*TwoPhaseSink[int])(nil)
	_ JobEnder           = (*TwoPhaseSink[int])(nil)
)

// ErrNotCommittable is returned by committers asked to commit a transaction that was never
// pre-committed.
var ErrNotCommittable = errors.New("transaction was not pre-committed")
