package leaderrpc

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func withInfo(t *testing.T, code codes.Code, info *errdetails.ErrorInfo) error {
	t.Helper()
	st, err := status.New(code, "not the leader").WithDetails(info)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// The statuses a JobManager builds carry the code, reason, domain and leader that the readers
// (and older clients, which compare the strings) expect.
func TestStatuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
		meta   map[string]string
	}{
		{"not leader, leader known", NotLeader("not the leader", "jm2", "10.0.0.2:6123"), codes.FailedPrecondition, "NOT_LEADER",
			map[string]string{"leader": "10.0.0.2:6123", "leader_id": "jm2"}},
		{"not leader, address unknown", NotLeader("not the leader", "jm2", ""), codes.FailedPrecondition, "NOT_LEADER", nil},
		{"no leader", NoLeader("no leader is known"), codes.Unavailable, "NO_LEADER", nil},
		{"shutting down", ShuttingDown("stopping"), codes.Unavailable, "SHUTTING_DOWN", nil},
	} {
		st := status.Convert(tc.err)
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		if st.Code() != tc.code || info.GetReason() != tc.reason || info.GetDomain() != "goflink" || fmt.Sprint(info.GetMetadata()) != fmt.Sprint(tc.meta) {
			t.Errorf("%s: %v with %v; want %v, reason %s, domain goflink, metadata %v", tc.name, st.Code(), info, tc.code, tc.reason, tc.meta)
		}
		if Reason(tc.err) != tc.reason {
			t.Errorf("%s: Reason = %q, want %q", tc.name, Reason(tc.err), tc.reason)
		}
	}
}

func TestLeaderHint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		want      string
		notLeader bool
	}{
		{"hint", NotLeader("not the leader", "jm2", "10.0.0.2:6123"), "10.0.0.2:6123", true},
		{"hint with blanks", withInfo(t, codes.FailedPrecondition, &errdetails.ErrorInfo{Reason: ReasonNotLeader,
			Metadata: map[string]string{"leader": " jm2:6123 "}}), "jm2:6123", true},
		{"leader unknown", NotLeader("not the leader", "jm2", ""), "", true},
		{"malformed hint", withInfo(t, codes.FailedPrecondition, &errdetails.ErrorInfo{Reason: ReasonNotLeader,
			Metadata: map[string]string{"leader": "jm2"}}), "", true},
		{"port 0", withInfo(t, codes.FailedPrecondition, &errdetails.ErrorInfo{Reason: ReasonNotLeader,
			Metadata: map[string]string{"leader": "jm2:0"}}), "", true},
		{"another reason", withInfo(t, codes.FailedPrecondition, &errdetails.ErrorInfo{Reason: "OTHER",
			Metadata: map[string]string{"leader": "10.0.0.2:6123"}}), "", false},
		{"another code", withInfo(t, codes.Unavailable, &errdetails.ErrorInfo{Reason: ReasonNotLeader,
			Metadata: map[string]string{"leader": "10.0.0.2:6123"}}), "", false},
		{"wrapped", fmt.Errorf("register: %w", NotLeader("not the leader", "jm2", "10.0.0.2:6123")), "10.0.0.2:6123", true},
		{"plain error", errors.New("boom"), "", false},
		{"nil", nil, "", false},
	} {
		if got, nl := LeaderHint(tc.err); got != tc.want || nl != tc.notLeader {
			t.Errorf("%s: LeaderHint(%v) = %q, %v; want %q, %v", tc.name, tc.err, got, nl, tc.want, tc.notLeader)
		}
	}
}

func TestNotLeadingRetryableUnreached(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		err                             error
		notLeading, retrying, unreached bool
	}{
		{"not the leader", NotLeader("not the leader", "", ""), true, true, false},
		{"no leader yet", NoLeader("no jobmanager leader is known"), true, true, false},
		{"shutting down", ShuttingDown("jobmanager is shutting down"), true, true, false},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), false, true, true},
		{"unreachable, wrapped", fmt.Errorf("forward: %w", status.Error(codes.Unavailable, "connection refused")), false, true, true},
		{"job already ended", status.Error(codes.FailedPrecondition, "job has already ended"), false, false, false},
		{"a message alone does not count", status.Error(codes.FailedPrecondition, "this jobmanager is not the leader"), false, false, false},
		{"invalid spec", status.Error(codes.InvalidArgument, "invalid job spec"), false, false, false},
		{"not found", status.Error(codes.NotFound, "job not found"), false, false, false},
		{"plain error", errors.New("boom"), false, false, false},
		{"nil", nil, false, false, false},
	} {
		if got := Unreached(tc.err); got != tc.unreached {
			t.Errorf("%s: Unreached(%v) = %v, want %v", tc.name, tc.err, got, tc.unreached)
		}
		if got := NotLeading(tc.err); got != tc.notLeading {
			t.Errorf("%s: NotLeading(%v) = %v, want %v", tc.name, tc.err, got, tc.notLeading)
		}
		if got := Retryable(tc.err); got != tc.retrying {
			t.Errorf("%s: Retryable(%v) = %v, want %v", tc.name, tc.err, got, tc.retrying)
		}
	}
}
