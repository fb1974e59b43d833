// Package faultinject kills the process at named points of its work, for tests that must
// crash a real process at a moment no outside observer can hit: between a two-phase-commit
// sink's pre-commit and its commit, or in the middle of a state file's upload.
//
// The environment variable GOFLINK_FAULT_INJECT arms points: a comma-separated list of
// point names, each optionally with @N to fire at its N-th hit instead of the first
// ("before-commit@3,state-upload"). A point fires once: the process logs it and SIGKILLs
// itself, so nothing runs after it, as after an outside SIGKILL. Unset, Hit costs a load.
package faultinject

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Env is the environment variable that arms points.
const Env = "GOFLINK_FAULT_INJECT"

// The points the processes hit.
const (
	// BeforeCommit: a two-phase-commit sink is about to commit a pre-committed transaction of
	// a completed checkpoint.
	BeforeCommit = "before-commit"
	// StateUpload: a state file of a checkpoint is written to storage and not yet committed
	// (an S3 multipart upload of a large one is under way).
	StateUpload = "state-upload"
)

// points are the names parse accepts.
var points = []string{BeforeCommit, StateUpload}

// armed is a point's trigger: it fires at hit number at.
type armed struct {
	at   int64
	hits atomic.Int64
}

var (
	table = sync.OnceValue(func() map[string]*armed {
		t, err := parse(os.Getenv(Env))
		if err != nil {
			// A test set it wrong: say so loudly rather than run without the fault it wants.
			slog.Error("fault injection: ignoring "+Env, "err", err)
			return nil
		}
		if len(t) > 0 {
			slog.Warn("fault injection armed: this process kills itself at "+os.Getenv(Env), "env", Env)
		}
		return t
	})
	kill = func() {
		p, err := os.FindProcess(os.Getpid())
		if err == nil {
			err = p.Kill()
		}
		// Not reached after a kill; exit as abruptly if the signal could not be sent.
		slog.Error("fault injection: cannot kill the process; exiting", "err", err)
		os.Exit(137)
	}
)

// parse reads a GOFLINK_FAULT_INJECT value.
func parse(v string) (map[string]*armed, error) {
	t := map[string]*armed{}
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, nth, hasN := strings.Cut(f, "@")
		at := int64(1)
		if hasN {
			n, err := strconv.ParseInt(nth, 10, 64)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%s: point %q: @%s is not a hit number ≥ 1", Env, name, nth)
			}
			at = n
		}
		known := false
		for _, p := range points {
			known = known || p == name
		}
		if !known {
			return nil, fmt.Errorf("%s: unknown point %q (known: %s)", Env, name, strings.Join(points, ", "))
		}
		t[name] = &armed{at: at}
	}
	return t, nil
}

// Hit marks that the process reached point; an armed point kills the process at its hit.
func Hit(point string) {
	a := table()[point]
	if a == nil || a.hits.Add(1) != a.at {
		return
	}
	slog.Warn("fault injection: killing the process", "point", point, "hit", a.at)
	kill()
}
