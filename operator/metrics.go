package operator

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Metrics are the metrics an operator reports, Flink's operator metric group: values it sets
// on the task goroutine, which the TaskManager's metrics endpoint exports as
// flink_taskmanager_job_task_operator_<name> with the task's labels, operator_name and the
// metric's own labels. It is safe for concurrent use. A nil *Metrics (an operator outside a
// task) hands out metrics that go nowhere.
type Metrics struct {
	mu      sync.Mutex
	metrics []*Metric
}

// maxOperatorMetrics bounds the series one operator may create (a source with very many
// partitions): beyond it, Metric hands out metrics that go nowhere.
const maxOperatorMetrics = 4096

// Metric is one series of an operator: its name, its label pairs and its value.
type Metric struct {
	name   string
	labels []string // name, value, name, value, …
	bits   atomic.Uint64
}

// Metric returns the series name with the label pairs labels (name, value, …), creating it
// at 0 on first use.
func (ms *Metrics) Metric(name string, labels ...string) *Metric {
	if ms == nil {
		return &Metric{name: name}
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, m := range ms.metrics {
		if m.name == name && slices.Equal(m.labels, labels) {
			return m
		}
	}
	m := &Metric{name: name, labels: slices.Clone(labels)}
	if len(ms.metrics) < maxOperatorMetrics {
		ms.metrics = append(ms.metrics, m)
	}
	return m
}

// Each calls fn for every series, in creation order.
func (ms *Metrics) Each(fn func(m *Metric)) {
	if ms == nil {
		return
	}
	ms.mu.Lock()
	all := slices.Clone(ms.metrics)
	ms.mu.Unlock()
	for _, m := range all {
		fn(m)
	}
}

// Name is the series' name (Flink's, camelCase).
func (m *Metric) Name() string { return m.name }

// Labels are the series' own label pairs.
func (m *Metric) Labels() []string { return m.labels }

// Set sets the value. Set, Inc and Value of a nil *Metric do nothing (an operator not opened
// in a task).
func (m *Metric) Set(v float64) {
	if m != nil {
		m.bits.Store(math.Float64bits(v))
	}
}

// Inc adds one.
func (m *Metric) Inc() {
	for m != nil {
		old := m.bits.Load()
		if m.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+1)) {
			return
		}
	}
}

// Value returns the value.
func (m *Metric) Value() float64 {
	if m == nil {
		return 0
	}
	return math.Float64frombits(m.bits.Load())
}
