package worker

import (
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goflink/goflink/internal/metrics"
	"github.com/goflink/goflink/operator"
)

// taskLabels are the labels of a task's metrics, as Flink's Prometheus reporter names them.
var taskLabels = []string{"job_id", "job_name", "task_name", "subtask_index", "task_attempt_num", "tm_id"}

// taskMetric is one of Flink's task metrics, read from a task's meter and its load since the
// previous scrape.
type taskMetric struct {
	desc  *prometheus.Desc
	value func(m *taskMeter, r meterReading, l loadView) (float64, bool)
}

// loadView is a task's load since the previous scrape.
type loadView struct {
	inPerSec, outPerSec, bytesInPerSec, bytesOutPerSec float64
	busy, idle, bp                                     float64 // ms per second
}

func newTaskMetric(name, help string, value func(m *taskMeter, r meterReading, l loadView) (float64, bool)) taskMetric {
	return taskMetric{desc: prometheus.NewDesc("flink_taskmanager_job_task_"+name, help, taskLabels, nil), value: value}
}

func always(v float64) (float64, bool) { return v, true }

var taskMetrics = []taskMetric{
	newTaskMetric("numRecordsIn", "Records the task has read.", func(_ *taskMeter, r meterReading, _ loadView) (float64, bool) { return always(float64(r.recordsIn)) }),
	newTaskMetric("numRecordsOut", "Records the task has emitted.", func(_ *taskMeter, r meterReading, _ loadView) (float64, bool) { return always(float64(r.recordsOut)) }),
	newTaskMetric("numBytesIn", "Bytes the task has read from its input channels.", func(_ *taskMeter, r meterReading, _ loadView) (float64, bool) { return always(float64(r.bytesIn)) }),
	newTaskMetric("numBytesOut", "Bytes the task has written to its output channels.", func(_ *taskMeter, r meterReading, _ loadView) (float64, bool) { return always(float64(r.bytesOut)) }),
	newTaskMetric("numRecordsInPerSecond", "Records read per second since the previous scrape.", func(_ *taskMeter, _ meterReading, l loadView) (float64, bool) { return always(l.inPerSec) }),
	newTaskMetric("numRecordsOutPerSecond", "Records emitted per second since the previous scrape.", func(_ *taskMeter, _ meterReading, l loadView) (float64, bool) { return always(l.outPerSec) }),
	newTaskMetric("numBytesInPerSecond", "Bytes read per second since the previous scrape.", func(_ *taskMeter, _ meterReading, l loadView) (float64, bool) { return always(l.bytesInPerSec) }),
	newTaskMetric("numBytesOutPerSecond", "Bytes written per second since the previous scrape.", func(_ *taskMeter, _ meterReading, l loadView) (float64, bool) { return always(l.bytesOutPerSec) }),
	newTaskMetric("busyTimeMsPerSecond", "Milliseconds per second the task was processing, since the previous scrape.", func(_ *taskMeter, _ meterReading, l loadView) (float64, bool) { return always(l.busy) }),
	newTaskMetric("idleTimeMsPerSecond", "Milliseconds per second the task waited for input, since the previous scrape.", func(_ *taskMeter, _ meterReading, l loadView) (float64, bool) { return always(l.idle) }),
	newTaskMetric("backPressuredTimeMsPerSecond", "Milliseconds per second the task waited for room in its output, since the previous scrape.", func(_ *taskMeter, _ meterReading, l loadView) (float64, bool) { return always(l.bp) }),
	newTaskMetric("isBackPressured", "1 while the task waits for room in its output.", func(m *taskMeter, _ meterReading, _ loadView) (float64, bool) {
		if m.isBackPressured() {
			return 1, true
		}
		return 0, true
	}),
	newTaskMetric("checkpointAlignmentTime", "Nanoseconds the last checkpoint's barriers took to align.", func(m *taskMeter, _ meterReading, _ loadView) (float64, bool) {
		return always(float64(m.alignment.Load()))
	}),
	newTaskMetric("checkpointStartDelayNanos", "Nanoseconds from the last checkpoint's trigger to the task taking it (high under backpressure).", func(m *taskMeter, _ meterReading, _ loadView) (float64, bool) {
		return always(float64(m.startDelay.Load()))
	}),
	newTaskMetric("currentInputWatermark", "The task's input watermark (epoch milliseconds); absent before the first.", func(m *taskMeter, _ meterReading, _ loadView) (float64, bool) {
		wm := m.inputWM.Load()
		return float64(wm), wm != operator.MinWatermark
	}),
	newTaskMetric("currentOutputWatermark", "The task's output watermark (epoch milliseconds); absent before the first.", func(m *taskMeter, _ meterReading, _ loadView) (float64, bool) {
		wm := m.outputWM.Load()
		return float64(wm), wm != operator.MinWatermark
	}),
	newTaskMetric("numLateRecordsDropped", "Records the task's windows and joins dropped as too late.", func(m *taskMeter, _ meterReading, _ loadView) (float64, bool) {
		return always(float64(m.lateDropped.Load()))
	}),
}

// tmCollector exports the metrics of a TaskManager's running tasks; rates are computed at each
// scrape over the interval since the previous one.
type tmCollector struct {
	tm    *TaskManager
	slots *prometheus.Desc
	tasks *prometheus.Desc

	mu   sync.Mutex // serializes scrapes (prev)
	prev map[*taskMeter]meterReading
}

func newTMCollector(tm *TaskManager) *tmCollector {
	return &tmCollector{
		tm:    tm,
		slots: prometheus.NewDesc("flink_taskmanager_Status_taskSlotsTotal", "Task slots the TaskManager offers.", []string{"tm_id"}, nil),
		tasks: prometheus.NewDesc("flink_taskmanager_Status_numRunningTasks", "Tasks the TaskManager runs.", []string{"tm_id"}, nil),
		prev:  map[*taskMeter]meterReading{},
	}
}

func (c *tmCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.slots
	ch <- c.tasks
	for _, m := range taskMetrics {
		ch <- m.desc
	}
}

func (c *tmCollector) Collect(ch chan<- prometheus.Metric) {
	running := c.tm.runningTasks()
	c.mu.Lock()
	defer c.mu.Unlock()
	metrics.Gauge(ch, c.slots, float64(c.tm.slots), c.tm.id)
	metrics.Gauge(ch, c.tasks, float64(len(running)), c.tm.id)
	seen := make(map[*taskMeter]meterReading, len(running))
	for _, t := range running {
		cur := t.meter.read()
		prev := c.prev[t.meter]
		seen[t.meter] = cur
		l := t.meter.load(prev, cur)
		since := prev
		if since.at == 0 {
			since.at = t.meter.running.Load()
		}
		var bin, bout float64
		if secs := float64(cur.at-since.at) / 1e9; since.at > 0 && secs > 0 {
			bin, bout = float64(cur.bytesIn-since.bytesIn)/secs, float64(cur.bytesOut-since.bytesOut)/secs
		}
		view := loadView{inPerSec: l.GetRecordsInPerSecond(), outPerSec: l.GetRecordsOutPerSecond(), bytesInPerSec: bin, bytesOutPerSec: bout,
			busy: l.GetBusyTimeMsPerSecond(), idle: l.GetIdleTimeMsPerSecond(), bp: l.GetBackPressuredTimeMsPerSecond()}
		labels := c.tm.taskLabelValues(t)
		for _, m := range taskMetrics {
			if v, ok := m.value(t.meter, cur, view); ok {
				metrics.Gauge(ch, m.desc, v, labels...)
			}
		}
	}
	c.prev = seen // a finished task's metrics disappear with it
}

// opCollector exports the metrics operators report (operator.Metrics) as
// flink_taskmanager_job_task_operator_<name>, with the task's labels, operator_name and the
// metric's own. It is an unchecked collector: operators name their series at run time.
type opCollector struct{ tm *TaskManager }

func (opCollector) Describe(chan<- *prometheus.Desc) {}

func (c opCollector) Collect(ch chan<- prometheus.Metric) {
	descs := map[string]*prometheus.Desc{}
	for _, t := range c.tm.runningTasks() {
		ops := t.meter.operators.Load()
		if ops == nil {
			continue
		}
		labels := c.tm.taskLabelValues(t)
		for _, op := range *ops {
			op.metrics.Each(func(m *operator.Metric) {
				own := m.Labels()
				keys := append(append([]string{}, taskLabels...), "operator_name")
				values := append(append([]string{}, labels...), op.name)
				for i := 0; i+1 < len(own); i += 2 {
					keys, values = append(keys, own[i]), append(values, own[i+1])
				}
				id := m.Name() + "\x00" + strings.Join(keys, "\x00")
				d, ok := descs[id]
				if !ok {
					d = prometheus.NewDesc("flink_taskmanager_job_task_operator_"+m.Name(), "Operator metric "+m.Name()+".", keys, nil)
					descs[id] = d
				}
				metrics.Gauge(ch, d, m.Value(), values...)
			})
		}
	}
}

// taskLabelValues are the values of taskLabels for t.
func (tm *TaskManager) taskLabelValues(t *task) []string {
	id := t.id
	return []string{id.GetJobId(), t.req.GetJobGraph().GetName(), t.vertex.GetName(), strconv.Itoa(int(id.GetSubtask())), strconv.Itoa(int(id.GetAttempt())), tm.id}
}
