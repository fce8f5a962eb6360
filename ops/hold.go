package ops

import (
	"context"

	"github.com/opsbot/opsbot/ops/remote"
)

// JobHold is what a job's pipeline runs under, as the job runtime gives it
// to the Runbook (For): the job, the epoch of its service's lease, whether
// this process still holds the job's leases, and whether the job is asked
// to wind down. The zero JobHold is no job: the node locks are held for no
// job, nothing is checked and no wind-down is asked (the watchdog's reads,
// the command line, tests).
type JobHold struct {
	// JobID is the job the pipeline runs for (0: none): the node locks it
	// takes are held for this job.
	JobID int64
	// Epoch is the epoch of the job's service lease, its fencing token (0:
	// the job holds no service, or holds it within this process only).
	Epoch int64
	// Held, when set, returns nil while this process still holds the job's
	// leases, else why not (wrapping remote.ErrHoldLost). A Runbook bound to
	// the hold calls it right before it sends each host command and each
	// file write: a failed check sends nothing, so a process resumed after a
	// pause cannot run its next systemctl before it notices it lost its
	// lease.
	Held func() error
	// WindDown, when set, returns why the job is asked to wind down (the
	// reason: opsbot's store refuses writes), or nil. A pipeline asks it at
	// its step boundaries. Unlike a cancel, which stops at the next step
	// boundary whatever state that leaves, winding down begins no new change
	// and leaves the service serving: a service stopped with its unit
	// unchanged is started again; a unit already written is started and
	// verified; the benchmark is skipped. The pipeline then fails naming the
	// reason and the state it left (Result.Left).
	WindDown func() error
	// Checkpoint, when set, records progress, the job's result so far,
	// durably in the store for the job (the jobs runtime keeps it as the
	// job's result until the job ends), and returns nil only once it is
	// stored. A rollout calls it each time a replica's unit is about to be
	// written, after each wave and after each replica it puts back, and
	// goes on only when it returned nil: so that the process that takes
	// over an interrupted rollout knows which replicas were changed and
	// their previous units (rollout.go). A job no longer running for this
	// process (taken over) gets an error.
	Checkpoint func(ctx context.Context, progress *Result) error
}

var _ remote.Hold = JobHold{}

// Check returns nil while the job may still change hosts: Held passes, or
// there is none.
func (h JobHold) Check() error {
	if h.Held == nil {
		return nil
	}
	return h.Held()
}

// WindDownAsked returns why the job is asked to wind down, or nil.
func (h JobHold) WindDownAsked() error {
	if h.WindDown == nil {
		return nil
	}
	return h.WindDown()
}

// For returns r bound to hold, the hold of the job whose pipeline it runs: a
// copy of r sharing its SSH connections and engine clients, whose every host
// command and file write is sent only while hold.Check passes (else the
// error wraps remote.ErrHoldLost and nothing is sent), whose node locks are
// held for hold.JobID, and whose pipelines wind down when hold asks. r is
// unchanged. Close only r, not the copy.
func (r *Runbook) For(hold JobHold) *Runbook {
	b := *r
	b.hold = hold
	b.bound = &boundTargets{m: map[string]*target{}}
	return &b
}

// windDown returns why r's job is asked to wind down, or nil.
func (r *Runbook) windDown() error { return r.hold.WindDownAsked() }
