package coordinator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goflink/goflink/internal/metrics"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// jobLabels are the labels of a job's metrics, as Flink's Prometheus reporter names them.
var jobLabels = []string{"job_id", "job_name"}

// jmCollector exports the JobManager's metrics under Flink's names: the Raft state on every
// JobManager; the cluster and its jobs' on the leader only (a follower has no job masters).
// A job's metrics disappear when it ends.
type jmCollector struct {
	jm                                                                *JobManager
	isLeader, term, lastIndex, leaderChanges                          *prometheus.Desc
	tms, slotsTotal, slotsFree, runningJobs                           *prometheus.Desc
	restarts, uptime, downtime, restartingTime                        *prometheus.Desc
	completed, failed, inProgress, total                              *prometheus.Desc
	lastDuration, lastSize, lastPersisted, lastRestore, lastAlignment *prometheus.Desc
}

func newJMCollector(jm *JobManager) *jmCollector {
	jmDesc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("flink_jobmanager_"+name, help, labels, nil)
	}
	job := func(name, help string) *prometheus.Desc { return jmDesc("job_"+name, help, jobLabels...) }
	return &jmCollector{
		jm:             jm,
		isLeader:       jmDesc("raft_isLeader", "1 on the JobManager that leads the Raft group.", "jm_id"),
		term:           jmDesc("raft_term", "The JobManager's current Raft term.", "jm_id"),
		lastIndex:      jmDesc("raft_lastIndex", "The index of the JobManager's last Raft log entry.", "jm_id"),
		leaderChanges:  jmDesc("raft_leaderChanges", "Times this JobManager became or stopped being the leader since it started.", "jm_id"),
		tms:            jmDesc("numRegisteredTaskManagers", "TaskManagers registered with the leader."),
		slotsTotal:     jmDesc("taskSlotsTotal", "Task slots of the registered TaskManagers."),
		slotsFree:      jmDesc("taskSlotsAvailable", "Free task slots of the registered TaskManagers."),
		runningJobs:    jmDesc("numRunningJobs", "Jobs that have not ended."),
		restarts:       job("numRestarts", "Restarts of the job since it was submitted."),
		uptime:         job("uptime", "Milliseconds the job has been RUNNING without interruption (0 otherwise)."),
		downtime:       job("downtime", "Milliseconds the job has been failing or restarting (0 while it runs)."),
		restartingTime: job("restartingTime", "Milliseconds the job has been RESTARTING (0 otherwise)."),
		completed:      job("numberOfCompletedCheckpoints", "Checkpoints completed under the current leader."),
		failed:         job("numberOfFailedCheckpoints", "Checkpoints failed under the current leader."),
		inProgress:     job("numberOfInProgressCheckpoints", "Checkpoints in progress."),
		total:          job("totalNumberOfCheckpoints", "Checkpoints triggered by the job's current leader."),
		lastDuration:   job("lastCheckpointDuration", "Milliseconds the last completed checkpoint took."),
		lastSize:       job("lastCheckpointSize", "Bytes of the last completed checkpoint's state."),
		lastPersisted:  job("lastCheckpointPersistedData", "Bytes of in-flight data the last completed checkpoint persisted (unaligned checkpoints)."),
		lastAlignment:  job("lastCheckpointAlignmentTime", "Milliseconds the last completed checkpoint's alignment took."),
		lastRestore:    job("lastCheckpointRestoreTimestamp", "When the job last restored a checkpoint (epoch milliseconds); -1 when it has not."),
	}
}

func (c *jmCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.isLeader, c.term, c.lastIndex, c.leaderChanges, c.tms, c.slotsTotal, c.slotsFree, c.runningJobs,
		c.restarts, c.uptime, c.downtime, c.restartingTime, c.completed, c.failed, c.inProgress, c.total,
		c.lastDuration, c.lastSize, c.lastPersisted, c.lastAlignment, c.lastRestore} {
		ch <- d
	}
}

func (c *jmCollector) Collect(ch chan<- prometheus.Metric) {
	jm := c.jm
	st := jm.ownStatus()
	id := jm.cfg.NodeID
	metrics.Gauge(ch, c.isLeader, boolValue(st.GetLeader()), id)
	metrics.Gauge(ch, c.term, float64(st.GetTerm()), id)
	metrics.Gauge(ch, c.lastIndex, float64(st.GetLastIndex()), id)
	metrics.Gauge(ch, c.leaderChanges, float64(jm.leaderChanges.Load()), id)
	if jm.checkLeader() != nil {
		return
	}
	var slots, free int32
	infos := jm.rm.infos()
	for _, tm := range infos {
		slots += tm.GetSlots()
		free += tm.GetFreeSlots()
	}
	metrics.Gauge(ch, c.tms, float64(len(infos)))
	metrics.Gauge(ch, c.slotsTotal, float64(slots))
	metrics.Gauge(ch, c.slotsFree, float64(free))
	running := 0
	for _, m := range jm.disp.allMasters() {
		v := m.view()
		d := v.details
		if isTerminalJob(d.GetStatus()) {
			continue
		}
		running++
		c.collectJob(ch, v, []string{d.GetId(), d.GetName()})
	}
	metrics.Gauge(ch, c.runningJobs, float64(running))
}

// collectJob exports one job's metrics from its master's view.
func (c *jmCollector) collectJob(ch chan<- prometheus.Metric, v *jobView, labels []string) {
	d := v.details
	metrics.Gauge(ch, c.restarts, float64(d.GetRestarts()), labels...)
	var up, down, restarting float64
	if since := v.statusSince; !since.IsZero() {
		ms := float64(time.Since(since).Milliseconds())
		switch d.GetStatus() {
		case pb.JobStatus_JOB_STATUS_RUNNING:
			up = ms
		case pb.JobStatus_JOB_STATUS_RESTARTING:
			down, restarting = ms, ms
		case pb.JobStatus_JOB_STATUS_FAILING:
			down = ms
		}
	}
	metrics.Gauge(ch, c.uptime, up, labels...)
	metrics.Gauge(ch, c.downtime, down, labels...)
	metrics.Gauge(ch, c.restartingTime, restarting, labels...)
	var completed, failed, inProgress int
	var last *pb.CheckpointInfo
	for _, cp := range v.checkpoints {
		if cp.GetSavepoint() {
			continue
		}
		switch cp.GetStatus() {
		case pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED:
			completed++
			if last == nil || cp.GetId() > last.GetId() {
				last = cp
			}
		case pb.CheckpointStatus_CHECKPOINT_STATUS_FAILED:
			failed++
		default:
			inProgress++
		}
	}
	completed, failed = completed+v.dropped.completed, failed+v.dropped.failed
	metrics.Gauge(ch, c.completed, float64(completed), labels...)
	metrics.Gauge(ch, c.failed, float64(failed), labels...)
	metrics.Gauge(ch, c.inProgress, float64(inProgress), labels...)
	metrics.Gauge(ch, c.total, float64(completed+failed+inProgress), labels...)
	if last != nil {
		metrics.Gauge(ch, c.lastDuration, float64(last.GetDurationMs()), labels...)
		metrics.Gauge(ch, c.lastSize, float64(last.GetStateSizeBytes()), labels...)
		metrics.Gauge(ch, c.lastPersisted, float64(last.GetInFlightBytes()), labels...)
		metrics.Gauge(ch, c.lastAlignment, float64(last.GetAlignmentMs()), labels...)
	}
	restore := -1.0
	if !v.restoredAt.IsZero() {
		restore = float64(v.restoredAt.UnixMilli())
	}
	metrics.Gauge(ch, c.lastRestore, restore, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
