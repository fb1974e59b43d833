package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/goflink/goflink/internal/poll"
)

// A spell's time is readable while the task is in it, and stops growing when it ends.
func TestSpellReadsTheCurrentSpell(t *testing.T) {
	var s spell
	if s.total() != 0 {
		t.Fatalf("a new spell has %d ns", s.total())
	}
	s.begin(meterNow())
	poll.Until(t, 10*time.Second, "the open spell to grow", func() error {
		if s.total() < int64(time.Millisecond) {
			return errShort
		}
		return nil
	})
	s.end(meterNow())
	done := s.total()
	if done < int64(time.Millisecond) {
		t.Fatalf("ended spell holds %d ns", done)
	}
	first := meterNow()
	poll.Until(t, 10*time.Second, "time to pass", func() error {
		if meterNow()-first < int64(time.Millisecond) {
			return errShort
		}
		return nil
	})
	if s.total() != done {
		t.Fatalf("ended spell grew from %d to %d ns", done, s.total())
	}
}

var errShort = errors.New("not yet")

// load turns two readings into Flink's per-second figures: busy is the running time less idle
// and backpressured time, all clamped to 0..1000 ms per second.
func TestLoadBetweenReadings(t *testing.T) {
	m := newTaskMeter()
	sec := int64(time.Second)
	prev := meterReading{at: 10 * sec, running: 5 * sec, idle: 1 * sec, bp: 1 * sec, recordsIn: 100, recordsOut: 50, bytesIn: 800}
	cur := meterReading{at: 12 * sec, running: 7 * sec, idle: 1*sec + sec/2, bp: 1*sec + sec/4, recordsIn: 2100, recordsOut: 1050, bytesIn: 16800, bytesOut: 7}
	l := m.load(prev, cur)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"records in/s", l.GetRecordsInPerSecond(), 1000},
		{"records out/s", l.GetRecordsOutPerSecond(), 500},
		{"idle ms/s", l.GetIdleTimeMsPerSecond(), 250},
		{"backpressured ms/s", l.GetBackPressuredTimeMsPerSecond(), 125},
		{"busy ms/s", l.GetBusyTimeMsPerSecond(), 625},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if l.GetBytesIn() != 16800 || l.GetBytesOut() != 7 || l.GetHasWatermarks() {
		t.Errorf("load %v: want the totals and no watermarks", l)
	}
	// A task that never started its loop has no rates; watermarks show once there is one.
	m.outputWM.Store(42)
	l = m.load(meterReading{}, meterReading{at: sec})
	if l.GetRecordsInPerSecond() != 0 || !l.GetHasWatermarks() || l.GetOutputWatermark() != 42 {
		t.Errorf("load of an unstarted task with a watermark: %v", l)
	}
}

// A sampler's second sample covers only the interval since its first, and it forgets meters it
// no longer sees.
func TestLoadSampler(t *testing.T) {
	m := newTaskMeter()
	m.start()
	s := newLoadSampler()
	m.recordsIn.Store(1000)
	s.sample(m)
	s.forgetUnseen()
	l := s.sample(m)
	if l.GetRecordsInPerSecond() != 0 {
		t.Errorf("second sample without new records: %v records/s", l.GetRecordsInPerSecond())
	}
	s.forgetUnseen()
	s.forgetUnseen() // m was not sampled since: dropped
	if len(s.prev) != 0 {
		t.Errorf("sampler keeps %d readings of meters it no longer sees", len(s.prev))
	}
}
