// Package leaderrpc is the JobManagers' leader protocol on gRPC, in one place for the three
// sides that speak it (etcd's rpctypes): the JobManager builds the statuses of a member that
// does not lead, and the client and the TaskManager read them to find the leader.
//
// A JobManager that cannot serve a leader-only call answers FAILED_PRECONDITION with an
// errdetails.ErrorInfo of reason NOT_LEADER (its metadata names the leader when it is known), or
// UNAVAILABLE with reason NO_LEADER (an election is under way) or SHUTTING_DOWN. A follower
// that forwards a client's call to the leader marks it with the ForwardedByHeader metadata, so
// that the leader never forwards it again, and names the leader in the LeaderHeader response
// header.
package leaderrpc

import (
	"net"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorInfo reasons of a JobManager's statuses.
const (
	// ReasonNotLeader is on the FAILED_PRECONDITION status of a JobManager that does not lead.
	ReasonNotLeader = "NOT_LEADER"
	// ReasonNoLeader is on the UNAVAILABLE status of a JobManager that knows no leader.
	ReasonNoLeader = "NO_LEADER"
	// ReasonShuttingDown is on the UNAVAILABLE status of a JobManager that is stopping.
	ReasonShuttingDown = "SHUTTING_DOWN"
)

// Domain is the ErrorInfo domain of goflink's statuses.
const Domain = "goflink"

// Metadata keys.
const (
	// InfoLeader is the ErrorInfo metadata key of a NOT_LEADER status holding the leader's RPC
	// address.
	InfoLeader = "leader"
	// InfoLeaderID is the ErrorInfo metadata key of a NOT_LEADER status holding the leader's
	// node ID.
	InfoLeaderID = "leader_id"
	// ForwardedByHeader is the request metadata key of a call a follower forwarded to the
	// leader; its value is the follower's node ID. A JobManager serves such a call itself.
	ForwardedByHeader = "goflink-forwarded-by"
	// LeaderHeader is the response header key of a call a follower forwarded: the leader's RPC
	// address, which a client may call directly next time.
	LeaderHeader = "goflink-leader"
)

// NotLeader is the status of a JobManager that does not lead: FAILED_PRECONDITION with reason
// NOT_LEADER, naming the leader when its address is known.
func NotLeader(msg, leaderID, leaderAddr string) error {
	var meta map[string]string
	if leaderAddr != "" {
		meta = map[string]string{InfoLeader: leaderAddr, InfoLeaderID: leaderID}
	}
	return withReason(codes.FailedPrecondition, ReasonNotLeader, msg, meta)
}

// NoLeader is the status of a JobManager that knows no leader: UNAVAILABLE with reason
// NO_LEADER.
func NoLeader(msg string) error { return withReason(codes.Unavailable, ReasonNoLeader, msg, nil) }

// ShuttingDown is the status of a JobManager that is stopping: UNAVAILABLE with reason
// SHUTTING_DOWN.
func ShuttingDown(msg string) error {
	return withReason(codes.Unavailable, ReasonShuttingDown, msg, nil)
}

func withReason(code codes.Code, reason, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: meta}); err == nil {
		st = d
	}
	return st.Err()
}

// info returns err's gRPC status code and its ErrorInfo detail, if any.
func info(err error) (codes.Code, *errdetails.ErrorInfo) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info
		}
	}
	return st.Code(), nil
}

// Reason returns the ErrorInfo reason of err's status, or "".
func Reason(err error) string {
	_, info := info(err)
	return info.GetReason()
}

// LeaderHint reports whether err is a NOT_LEADER status and returns the leader address it
// names ("" when it names none, or a malformed one).
func LeaderHint(err error) (leader string, notLeader bool) {
	code, info := info(err)
	if code != codes.FailedPrecondition || info.GetReason() != ReasonNotLeader {
		return "", false
	}
	leader = strings.TrimSpace(info.GetMetadata()[InfoLeader])
	if !validAddr(leader) {
		return "", true
	}
	return leader, true
}

// NotLeading reports whether err says that the JobManager answering it does not lead (any
// more): NOT_LEADER, or UNAVAILABLE because it knows no leader or stops.
func NotLeading(err error) bool {
	code, info := info(err)
	switch code {
	case codes.FailedPrecondition:
		return info.GetReason() == ReasonNotLeader
	case codes.Unavailable:
		return info.GetReason() == ReasonNoLeader || info.GetReason() == ReasonShuttingDown
	}
	return false
}

// Retryable reports whether another JobManager, or a later try, may serve a call that failed
// with err: none was reachable, leading yet or running (UNAVAILABLE, with or without a reason),
// or this one does not lead (NOT_LEADER).
func Retryable(err error) bool {
	code, info := info(err)
	switch code {
	case codes.Unavailable:
		return true
	case codes.FailedPrecondition:
		return info.GetReason() == ReasonNotLeader
	}
	return false
}

// Unreached reports whether a call that failed with err did not reach a JobManager, or lost it
// before it answered: UNAVAILABLE from the connection, not a JobManager's own UNAVAILABLE status
// (which carries a reason).
func Unreached(err error) bool {
	code, info := info(err)
	return code == codes.Unavailable && info == nil
}

// validAddr reports whether a is host:port with a host and a port from 1 to 65535.
func validAddr(a string) bool {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p > 0
}
