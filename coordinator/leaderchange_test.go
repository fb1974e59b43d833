package coordinator

import "testing"

// The exception history entry of a job taken over by a new leader says who ran it before,
// who runs it now (with the term), and where it restarts from.
func TestLeaderChangeCause(t *testing.T) {
	jm1, jm2 := leaderInfo{id: "jm1", term: 3}, leaderInfo{id: "jm2", term: 7}
	tests := []struct {
		name       string
		prev, cur  leaderInfo
		restarting bool
		checkpoint int64
		want       string
	}{
		{"running job, new leader", jm1, jm2, false, 12,
			"the JobManager leader changed (jm1 → jm2, term 7): the job restarts from checkpoint 12"},
		{"restarting job, new leader", jm1, jm2, true, 12,
			"the JobManager leader changed (jm1 → jm2, term 7) while the job was restarting: the job restarts from checkpoint 12"},
		{"no checkpoint yet", jm1, jm2, false, 0,
			"the JobManager leader changed (jm1 → jm2, term 7): no checkpoint completed yet: the job starts over"},
		{"same JobManager again", jm1, leaderInfo{id: "jm1", term: 9}, false, 4,
			"JobManager jm1 lost its leadership and regained it (term 3 → 9): the job restarts from checkpoint 4"},
		{"previous leader unknown", leaderInfo{}, jm2, false, 4,
			"a new JobManager leader took over (jm2, term 7): the job restarts from checkpoint 4"},
	}
	for _, tc := range tests {
		if got := leaderChangeCause(tc.prev, tc.cur, tc.restarting, tc.checkpoint); got != tc.want {
			t.Errorf("%s: leaderChangeCause() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
