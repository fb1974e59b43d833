package worker

import "context"

// LastCompletedCheckpoint is the newest checkpoint completion that the running task with
// execution key key took, read on the task's goroutine; false when no such task runs.
func (tm *TaskManager) LastCompletedCheckpoint(ctx context.Context, key string) (int64, bool) {
	tm.mu.Lock()
	t := tm.tasks[key]
	tm.mu.Unlock()
	if t == nil {
		return 0, false
	}
	got := make(chan int64, 1)
	if err := t.post(ctx, func() error { got <- t.lastCompleted; return nil }); err != nil {
		return 0, false
	}
	select {
	case id := <-got:
		return id, true
	case <-ctx.Done():
		return 0, false
	}
}
