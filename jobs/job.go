package jobs

import (
	"context"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// A job's owner and its result, as the door asks for them.

// JobOwner is the auth key of who started j ("slack:U024BE7LH"): its
// platform user, or the creator of the schedule that ran it (scheduled jobs
// record the key, on the platform of the room they report to). It is how a
// job's user is shown, in the log and in replies.
func JobOwner(j store.Job) string {
	if j.ScheduleID != 0 || j.Platform == "" {
		return j.User
	}
	return j.Platform + ":" + j.User
}

// Result waits until job id ends when it runs in this process and returns
// its result; ok is false for a job this engine does not run.
func (e *Engine) Result(ctx context.Context, id int64) (res *ops.Result, ok bool, err error) {
	e.mu.Lock()
	r, ok := e.jobs[id]
	e.mu.Unlock()
	if !ok {
		return nil, false, nil
	}
	select {
	case <-r.done:
		return r.res, true, nil
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
}
