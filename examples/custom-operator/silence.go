package main

import (
	"errors"
	"time"

	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
	"github.com/goflink/goflink/state"
)

// Silence is a second custom operator type, in the shape of Flink's KeyedProcessFunction with
// timers: per key it emits a row (key, last_seen) once a key has seen no record for timeout of
// event time. Each record moves the key's event-time timer; the timer that fires is the
// silence. Its state (the last time per key) and its timers are keyed state: checkpointed,
// restored and split by key group with the rest of the job.
var Silence = operator.Define(operator.Type{Name: "silence", Keyed: true, Fields: []string{"timeout"}},
	planSilence, newSilence)

type silenceConfig struct {
	TimeoutMS int64 `json:"timeout_ms"`
}

func planSilence(p *operator.Planner) (silenceConfig, *operator.Shape) {
	var c silenceConfig
	if e, ok := p.Require("timeout"); ok {
		if d, ok := e.Duration(); ok && d < time.Millisecond {
			e.Problemf("must be at least 1ms, got %v", d)
		} else {
			c.TimeoutMS = d.Milliseconds()
		}
	}
	if !p.Timed {
		p.Problemf("silence works in event time: put a watermark upstream")
	}
	return c, operator.NewShape([]record.Field{{Name: "key", Type: p.KeyType}, {Name: "last_seen", Type: record.Timestamp}}, false)
}

// silence is one subtask: the last event time per key in value state, one timer per key.
type silence struct {
	operator.Base
	timeout int64
	last    *state.ValueState[int64]
	timers  *operator.TimerService
	row     record.Row
}

func newSilence(c silenceConfig, _, _ *record.Schema) (any, error) {
	return &silence{timeout: c.TimeoutMS, row: make(record.Row, 2)}, nil
}

// InitializeState registers the keyed state before Open.
func (s *silence) InitializeState(sc operator.StateContext) error {
	kb := sc.KeyedBackend()
	if kb == nil {
		return errors.New("silence needs a key-by before it")
	}
	var err error
	s.last, err = state.NewValueState(kb, "silence/last", state.Codec[int64](state.Int64Codec{}))
	return err
}

// Open takes the timer service the task gives a keyed operator that implements OnTimer.
func (s *silence) Open(ctx *operator.Context, out operator.Output) error {
	s.timers = ctx.Timers()
	return s.Base.Open(ctx, out)
}

// Process moves the key's timer to the record's time + timeout.
func (s *silence) Process(record.Row) error {
	ts := s.Context().Timestamp()
	prev, ok, err := s.last.Value()
	if err != nil {
		return err
	}
	if ok {
		if ts <= prev {
			return nil // an older record does not extend the silence's start
		}
		if err := s.timers.Delete(operator.EventTime, prev+s.timeout); err != nil {
			return err
		}
	}
	if err := s.last.Update(ts); err != nil {
		return err
	}
	return s.timers.Register(operator.EventTime, ts+s.timeout)
}

// OnTimer fires when the watermark passed a key's last record + timeout: the key fell silent.
// The key is current, so the state and Context().Key() are the key's.
func (s *silence) OnTimer(t operator.Timer) error {
	last, _, err := s.last.Value()
	if err != nil {
		return err
	}
	if err := s.last.Clear(); err != nil {
		return err
	}
	s.row[0] = t.Key
	s.row[1] = record.TimeValue(time.UnixMilli(last))
	return s.Emit(s.row)
}
