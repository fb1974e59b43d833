package worker

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorInfo reasons of the JobManager's TaskManagerService answers.
const (
	// reasonNotLeader is on the FAILED_PRECONDITION answer of a JobManager that does not lead;
	// its metadata names the leader when the JobManager knows it.
	reasonNotLeader = "NOT_LEADER"
	// reasonNoLeader is on the UNAVAILABLE answer of a JobManager while no leader is known.
	reasonNoLeader = "NO_LEADER"
	// reasonShuttingDown is on the UNAVAILABLE answer of a JobManager that is stopping.
	reasonShuttingDown = "SHUTTING_DOWN"
	// leaderHintKey is the ErrorInfo metadata key of a NOT_LEADER answer holding the leader's
	// RPC address.
	leaderHintKey = "leader"
)

// ParseJobManagers turns --jobmanager values into JobManager addresses: each value holds one or
// more comma-separated host:port addresses (spaces around them are ignored). Duplicates are
// dropped, keeping the first; an empty entry or a malformed address is an error naming it.
func ParseJobManagers(values []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, v := range values {
		for a := range strings.SplitSeq(v, ",") {
			a = strings.TrimSpace(a)
			if a == "" && strings.Contains(v, ",") {
				return nil, fmt.Errorf("empty jobmanager address in %q", v)
			}
			if err := checkJobManagerAddr(a); err != nil {
				return nil, err
			}
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("at least one jobmanager address is required")
	}
	return out, nil
}

// checkJobManagerAddr checks that a is a dialable host:port.
func checkJobManagerAddr(a string) error {
	if a == "" {
		return errors.New("empty jobmanager address")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("jobmanager address %q: %w", a, err)
	}
	if host == "" {
		return fmt.Errorf("jobmanager address %q: missing host", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("jobmanager address %q: port must be a number from 1 to 65535", a)
	}
	return nil
}

// errorInfo returns the gRPC status code of err and its ErrorInfo detail, if any.
func errorInfo(err error) (codes.Code, *errdetails.ErrorInfo) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return status.Code(err), nil
	}
	st := se.GRPCStatus()
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info
		}
	}
	return st.Code(), nil
}

// hasReason reports whether err carries a gRPC ErrorInfo detail with this reason.
func hasReason(err error, reason string) bool {
	_, info := errorInfo(err)
	return info != nil && info.GetReason() == reason
}

// leaderHint reports whether err is a JobManager's NOT_LEADER answer and returns the leader
// address it names ("" when it names none, or names a malformed one).
func leaderHint(err error) (leader string, notLeader bool) {
	code, info := errorInfo(err)
	if code != codes.FailedPrecondition || info.GetReason() != reasonNotLeader {
		return "", false
	}
	leader = info.GetMetadata()[leaderHintKey]
	if checkJobManagerAddr(leader) != nil {
		return "", true
	}
	return leader, true
}

// notLeading reports whether err says that the JobManager answering it does not lead (any
// more): NOT_LEADER, or UNAVAILABLE because no leader is known or the JobManager stops.
func notLeading(err error) bool {
	code, info := errorInfo(err)
	switch code {
	case codes.FailedPrecondition:
		return info.GetReason() == reasonNotLeader
	case codes.Unavailable:
		return info.GetReason() == reasonNoLeader || info.GetReason() == reasonShuttingDown
	}
	return false
}

// fenceLocked checks a JobManager command's leader term (its fencing token) and raises the
// highest term seen. A term below the highest seen comes from a deposed leader and is refused.
// Term 0 comes from a JobManager that does not send terms: once a term was seen it is accepted
// only for the current registration, which that registration's leader issued. tm.mu is held.
func (tm *TaskManager) fenceLocked(registration string, term uint64) error {
	switch {
	case term == 0:
		if tm.leaderTerm > 0 && (registration == "" || registration != tm.registration) {
			return status.Errorf(codes.FailedPrecondition, "command without a leader term for registration %q, which is not the current one (leader term %d)", registration, tm.leaderTerm)
		}
	case term < tm.leaderTerm:
		return status.Errorf(codes.FailedPrecondition, "stale leader term %d < %d", term, tm.leaderTerm)
	default:
		tm.leaderTerm = term
	}
	return nil
}
