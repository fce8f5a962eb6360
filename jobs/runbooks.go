package jobs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/remote"
)

// Runbooks is the Backend jobs run on: the runbook of the config in effect.
// A reload swaps in a new one; jobs already running keep the one they
// started with, and a replaced runbook is closed (its SSH connections and
// engine clients) as soon as the last of those jobs ends. Close closes
// whatever is left. The zero value has no runbook: jobs fail saying no
// hosts are configured. Safe for concurrent use.
type Runbooks struct {
	cur atomic.Pointer[ops.Runbook]

	mu      sync.Mutex
	running map[*ops.Runbook]int // jobs running on each runbook not closed yet
	retired map[*ops.Runbook]bool
}

var _ Backend = (*Runbooks)(nil)

// Run runs cmd on the runbook in effect, bound to hold.
func (r *Runbooks) Run(ctx context.Context, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	rb := r.take()
	if rb == nil {
		return nil, errors.New("no hosts are configured: add hosts and services to the config (or run with --lab)")
	}
	defer r.done(rb)
	return runOn(ctx, rb, hold, cmd, rep)
}

// take returns the runbook in effect, counted as used by one more job.
func (r *Runbooks) take() *ops.Runbook {
	r.mu.Lock()
	defer r.mu.Unlock()
	rb := r.cur.Load()
	if rb != nil {
		r.running[rb]++
	}
	return rb
}

// done ends a job's use of rb, closing rb when it was replaced and this was
// its last job.
func (r *Runbooks) done(rb *ops.Runbook) {
	r.mu.Lock()
	if r.running == nil { // Close closed it
		r.mu.Unlock()
		return
	}
	r.running[rb]--
	last := r.running[rb] == 0 && r.retired[rb]
	if last {
		delete(r.running, rb)
		delete(r.retired, rb)
	}
	r.mu.Unlock()
	if last {
		rb.Close()
	}
}

// Set makes rb the runbook of the jobs that start from now on; the one it
// replaces is closed at once when no job uses it, else when the last does.
func (r *Runbooks) Set(rb *ops.Runbook) {
	r.mu.Lock()
	if r.running == nil {
		r.running, r.retired = map[*ops.Runbook]int{}, map[*ops.Runbook]bool{}
	}
	if _, ok := r.running[rb]; !ok {
		r.running[rb] = 0 // open, no job yet
	}
	old := r.cur.Swap(rb)
	idle := old != nil && r.running[old] == 0
	if idle {
		delete(r.running, old)
	} else if old != nil {
		r.retired[old] = true
	}
	r.mu.Unlock()
	if idle {
		old.Close()
	}
}

// Open is how many runbooks are not closed yet: the one in effect and those
// replaced ones jobs still run on.
func (r *Runbooks) Open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}

// SSHStats is the SSH state of the runbook in effect.
func (r *Runbooks) SSHStats() []remote.HostState {
	if rb := r.cur.Load(); rb != nil {
		return rb.SSHStats()
	}
	return nil
}

// Close closes every runbook.
func (r *Runbooks) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for rb := range r.running {
		rb.Close()
	}
	r.running, r.retired = nil, nil
	r.cur.Store(nil)
}

// Reloader is what takes a new config for later requests (the App's
// Reload): roles, services, hosts and rooms.
type Reloader interface {
	Reload(cfg *config.Config) error
}

// Reload is the reload policy (SIGHUP): cfg's ops layer, built by build
// (skipped when cfg has no hosts), runs the jobs that start from now on,
// while running jobs keep theirs; cfg's roles, services, hosts and rooms
// apply to later requests. An error changes nothing. What only a restart
// changes is listed by RestartOnly, for the caller to say so.
func (r *Runbooks) Reload(app Reloader, cfg *config.Config, build func(*config.Config) (*ops.Runbook, error)) error {
	var rb *ops.Runbook
	if len(cfg.Hosts) > 0 {
		var err error
		if rb, err = build(cfg); err != nil {
			return err
		}
	}
	if err := app.Reload(cfg); err != nil {
		if rb != nil {
			rb.Close()
		}
		return err
	}
	if rb != nil {
		r.Set(rb)
	}
	return nil
}

// RunbookBackend returns the Backend that runs every job on rb: for a
// runbook that is never swapped (tests, tools); serve uses Runbooks.
func RunbookBackend(rb *ops.Runbook) Backend { return fixedRunbook{rb} }

type fixedRunbook struct{ rb *ops.Runbook }

func (f fixedRunbook) Run(ctx context.Context, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	return runOn(ctx, f.rb, hold, cmd, rep)
}

// runOn runs cmd's pipeline on rb bound to the job's hold (ops.Runbook.For;
// the zero JobHold outside a job).
func runOn(ctx context.Context, rb *ops.Runbook, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	if rep == nil {
		rep = ops.Discard
	}
	return cmd.Run(ctx, rb.For(hold), rep)
}
