package worker

import (
	"fmt"
	"slices"
	"testing"
)

// listener records the checkpoint notifications it receives.
type listener struct{ calls []string }

func (l *listener) NotifyCheckpointComplete(id int64) error {
	l.calls = append(l.calls, fmt.Sprintf("complete(%d)", id))
	return nil
}

func (l *listener) NotifyCheckpointAborted(id int64) error {
	l.calls = append(l.calls, fmt.Sprintf("aborted(%d)", id))
	return nil
}

func TestCheckpointNotificationsAreMonotonic(t *testing.T) {
	l := &listener{}
	tk := &task{chain: []chainMember{{name: "sink", impl: l}}, aborted: map[int64]bool{}}
	steps := []struct {
		name string
		do   func() error
	}{
		{"complete 3", func() error { return tk.notifyComplete(3) }},
		{"late complete 2 is ignored", func() error { return tk.notifyComplete(2) }},
		{"duplicate complete 3 is ignored", func() error { return tk.notifyComplete(3) }},
		// The completion of 4 was lost: the abort of 5 carries it and redelivers it first.
		{"abort 5 with latest completed 4", func() error { return tk.notifyAborted(5, 4) }},
		{"abort 6 with latest completed 4 again", func() error { return tk.notifyAborted(6, 4) }},
		{"complete 7 skips 5 and 6", func() error { return tk.notifyComplete(7) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	want := []string{"complete(3)", "complete(4)", "aborted(5)", "aborted(6)", "complete(7)"}
	if !slices.Equal(l.calls, want) {
		t.Errorf("operator saw %v, want %v", l.calls, want)
	}
	// An aborted checkpoint whose barrier has not come yet is remembered, so the barrier is
	// answered with a cancellation marker instead of a snapshot.
	if !tk.aborted[5] || !tk.aborted[6] {
		t.Errorf("aborted IDs %v, want 5 and 6 remembered", tk.aborted)
	}
}
