package client

import (
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRetryable(t *testing.T) {
	notLeader, err := status.New(codes.FailedPrecondition, "this jobmanager is not the leader").
		WithDetails(&errdetails.ErrorInfo{Reason: reasonNotLeader, Domain: "goflink"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"not the leader", notLeader.Err(), true},
		{"no leader yet", status.Error(codes.Unavailable, "no jobmanager leader is known"), true},
		{"job already ended", status.Error(codes.FailedPrecondition, "job has already ended"), false},
		{"a message alone does not count", status.Error(codes.FailedPrecondition, "this jobmanager is not the leader"), false},
		{"invalid spec", status.Error(codes.InvalidArgument, "invalid job spec"), false},
		{"not found", status.Error(codes.NotFound, "job not found"), false},
		{"plain error", errors.New("boom"), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("%s: retryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
