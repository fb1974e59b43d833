package worker

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ParseJobManagers turns --jobmanager values into JobManager addresses: each value holds one or
// more comma-separated host:port addresses (spaces around them are ignored). Duplicates are
// dropped, keeping the first; an empty entry or a malformed address is an error naming it.
func ParseJobManagers(values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		for a := range strings.SplitSeq(v, ",") {
			a = strings.TrimSpace(a)
			if a == "" && strings.Contains(v, ",") {
				return nil, fmt.Errorf("empty jobmanager address in %q", v)
			}
			if err := checkJobManagerAddr(a); err != nil {
				return nil, err
			}
			if !slices.Contains(out, a) {
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

// fenceLocked checks a JobManager command's leader term (its fencing token). A term below the
// highest seen comes from a deposed leader and is refused. A higher term is adopted only from
// the JobManager this TaskManager registered with: in its registration handshake
// (registerWith), or on a command of the current registration. A command of any other
// registration that carries a higher term is refused and leaves the term as it was: one
// CancelTask with term 2^64-1 once made a TaskManager refuse every later command of its leader
// and every registration, while it looked healthy. Term 0 comes from a JobManager that does not
// send terms: once a term was seen it is accepted only for the current registration, which that
// registration's leader issued. tm.mu is held.
func (tm *TaskManager) fenceLocked(registration string, term uint64) error {
	current := registration != "" && registration == tm.registration
	switch {
	case term == 0:
		if tm.leaderTerm > 0 && !current {
			return status.Errorf(codes.FailedPrecondition, "command without a leader term for registration %q, which is not the current one (leader term %d)", registration, tm.leaderTerm)
		}
	case term < tm.leaderTerm:
		return status.Errorf(codes.FailedPrecondition, "stale leader term %d < %d", term, tm.leaderTerm)
	case term > tm.leaderTerm && !current:
		return status.Errorf(codes.FailedPrecondition, "leader term %d of registration %q, which is not this TaskManager's current registration, is not adopted (leader term %d)",
			term, registration, tm.leaderTerm)
	default:
		tm.leaderTerm = term
	}
	return nil
}
