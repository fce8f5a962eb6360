package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

var _ Inbound = (*App)(nil)

// Handle is the Dispatcher's Handle.
func (a *App) Handle(ctx context.Context, req Request) Reply { return a.Dispatcher.Handle(ctx, req) }

// Act is the Dispatcher's Act.
func (a *App) Act(ctx context.Context, act ActionRequest) Reply { return a.Dispatcher.Act(ctx, act) }

// Previewed is the Dispatcher's Previewed.
func (a *App) Previewed(ctx context.Context, token, messageID string) error {
	return a.Dispatcher.Previewed(ctx, token, messageID)
}

// Check parses text as Handle would, without acting: nil, or the usage
// error Handle would answer.
// `approve TOKEN` and `reject TOKEN` check: they answer a request for
// approval, which Handle looks up.
func (a *App) Check(text string) error {
	if _, _, ok := approvalWord(strings.TrimSpace(text)); ok && len(text) <= MaxInputLen {
		return nil
	}
	_, err := a.Dispatcher.Parse(text)
	return err
}

// NeedsHosts reports whether text parses to a command that runs on the
// service's hosts (commands.Policy.Hosts): false for what the door answers
// from the store (jobs, history, help, schedules) and for what does not parse.
func (a *App) NeedsHosts(text string) bool {
	c, err := a.Dispatcher.Parse(text)
	return err == nil && c.Spec().Hosts
}

// Result is a pipeline's result as a job carries it (ops.Result), for the
// adapters, which import bot only.
type Result = ops.Result

// Event is one step event of a job (ops.Event; its JSON is the terminal's
// --json events), for the adapters, which import bot only.
type Event = ops.Event

// MaxInputLen is the longest command text the door takes.
const MaxInputLen = commands.MaxInputLen

// Active returns the ids of jobs queued or running in this process.
func (a *App) Active() []int64 { return a.Engine.Active() }

// JobOutcome is how a job ended (or, in an answer about jobs, where it
// stands), as Go values.
type JobOutcome struct {
	ID      int64
	Command string
	Status  store.Status
	Error   string // why it failed, was refused or cancelled; "" when it succeeded
	Events  []ops.Event
	Result  *ops.Result // nil when the pipeline returned none
	// Created, Started and Ended are when the job was asked for, began and
	// ended; zero when it has not (yet).
	Created, Started, Ended time.Time
	// Unrecorded, when set, says why the store has not taken the job's end
	// yet (it refuses writes): the outcome is then as this process saw the
	// job end on its host, and AwaitRecord waits until the store has it.
	Unrecorded error
}

// jobOutcome is j as a JobOutcome, without its events and result.
func jobOutcome(j store.Job) JobOutcome {
	return JobOutcome{ID: j.ID, Command: j.Command, Status: j.Status, Error: j.Error,
		Created: j.CreatedAt, Started: j.StartedAt, Ended: j.EndedAt}
}

// Succeeded reports whether the job succeeded.
func (o JobOutcome) Succeeded() bool { return o.Status == store.Succeeded }

// Wait blocks until job id has ended (or ctx ends) and returns its outcome:
// the final state, every event and the pipeline's result. A job another
// process runs is returned as it stands. A job of this process whose end
// the store has not taken yet is returned as it ended on its host, with
// Unrecorded set.
func (a *App) Wait(ctx context.Context, id int64) (JobOutcome, error) {
	res, ran, err := a.Engine.Result(ctx, id)
	if err != nil {
		return JobOutcome{ID: id}, fmt.Errorf("wait for job #%d: %w", id, err)
	}
	if u, ok := a.Engine.Unrecorded(id); ok {
		return unrecorded(u, res), nil
	}
	j, err := a.Store.Job(ctx, id)
	if err != nil {
		return JobOutcome{ID: id}, fmt.Errorf("read job #%d: %w", id, err)
	}
	o := jobOutcome(j)
	o.Result = res
	if !ran && len(j.Result) > 0 {
		// A job of an earlier process: its result as the store keeps it.
		var r ops.Result
		if err := json.Unmarshal(j.Result, &r); err != nil {
			return o, fmt.Errorf("read the result of job #%d: %w", id, err)
		}
		o.Result = &r
	}
	evs, err := a.Store.Events(ctx, id)
	if err != nil {
		return o, fmt.Errorf("read the events of job #%d: %w", id, err)
	}
	o.Events = opsEvents(evs)
	return o, nil
}

// unrecorded is the outcome of a job of this process whose end the store
// has not taken (u): as it ended on its host, with every event it reported.
func unrecorded(u jobs.Unrecorded, res *ops.Result) JobOutcome {
	o := jobOutcome(u.Job)
	o.Status, o.Error, o.Ended, o.Result = u.Ending.Status, u.Ending.Error, u.Ending.At, res
	o.Unrecorded = u.Refusal
	o.Events = opsEvents(u.Events)
	return o
}

// AwaitRecord waits until the store has taken everything job id made in
// this process (jobs.Engine.AwaitRecord): nil at once when nothing waits;
// ctx's error, or why opsbot stopped before the store took it.
func (a *App) AwaitRecord(ctx context.Context, id int64) error { return a.Engine.AwaitRecord(ctx, id) }

// opsEvents are a job's stored events as the pipeline reported them.
func opsEvents(evs []store.Event) []ops.Event {
	out := make([]ops.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, ops.Event{At: e.At, Step: e.Step, Status: ops.StepStatus(e.Status), Message: e.Message})
	}
	return out
}
