package ops

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/opsbot/opsbot/ops/unit"
)

// A change to a replicated service runs as a rollout (Runbook.Rollout):
//
//  1. the plan (RolloutPlanOf): the canary, the first replica as configured;
//     then the others in waves of at most rollout.max_unavailable;
//  2. the canary is changed by its own pipeline (mtp steps, mtp off,
//     engine set; without their benchmark): drained out of the router,
//     stopped, written, started, verified, back in the router after a
//     warm-up request (drain.go);
//  3. the gate (gate.go): the canary and an unchanged sibling are
//     benchmarked in the same window, in interleaved rounds (canary,
//     sibling, canary, sibling) straight to each replica's URL at the same
//     load, and judged by rollout.gate (min_tok_s_ratio on output tok/s,
//     max_ttft_p95_ratio on TTFT p95); a figure not measured fails the
//     gate, saying why;
//  4. the waves follow, each replica changed and verified by its pipeline;
//  5. any failure (a replica's pipeline, the gate) rolls every changed
//     replica back: drained, the previous unit text and the files beside
//     it put back byte-exactly (putBack, as mtp undo does), started,
//     verified, back in the router; the error says what failed and by how
//     much.
//
// The result records each replica's change (Result.Rollout), so that `mtp
// undo GROUP` puts back every replica the rollout changed, as a rollout
// itself (without a gate: it returns to what ran before). Every replica's
// change holds that replica's service key (service:GROUP@NAME) through
// Config.NodeLocks while it runs, and the gate holds the sibling's, so no
// other job changes them meanwhile.
//
// While it runs, a rollout records its progress (its Result so far, with
// each replica's UnitChange: the previous unit text) in the store for its
// job through JobHold.Checkpoint, before each unit write, after each wave
// and after each replica it puts back, and goes on only once it is stored.
// When the process running it dies (a crash, a takeover of its leases), the
// process that records the job interrupted rolls the rollout back: it
// starts `mtp undo GROUP` through the door, which finds the interrupted
// rollout's record as the change to undo (lastUndoable) and puts every
// replica it changed back on its previous unit. It rolls back rather than
// resumes because the gate's judgement and the waves' verification did not
// finish: the only state known good is the previous units, and resuming
// would roll out a change nobody saw pass. A replica recorded while its
// unit was being written (ReplicaChange.Writing) may hold either text: one
// that holds the previous text already is started again on it, so that it
// serves and is back in the router.

// Change is what a rollout does to each replica: the speculative steps
// (mtp steps N; mtp off is steps 0), or one engine flag (engine set FLAG
// VALUE).
type Change struct {
	Steps int    `json:"steps"`
	Flag  string `json:"flag,omitempty"`
	Value string `json:"value,omitempty"`
	// undo, when set, makes the change mtp undo of that rollout job.
	undo *AppliedChange
	// interrupted: the rollout undone was interrupted (or an undo of it
	// was), so a replica it records may hold its previous text already.
	interrupted bool
}

// StepsChange is mtp steps n on every replica (0: mtp off).
func StepsChange(n int) Change { return Change{Steps: n} }

// FlagChange is engine set flag value on every replica.
func FlagChange(flag, value string) Change { return Change{Flag: flag, Value: value} }

// String names the change as the command that makes it on one service.
func (c Change) String() string {
	switch {
	case c.undo != nil:
		return "mtp undo of " + c.undo.label()
	case c.Flag != "":
		return "engine set " + c.Flag + " " + c.Value
	case c.Steps == 0:
		return "mtp off"
	}
	return fmt.Sprintf("mtp steps %d", c.Steps)
}

// gated reports whether the change is judged by the gate: an undo is not
// (it puts back what ran before).
func (c Change) gated() bool { return c.undo == nil }

// RolloutResult is a rollout's record in its Result (JSON "rollout").
type RolloutResult struct {
	Group  string      `json:"group"`
	Change string      `json:"change"`
	Plan   RolloutPlan `json:"plan"`
	// Gate is the canary's comparison with its sibling; nil when the
	// rollout did not reach it (or is an undo).
	Gate *GateResult `json:"gate,omitempty"`
	// Replicas are the replicas the rollout acted on, in the order it did.
	Replicas []ReplicaChange `json:"replicas"`
	// RolledBack: the rollout failed and put the changed replicas back.
	RolledBack bool `json:"rolled_back,omitempty"`
	// Undoes is the job whose rollout this one undoes (mtp undo of a
	// group); 0 for a change.
	Undoes int64 `json:"undoes,omitempty"`
}

// ReplicaChange is what a rollout did to one replica.
type ReplicaChange struct {
	Service string `json:"service"`
	// Unit is the change its pipeline wrote (nil: none, the replica ran the
	// setting already).
	Unit *UnitChange `json:"unit,omitempty"`
	// RolledBack: the change was put back (by the replica's own pipeline
	// when the new unit did not serve, or by the rollout's rollback).
	RolledBack bool         `json:"rolled_back,omitempty"`
	Left       *ServiceLeft `json:"left,omitempty"`
	Error      string       `json:"error,omitempty"`
	// Writing: recorded before the unit was written and not since (the
	// rollout was interrupted in the replica's pipeline); the unit holds
	// Unit.Before or Unit.After.
	Writing bool `json:"writing,omitempty"`
	// Move is what the change does to the replica ("steps 3 -> 10").
	Move string `json:"move,omitempty"`
}

// LeftChanged are the replicas rr records changed (or being written) and
// not put back: what an undo of the rollout puts back.
func (rr *RolloutResult) LeftChanged() []ReplicaChange {
	if rr == nil {
		return nil
	}
	var out []ReplicaChange
	for _, c := range rr.Replicas {
		if c.Unit.Changed() && !c.RolledBack {
			out = append(out, c)
		}
	}
	return out
}

// Changed reports whether the rollout left a change in place on some
// replica: what `mtp undo` of the group puts back.
func (rr *RolloutResult) Changed() bool { return len(rr.LeftChanged()) > 0 }

// RolloutPlan is the order a rollout changes a group's replicas in, and
// the gate it judges the canary by; its Text is the confirmation's.
type RolloutPlan struct {
	Group   string     `json:"group"`
	Change  string     `json:"change"`
	Canary  string     `json:"canary"`
	Sibling string     `json:"sibling,omitempty"` // the unchanged replica the canary is compared with
	Waves   [][]string `json:"waves"`             // after the canary
	Gate    *Gate      `json:"gate,omitempty"`    // nil: not gated (an undo)
	// MaxUnavailable is the most replicas out of the router at once.
	MaxUnavailable int `json:"max_unavailable"`
	// Router is the group's router URL; "" when it has none (each replica
	// then takes traffic while it restarts).
	Router string `json:"router,omitempty"`
}

// Gate is the canary's thresholds against its sibling.
type Gate struct {
	MinTokSRatio    float64 `json:"min_tok_s_ratio"`
	MaxTTFTP95Ratio float64 `json:"max_ttft_p95_ratio"`
}

// IsGroup reports whether name is a replicated service (config
// services.NAME.replicas): its changes run as a rollout.
func (r *Runbook) IsGroup(name string) bool { return IsGroup(r.cfg.Services, name) }

// IsGroup reports whether services configures replicas of group.
func IsGroup(services map[string]ServiceConfig, group string) bool {
	for _, s := range services {
		if s.Replica != nil && s.Replica.Group == group {
			return true
		}
	}
	return false
}

// RolloutPlanOf is the plan of a rollout of change c over group's replicas
// as services configures them, under cfg (its zero fields take
// DefaultRollout's): what the confirmation shows. It fails for a name that
// has no replicas.
func RolloutPlanOf(services map[string]ServiceConfig, cfg RolloutConfig, group string, c Change) (RolloutPlan, error) {
	var names []string
	var rc *RouterConfig
	for name, s := range services {
		if s.Replica != nil && s.Replica.Group == group {
			names = append(names, name)
			if s.Replica.Router != nil {
				rc = s.Replica.Router
			}
		}
	}
	if len(names) == 0 {
		return RolloutPlan{}, fmt.Errorf("%s has no replicas (services.%s.replicas): it is changed as one service", group, group)
	}
	// As configured; by name where two claim one place (a caller that
	// does not know the order).
	sort.Slice(names, func(i, j int) bool {
		a, b := services[names[i]].Replica.Index, services[names[j]].Replica.Index
		return a < b || a == b && names[i] < names[j]
	})
	cc := Config{Rollout: cfg}
	cfg = cc.withDefaults().Rollout
	return planOver(group, names, rc, cfg, c), nil
}

func planOver(group string, names []string, rc *RouterConfig, cfg RolloutConfig, c Change) RolloutPlan {
	p := RolloutPlan{Group: group, Change: c.String(), Canary: names[0], MaxUnavailable: cfg.MaxUnavailable}
	if rc != nil {
		p.Router = rc.URL
	}
	if c.gated() {
		p.Gate = &Gate{MinTokSRatio: cfg.MinTokSRatio, MaxTTFTP95Ratio: cfg.MaxTTFTP95Ratio}
		if len(names) > 1 {
			p.Sibling = names[1]
		}
	}
	rest := names[1:]
	for len(rest) > 0 {
		n := min(cfg.MaxUnavailable, len(rest))
		p.Waves = append(p.Waves, rest[:n])
		rest = rest[n:]
	}
	return p
}

// Text is the plan for a person: the canary, the gate, the waves.
func (p RolloutPlan) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s over %d replicas of %s, at most %d out of the router at once:\n", p.Change, 1+len(flat(p.Waves)), p.Group, p.MaxUnavailable)
	fmt.Fprintf(&b, "  1. canary %s: drained, changed, verified, back in the router", p.Canary)
	switch {
	case p.Gate == nil:
		b.WriteString(" (no gate: an undo puts back what ran before)")
	case p.Sibling == "":
		b.WriteString("; no unchanged sibling to compare it with: the gate cannot pass, and the canary is rolled back")
	default:
		fmt.Fprintf(&b, "; benchmarked against %s in interleaved rounds; gate: output tok/s at least %gx and TTFT p95 at most %gx the sibling's",
			p.Sibling, p.Gate.MinTokSRatio, p.Gate.MaxTTFTP95Ratio)
	}
	for i, w := range p.Waves {
		fmt.Fprintf(&b, "\n  %d. %s", i+2, strings.Join(w, ", "))
	}
	b.WriteString("\n  any failure puts every changed replica back on its previous unit")
	if p.Router == "" {
		b.WriteString("\n  no router: each replica takes traffic while it restarts (requests sent to it then fail)")
	}
	return b.String()
}

func flat(ws [][]string) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w...)
	}
	return out
}

// RolloutPlan is the plan Rollout follows for change c over group.
func (r *Runbook) RolloutPlan(group string, c Change) (RolloutPlan, error) {
	return RolloutPlanOf(r.cfg.Services, r.cfg.Rollout, group, c)
}

// Rollout is a change of a replicated service (group): the canary, the
// gate, the waves, and on any failure the rollback of every changed
// replica (see the comment at the top of this file). With dryRun it
// changes nothing: it shows the plan and what each replica's pipeline
// would do. The error of a failed rollout says what failed (the replica
// and its pipeline's error, or the gate and by how much) and that the
// changed replicas were put back, or which could not be.
func (r *Runbook) Rollout(ctx context.Context, group string, c Change, dryRun bool, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	ts := r.replicasOf(group)
	if len(ts) == 0 {
		if _, err := r.cfg.service(group); err == nil {
			return nil, fmt.Errorf("%s has no replicas: `%s %s` changes it as one service", group, c, group)
		}
		return nil, fmt.Errorf("%w %q: no service or replicated service has that name", ErrUnknownService, group)
	}
	if c.Flag != "" {
		if _, ok := unit.LookupFlag(c.Flag); !ok {
			return nil, fmt.Errorf("%s is not an engine flag opsbot sets (`help engine set` lists them); nothing was changed", c.Flag)
		}
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.name
	}
	if c.undo != nil {
		ts, names = changedBy(ts, c.undo.Rollout)
		if len(ts) == 0 {
			return res, &NothingToUndoError{Service: group}
		}
	}
	plan := planOver(group, names, routerOf(ts[0].cfg), r.cfg.Rollout, c)
	ro := &RolloutResult{Group: group, Change: c.String(), Plan: plan, Replicas: []ReplicaChange{}}
	if c.undo != nil {
		ro.Undoes = c.undo.JobID
	}
	res.Rollout = ro
	st := begin(rep, "plan", "%s over %s", c, group)
	rb := *r
	if plan.Router == "" {
		st.warn("%s has no router (services.%s.router): each replica takes traffic while it restarts, and requests sent to it meanwhile fail", group, group)
		rb.quietNoRouter = true
	}
	st.done("%s", plan.Text())
	byName := map[string]*target{}
	for _, t := range ts {
		byName[t.name] = t
	}
	prog := &progress{save: r.hold.Checkpoint, res: res}
	if !dryRun {
		rb.beforeWrite = prog.writing
		rb.prog = prog
	}
	if dryRun {
		for _, t := range ts {
			sub, err := rb.changeOne(ctx, t, c, true, prefixed(rep, t.name+": "))
			if err != nil {
				return res, fmt.Errorf("dry run: %s: %w; nothing was changed", t.name, err)
			}
			res.Details = append(res.Details, t.name+": "+sub.Summary)
			res.Details = append(res.Details, sub.Details...)
		}
		res.Details = append([]string{plan.Text()}, res.Details...)
		res.Summary = fmt.Sprintf("dry run: %s over %d replicas of %s, nothing changed", c, len(ts), group)
		return res, nil
	}

	// The canary.
	canary := byName[plan.Canary]
	if err := rb.changeWave(ctx, []*target{canary}, c, ro, res, rep); err != nil {
		return res, rb.rollBack(ctx, group, ro, res, rep, fmt.Errorf("canary %s: %w", canary.name, err))
	}
	if c.gated() {
		g, err := rb.gate(ctx, canary, byName[plan.Sibling], rep)
		ro.Gate = g
		if err == nil && !g.Pass {
			err = fmt.Errorf("canary %s failed the gate: %s", canary.name, strings.Join(g.Failed, "; "))
		}
		if err != nil {
			return res, rb.rollBack(ctx, group, ro, res, rep, err)
		}
	}
	for i, w := range plan.Waves {
		wave := make([]*target, len(w))
		for j, n := range w {
			wave[j] = byName[n]
		}
		if err := rb.changeWave(ctx, wave, c, ro, res, rep); err != nil {
			return res, rb.rollBack(ctx, group, ro, res, rep, fmt.Errorf("wave %d (%s): %w", i+1, strings.Join(w, ", "), err))
		}
	}
	res.Summary = fmt.Sprintf("%s rolled out to %d replicas of %s", c, len(ts), group)
	if g := ro.Gate; g != nil {
		res.Summary += fmt.Sprintf(" (canary %s: %s)", canary.name, g.Line())
	}
	return res, nil
}

// changedBy are the replicas of ts the rollout recorded in rr changed and
// left changed. Those recorded while their unit was being written, or left
// out of the router, come first: an interrupted pipeline may have left them
// out of the router, and
// the others can leave it only once they are back (max_unavailable).
func changedBy(ts []*target, rr *RolloutResult) ([]*target, []string) {
	if rr == nil {
		return nil, nil
	}
	var out []*target
	var names []string
	for _, writing := range []bool{true, false} {
		for _, t := range ts {
			for _, c := range rr.Replicas {
				away := c.Writing || (c.Left != nil && c.Left.OutOfRouter)
				if c.Service == t.name && c.Unit.Changed() && !c.RolledBack && away == writing {
					out, names = append(out, t), append(names, t.name)
					break
				}
			}
		}
	}
	return out, names
}

// changeOne runs c's pipeline on t (without its benchmark).
func (r *Runbook) changeOne(ctx context.Context, t *target, c Change, dryRun bool, rep Reporter) (*Result, error) {
	switch {
	case c.undo != nil:
		for _, rc := range c.undo.Rollout.Replicas {
			if rc.Service == t.name && rc.Unit != nil {
				undo := AppliedChange{JobID: c.undo.JobID, Command: c.undo.Command, Status: c.undo.Status, Unit: *rc.Unit}
				if c.interrupted {
					// The replica may hold its previous text already (its
					// write had not happened, or a rollback had put it
					// back): it is then started again on that text.
					d, err := r.readUnit(ctx, t)
					if err != nil {
						return nil, err
					}
					if cur, ok := d.files[rc.Unit.Path]; ok && cur == rc.Unit.Before && cur != rc.Unit.After {
						undo.Unit = UnitChange{Path: rc.Unit.Path, Before: cur, After: cur}
					}
				}
				return r.putBack(ctx, t, undo, nil, dryRun, false, &Result{Incidents: []string{}}, rep)
			}
		}
		return nil, fmt.Errorf("%s records no change of %s", c.undo.label(), t.name)
	case c.Flag != "":
		return r.engineSet(ctx, t.name, c.Flag, c.Value, dryRun, false, rep)
	}
	return r.mtpSet(ctx, t.name, Setting{Steps: c.Steps}, dryRun, false, rep)
}

// changeWave changes the replicas of wave at once, each holding its
// service key, and records each in ro. It returns the first failure
// (naming the replica) after every replica of the wave ended.
func (r *Runbook) changeWave(ctx context.Context, wave []*target, c Change, ro *RolloutResult, res *Result, rep Reporter) error {
	subs := make([]*Result, len(wave))
	errs := make([]error, len(wave))
	var wg sync.WaitGroup
	for i, t := range wave {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prep := prefixed(rep, t.name+": ")
			release, err := r.holdService(ctx, t, prep)
			if err != nil {
				errs[i] = err
				return
			}
			defer release()
			subs[i], errs[i] = r.changeOne(ctx, t, c, false, prep)
		}()
	}
	wg.Wait()
	var first error
	for i, t := range wave {
		// The entry recorded before its unit was written, if any (writing).
		at := -1
		rc := ReplicaChange{Service: t.name}
		for k := range ro.Replicas {
			if ro.Replicas[k].Service == t.name {
				at, rc = k, ro.Replicas[k]
				break
			}
		}
		if sub := subs[i]; sub != nil {
			rc.Writing = false
			rc.Unit = nil
			// Only a unit written counts (the result plans it before).
			if sub.Unit.Changed() && sub.did.unit != "" {
				u := *sub.Unit
				rc.Unit = &u
			}
			rc.Left = sub.Left
			rc.RolledBack = sub.Left != nil && sub.Left.RolledBack
			for _, inc := range sub.Incidents {
				res.AddIncident(inc)
			}
		}
		if errs[i] != nil {
			rc.Error = errs[i].Error()
			if first == nil {
				first = fmt.Errorf("%s: %w", t.name, errs[i])
			}
		}
		if at >= 0 {
			ro.Replicas[at] = rc
		} else {
			ro.Replicas = append(ro.Replicas, rc)
		}
	}
	if err := r.checkpoint(ctx); err != nil && first == nil {
		first = err
	}
	return first
}

// progress is a rollout's record while it runs, and where it is saved
// (JobHold.Checkpoint; nil: nowhere, outside a job).
type progress struct {
	mu   sync.Mutex
	save func(context.Context, *Result) error
	res  *Result
}

// writing records that t's unit is about to be written with p, unless the
// rollout records t already (a rollback puts it back: its entry stays as
// it is until the put-back is done), and saves the record.
func (g *progress) writing(ctx context.Context, t *target, p *planned) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	ro := g.res.Rollout
	for _, rc := range ro.Replicas {
		if rc.Service == t.name {
			return nil
		}
	}
	u := &UnitChange{Path: p.path, Before: p.before, After: p.after, Files: p.files}
	if p.edit != nil {
		u.ArgvBefore, u.ArgvAfter = p.edit.ArgvBefore, p.edit.ArgvAfter
	}
	ro.Replicas = append(ro.Replicas, ReplicaChange{Service: t.name, Unit: u, Writing: true, Move: p.move()})
	return g.saveLocked(ctx)
}

func (g *progress) saveLocked(ctx context.Context) error {
	if g.save == nil {
		return nil
	}
	if err := g.save(context.WithoutCancel(ctx), g.res); err != nil {
		return fmt.Errorf("could not record the rollout's progress in opsbot's store (%w), so it goes no further", err)
	}
	return nil
}

// checkpoint saves the rollout's record as it is now (nil outside a
// rollout or a job).
func (r *Runbook) checkpoint(ctx context.Context) error {
	if r.prog == nil {
		return nil
	}
	r.prog.mu.Lock()
	defer r.prog.mu.Unlock()
	return r.prog.saveLocked(ctx)
}

// holdService holds t's service key (service:NAME, the job runtime's) for
// r's job through Config.NodeLocks, saying who it waits for when another
// job holds it, and returns its release.
func (r *Runbook) holdService(ctx context.Context, t *target, rep Reporter) (func(), error) {
	return r.holdKey(ctx, "service:"+t.name, rep, "wait for service",
		fmt.Sprintf("waiting for %s: %%s holds it", t.name), "hold "+t.name, t.name+" is ours")
}

// rollBack puts back every replica ro records as changed and not rolled
// back, in waves of at most max_unavailable, and returns cause saying what
// it left: every replica on its previous unit, or which could not be.
func (r *Runbook) rollBack(ctx context.Context, group string, ro *RolloutResult, res *Result, rep Reporter, cause error) error {
	res.AddIncident(IncidentRolledBack)
	ro.RolledBack = true
	var todo []int
	for i, rc := range ro.Replicas {
		if rc.Unit.Changed() && !rc.RolledBack {
			todo = append(todo, i)
		}
	}
	if ctx.Err() != nil {
		// The job ended (cancel, timeout, shutdown): nothing more is begun.
		return fmt.Errorf("%w; the rollout stopped with %d replicas changed: %s (`mtp undo %s` puts them back)", cause, len(todo), namesAt(ro, todo), group)
	}
	st := begin(rep, "roll back", "putting back %d changed replicas of %s", len(todo), group)
	var failed []string
	wave := max(r.cfg.Rollout.MaxUnavailable, 1)
	for len(todo) > 0 {
		n := min(wave, len(todo))
		var wg sync.WaitGroup
		errs := make([]error, n)
		for k, i := range todo[:n] {
			rc := &ro.Replicas[i]
			t, err := r.target(rc.Service)
			if err != nil {
				errs[k] = err
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				prep := prefixed(rep, rc.Service+" rollback: ")
				release, err := r.holdService(ctx, t, prep)
				if err != nil {
					errs[k] = err
					return
				}
				defer release()
				undo := AppliedChange{JobID: r.hold.JobID, Command: ro.Change + " " + group, Status: "succeeded", Unit: *rc.Unit}
				sub, err := r.putBack(ctx, t, undo, nil, false, false, &Result{Incidents: []string{}}, prep)
				if sub != nil && sub.Left != nil {
					rc.Left = sub.Left
				}
				errs[k] = err
			}()
		}
		wg.Wait()
		for k, i := range todo[:n] {
			if errs[k] != nil {
				failed = append(failed, fmt.Sprintf("%s (%v)", ro.Replicas[i].Service, errs[k]))
				continue
			}
			ro.Replicas[i].RolledBack = true
			ro.Replicas[i].Writing = false
		}
		todo = todo[n:]
		if err := r.checkpoint(ctx); err != nil {
			// The host is what matters now: the rollback goes on, and the
			// next checkpoint tries again.
			st.warn("%v", err)
		}
	}
	if len(failed) > 0 {
		res.AddIncident(IncidentRestoreFailed)
		err := fmt.Errorf("%w; rolling back, %d replicas could not be put back: %s", cause, len(failed), strings.Join(failed, "; "))
		return st.fail(err)
	}
	st.done("every changed replica is back on its previous unit and in the router")
	next := ""
	if ro.Gate != nil && !ro.Gate.Pass && len(ro.Replicas) > 0 {
		// The one thing that helps next: see the change on one replica,
		// outside the gate, or loosen the gate that refused it.
		next = fmt.Sprintf(". To see it on one replica: `%s %s`; the gate is rollout.gate", ro.Change, ro.Replicas[0].Service)
	}
	return fmt.Errorf("%w; every changed replica was put back on its previous unit and %s serves as before%s", cause, group, next)
}

func namesAt(ro *RolloutResult, idx []int) string {
	var out []string
	for _, i := range idx {
		out = append(out, ro.Replicas[i].Service)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// rolloutUndo is mtp undo of a group: the newest rollout of group that
// succeeded (changes: the group's jobs, newest first), put back on every
// replica it changed, as a rollout.
func (r *Runbook) rolloutUndo(ctx context.Context, group string, changes []AppliedChange, dryRun bool, rep Reporter) (*Result, error) {
	last := lastUndoable(changes)
	if last < 0 {
		return &Result{Incidents: []string{}}, &NothingToUndoError{Service: group}
	}
	undo := changes[last]
	if undo.Rollout == nil {
		return &Result{Incidents: []string{}}, errors.New(undo.label() + " is no rollout of " + group + ": nothing was changed")
	}
	c := Change{undo: &undo, interrupted: undo.Status != "succeeded"}
	if c.interrupted && undo.Rollout.Undoes != 0 {
		// An interrupted undo: what it was putting back is put back still
		// (undoing it would roll out again the change it undid).
		for i := range changes {
			if changes[i].JobID == undo.Rollout.Undoes && changes[i].Rollout != nil {
				target := changes[i]
				c.undo = &target
				return r.Rollout(ctx, group, c, dryRun, rep)
			}
		}
		return &Result{Incidents: []string{}}, fmt.Errorf("%s was interrupted putting back job #%d, whose record is not in the last %d changes of %s: nothing was changed; `job %d` shows what it changed",
			undo.label(), undo.Rollout.Undoes, undoLookback, group, undo.Rollout.Undoes)
	}
	return r.Rollout(ctx, group, c, dryRun, rep)
}
