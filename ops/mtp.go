package ops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/unit"
)

// deployed is the unit as read from the host: the files and the effective
// engine command.
type deployed struct {
	mainPath string
	files    map[string]string // path -> text, main unit and drop-ins
	order    []string          // main first, then drop-ins in systemd's order
	eff      *unit.Effective
}

// readUnit reads the unit and its drop-ins over sftp and finds the engine command.
func (r *Runbook) readUnit(ctx context.Context, t *target) (*deployed, error) {
	s, err := t.unit.Show(ctx)
	if err != nil {
		return nil, err
	}
	if !s.Found() || s.FragmentPath == "" {
		return nil, fmt.Errorf("unit %s is not loaded on %s (LoadState=%s)", t.cfg.Unit, t.cfg.Host, s.LoadState)
	}
	d := &deployed{mainPath: s.FragmentPath, files: map[string]string{}}
	d.order = append([]string{s.FragmentPath}, sortedDropIns(s.DropInPaths)...)
	var units []*unit.Unit
	for _, p := range d.order {
		b, err := t.host.ReadFile(ctx, p)
		if err != nil {
			return nil, hostErr("read "+p, t.cfg.Host, err)
		}
		d.files[p] = string(b)
		u, err := unit.Parse(p, string(b))
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", p, err)
		}
		units = append(units, u)
	}
	if d.eff, err = unit.Merge(units[0], units[1:]...); err != nil {
		return nil, fmt.Errorf("read %s: %w", t.cfg.Unit, err)
	}
	return d, nil
}

// sortedDropIns orders drop-ins as systemd applies them: by file name.
func sortedDropIns(ps []string) []string {
	out := append([]string(nil), ps...)
	sort.SliceStable(out, func(i, j int) bool { return path.Base(out[i]) < path.Base(out[j]) })
	return out
}

// planned is a unit change ready to be written.
type planned struct {
	edit    *unit.Edit
	path    string // file written
	before  string // its text before ("" when it did not exist)
	after   string
	created bool // a new drop-in
	// files are written beside the unit: before it (new), after it (old).
	files []FileChange
	// was and now name the setting of each side when the change is not
	// one of the speculative steps (engine set: "--mem-fraction-static
	// 0.88"); "" names the steps.
	was, now string
}

// wasText names the setting the text before p runs ("steps 3").
func (p *planned) wasText() string {
	if p.was != "" {
		return p.was
	}
	return fmt.Sprintf("steps %d", p.edit.SpecBefore.DraftSteps())
}

// move is what p changes ("steps 3 -> 10").
func (p *planned) move() string {
	if p.was == "" && p.now == "" && p.edit != nil {
		return fmt.Sprintf("steps %d -> %d", p.edit.SpecBefore.DraftSteps(), p.edit.SpecAfter.DraftSteps())
	}
	if p.edit == nil && (p.was == "" || p.now == "") {
		return ""
	}
	return p.wasText() + " -> " + p.nowText()
}

// nowText names the setting the text after p runs.
func (p *planned) nowText() string {
	if p.now != "" {
		return p.now
	}
	return fmt.Sprintf("steps %d", p.edit.SpecAfter.DraftSteps())
}

// Setting is the speculative setting a change deploys: Steps, and for SGLang
// TopK and DraftTokens (0: TopK as the unit has it, DraftTokens as SGLang's
// rules make it: steps+1 with topk 1, else the unit's).
type Setting struct {
	Steps, TopK, DraftTokens int
	// perLoad, when set, makes the setting the engine's per-load form of these
	// rows (SGLang's adaptive config file beside the unit and the flags that
	// enable it; vLLM's per-batch table), Steps its starting or largest steps.
	perLoad *perLoadSet
	// adaptiveDefault makes the setting SGLang's own adaptive table
	// (--speculative-adaptive without a config file) starting at Steps.
	adaptiveDefault bool
	// from is the unit as a sweep or tune found it (nil: none): the setting
	// is planned on it and written over what the job left (planFound).
	from *found
	// restore are files beside the unit to put back as the job found them
	// (After; Removed when there was none), written with the setting.
	restore *fileSet
}

// fileSet is files beside the unit (a pointer keeps Setting comparable).
type fileSet struct{ files []FileChange }

func (s Setting) restoreFiles() []FileChange {
	if s.restore == nil {
		return nil
	}
	return s.restore.files
}

// perLoadSet is a per-load Setting's table (a pointer keeps Setting
// comparable), and for SGLang whether the unit sets
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND.
type perLoadSet struct {
	rows     []PerLoadRow
	skipZero bool
}

func (s Setting) String() string {
	switch {
	case s.perLoad != nil:
		return "per-load " + perLoadCommand(s.perLoad.rows, s.perLoad.skipZero)
	case s.adaptiveDefault:
		return "SGLang's default adaptive table"
	case s.Steps == 0:
		return "steps 0 (speculation off)"
	}
	out := fmt.Sprintf("steps %d", s.Steps)
	if s.TopK > 0 {
		out += fmt.Sprintf(" topk %d", s.TopK)
	}
	if s.DraftTokens > 0 {
		out += fmt.Sprintf(" draft %d", s.DraftTokens)
	}
	return out
}

// planOn plans the unit edit that deploys s on d, with the files beside the
// unit it writes.
func (r *Runbook) planOn(t *target, d *deployed, s Setting) (*planned, error) {
	var p *planned
	switch {
	case s.perLoad != nil:
		prop, err := r.perLoadPlan(t, d, unitEngine(d), s.perLoad.rows, s.perLoad.skipZero)
		if err != nil {
			return nil, err
		}
		p = prop.planned
	case s.adaptiveDefault:
		var err error
		if p, err = r.planWith(t, d, s.Steps, unit.Options{AdaptiveDefault: true}); err != nil {
			return nil, err
		}
	default:
		var err error
		if p, err = r.planWith(t, d, s.Steps, unit.Options{TopK: s.TopK, DraftTokens: s.DraftTokens}); err != nil {
			return nil, err
		}
	}
	for _, f := range s.restoreFiles() {
		if !slices.ContainsFunc(p.files, func(g FileChange) bool { return g.Path == f.Path }) {
			p.files = append(p.files, FileChange{Path: f.Path, After: f.After, Removed: f.Removed})
		}
	}
	return p, nil
}

// planWith plans the unit edit of steps with opts (MaxSteps is the config's).
func (r *Runbook) planWith(t *target, d *deployed, steps int, opts unit.Options) (*planned, error) {
	opts.MaxSteps = r.cfg.MaxSteps
	e, err := d.eff.SetSteps(steps, opts)
	if err != nil {
		return nil, err
	}
	p := &planned{edit: e, path: e.File, before: e.Before, after: e.After}
	if t.cfg.DropIn && e.File == d.mainPath && len(e.Changed) > 0 {
		p.path = d.mainPath + ".d/opsbot.conf"
		before, exists := d.files[p.path]
		p.before, p.created, p.after = before, !exists, unit.DropIn(e)
	}
	return p, nil
}

func specOf(engineName string, s unit.Spec) *Spec {
	sp := &Spec{Engine: engineName, Algorithm: s.Algorithm, Steps: s.DraftSteps(), TopK: s.TopK, DraftTokens: s.DraftTokens, BatchTable: s.BatchTable,
		SkipZeroDraftExtend: s.Adaptive && s.SkipZeroDraftExtend}
	if s.Adaptive {
		sp.Adaptive = s.AdaptiveConfig
		if sp.Adaptive == "" {
			sp.Adaptive = AdaptiveDefaultTable
		}
	}
	return sp
}

// MTPSteps is `mtp steps N`: edit the unit, stop, clear the GPUs, write,
// daemon-reload, start (recovering a restart loop once), wait until ready,
// verify the engine's settings and benchmark. When the new unit cannot be made
// to serve (the start fails or loops, the engine is not ready in time, or it
// does not run the new settings), the previous text is restored and started
// and the job fails saying why (rolled_back). When it serves the new settings
// and only the benchmark fails, the new unit stays and the error says so.
//
// A cancel (or timeout, or shutdown) never leaves a half-written unit: a write
// once begun finishes with its daemon-reload, and the job then stops before
// the start; a start once issued is not undone (the engine goes on loading).
// Result.Left says, on every return, what the service runs and the command
// that helps next.
func (r *Runbook) MTPSteps(ctx context.Context, service string, steps int, dryRun bool, rep Reporter) (*Result, error) {
	return r.mtpSteps(ctx, service, steps, dryRun, true, rep)
}

// mtpSteps is MTPSteps; without benchmark it stops once the engine is verified.
func (r *Runbook) mtpSteps(ctx context.Context, service string, steps int, dryRun, benchmark bool, rep Reporter) (*Result, error) {
	return r.mtpSet(ctx, service, Setting{Steps: steps}, dryRun, benchmark, rep)
}

// mtpSet is mtpSteps for a whole setting (steps, and SGLang's topk and draft
// tokens).
func (r *Runbook) mtpSet(ctx context.Context, service string, set Setting, dryRun, benchmark bool, rep Reporter) (_ *Result, err error) {
	steps := set.Steps
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	serving := false
	defer func() {
		if !dryRun {
			r.leave(ctx, t, res, err == nil && serving)
		}
	}()
	st := begin(rep, "read unit", "reading %s on %s", t.cfg.Unit, t.cfg.Host)
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, st.fail(err)
	}
	p, err := r.plan(t, d, set)
	if err != nil {
		return res, st.fail(err)
	}
	if err := readBeside(ctx, t, p); err != nil {
		return res, st.fail(err)
	}
	p.files = slices.DeleteFunc(p.files, func(f FileChange) bool { return f.Removed && f.Created }) // to remove, and not there
	e := p.edit
	changed := len(e.Changed) > 0 || p.filesChange()
	res.Unit = &UnitChange{Path: p.path, Before: p.before, After: p.after, ArgvBefore: e.ArgvBefore, ArgvAfter: e.ArgvAfter, Diff: e.Diff, Files: p.files}
	if p.path != e.File {
		res.Unit.Diff = unit.UnifiedDiff(p.path, p.before, p.after)
	}
	res.Spec = specOf(e.Engine, e.SpecAfter)
	for _, f := range p.files {
		if f.Path == e.SpecAfter.AdaptiveConfig && e.SpecAfter.Adaptive && !f.Removed {
			res.Spec.AdaptiveTable = AdaptiveTableID(f.After)
		}
	}
	from := e.SpecBefore.DraftSteps()
	res.did.unit, res.did.steps, res.did.oldSteps = UnitOld, from, from
	st.done("%s", planText(t, set, p, changed, from))
	if err := r.checkReach(ctx, t); err != nil {
		return res, err
	}
	if dryRun {
		res.Summary = fmt.Sprintf("dry run: %s on %s, nothing changed", stepsMove(from, steps), service)
		would := "would: " + wouldStop(t) + ", clear GPU memory held by dead engine processes, " +
			p.writesText() + ", daemon-reload, start, wait until ready, verify the engine's settings" + wouldRejoin(t)
		if benchmark {
			would += ", benchmark"
		}
		res.Details = append(res.Details, would)
		res.Details = append(res.Details, filesText(p.files)...)
		if res.Unit.Diff != "" {
			res.Details = append(res.Details, res.Unit.Diff)
		}
		return res, nil
	}
	if err := r.windDown(); err != nil && changed {
		return res, fmt.Errorf("not started: %w; nothing was changed on %s", err, service)
	}
	if changed {
		if err := r.deploy(ctx, t, p, res, rep); err != nil {
			return res, err
		}
	} else if err := r.ensureServing(ctx, t, res, rep); err != nil {
		return res, err
	}
	if err := r.verify(ctx, t, res, rep); err != nil {
		if !changed || ctx.Err() != nil {
			return res, err
		}
		// It serves, but not the new settings: the change did not take.
		return res, r.rollbackAfter(ctx, t, p, res, rep, err)
	}
	serving = true
	if !benchmark {
		res.Summary = fmt.Sprintf("%s on %s, serving", stepsMove(from, steps), service)
		return res, nil
	}
	if err := r.windDown(); err != nil {
		res.Summary = fmt.Sprintf("%s on %s, serving; benchmark skipped", stepsMove(from, steps), service)
		return res, fmt.Errorf("benchmark skipped: %w; %s serves the new settings (steps %d)", err, service, steps)
	}
	b, err := r.benchmark(ctx, t, BenchParams{}, res, rep)
	if err != nil {
		if ctx.Err() != nil {
			serving = false
			return res, err
		}
		if !changed {
			return res, fmt.Errorf("%w; %s serves steps %d as before", err, service, steps)
		}
		return res, fmt.Errorf("%w; the new unit (steps %d) stays: the engine serves it and runs the new settings (`mtp steps %d %s` puts steps %d back)",
			err, steps, from, service, from)
	}
	res.Summary = fmt.Sprintf("%s on %s: %s", stepsMove(from, steps), service, b)
	return res, nil
}

// planText says what a planned change of set does to the unit (from: the
// steps the unit runs now).
func planText(t *target, set Setting, p *planned, changed bool, from int) string {
	switch e := p.edit; {
	case !changed:
		return fmt.Sprintf("%s already runs %s", t.cfg.Unit, set)
	case set.perLoad != nil || set.adaptiveDefault:
		return fmt.Sprintf("%s: %s", set, changeList(e.Changed))
	case len(e.Changed) == 0:
		return fmt.Sprintf("%s: %s", set, besideNames(p.files))
	default:
		return fmt.Sprintf("%s: %s", stepsMove(from, set.Steps), changeList(e.Changed))
	}
}

func changeList(cs []unit.Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		if c.From == "" && c.To == "" {
			parts[i] = fmt.Sprintf("%s (added)", c.Flag)
		} else if c.From == "" {
			parts[i] = fmt.Sprintf("%s %s (added)", c.Flag, c.To)
		} else {
			parts[i] = fmt.Sprintf("%s %s -> %s", c.Flag, c.From, c.To)
		}
	}
	return strings.Join(parts, ", ")
}

// deploy stops the service, clears the GPUs, writes the change, reloads and
// starts; when the new unit does not serve (the start fails or loops, or the
// engine is not ready within the ready timeout) it rolls back. It holds the
// service's node from the stop until the service serves (or the rollback
// ends). On a cancel it returns at the next step boundary: after a write, the
// new unit is in place and not started.
func (r *Runbook) deploy(ctx context.Context, t *target, p *planned, res *Result, rep Reporter) error {
	unlock, err := r.holdNode(ctx, t, rep)
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.stop(ctx, t, res, rep); err != nil {
		return err
	}
	if err := r.windDownBeforeWrite(ctx, t, res, rep); err != nil {
		return err
	}
	if err := r.clearGPUs(ctx, t, res, rep, false); err != nil {
		return err
	}
	if err := r.windDownBeforeWrite(ctx, t, res, rep); err != nil {
		return err
	}
	if r.beforeWrite != nil {
		if err := r.beforeWrite(ctx, t, p); err != nil {
			if serr := r.startAndServe(ctx, t, res, rep, true); serr != nil {
				return fmt.Errorf("stopped before the write: %w; the unit is unchanged, and starting it again failed: %v", err, serr)
			}
			return fmt.Errorf("stopped before the write: %w; the unit is unchanged and serves again", err)
		}
	}
	if err := r.writeUnit(ctx, t, p, UnitNew, res, rep); err != nil {
		if ctx.Err() != nil {
			return err
		}
		if res.did.unit == UnitNew {
			// Written, but systemd did not reload it: put the previous text back.
			if rerr := r.writeUnit(ctx, t, p, UnitOld, res, rep); rerr != nil {
				return fmt.Errorf("%w; restoring the previous unit also failed: %v", err, rerr)
			}
		}
		// The write is atomic and a write that landed all the same went on: the
		// previous unit is in place. Say what is on disk, and start it again.
		disk := onDisk(ctx, t, p)
		if serr := r.startAndServe(ctx, t, res, rep, true); serr != nil {
			return fmt.Errorf("%w; %s; starting it again also failed: %v", err, disk, serr)
		}
		return fmt.Errorf("%w; %s, and serves again", err, disk)
	}
	if ctx.Err() != nil {
		// The write finished; the start is not begun.
		return fmt.Errorf("before the start (the new unit is written): %w", ctx.Err())
	}
	err = r.startAndServe(ctx, t, res, rep, true)
	if err == nil || !doesNotServe(err) || ctx.Err() != nil {
		return err
	}
	// The new unit does not serve: put the previous one back.
	return r.rollback(ctx, t, p, res, rep, err)
}

// windDownBeforeWrite, when the job is asked to wind down after it stopped
// the service and before it wrote the new unit, starts the unchanged unit
// again and returns why it stopped there; else nil.
func (r *Runbook) windDownBeforeWrite(ctx context.Context, t *target, res *Result, rep Reporter) error {
	why := r.windDown()
	if why == nil {
		return nil
	}
	if err := r.startAndServe(ctx, t, res, rep, true); err != nil {
		return fmt.Errorf("stopped before the write: %w; the unit is unchanged, and starting it again failed: %v", why, err)
	}
	return fmt.Errorf("stopped before the write: %w; the unit is unchanged and serves again", why)
}

// doesNotServe reports a start that did not lead to a serving engine: it
// failed or looped (*StartError), or the engine was not ready in time
// (*NotServingError).
func doesNotServe(err error) bool {
	var se *StartError
	var ns *NotServingError
	return errors.As(err, &se) || errors.As(err, &ns)
}

// rollbackAfter rolls back a deployed change whose engine serves but failed
// verification (cause), holding the node as deploy does.
func (r *Runbook) rollbackAfter(ctx context.Context, t *target, p *planned, res *Result, rep Reporter, cause error) error {
	unlock, err := r.holdNode(ctx, t, rep)
	if err != nil {
		return fmt.Errorf("%w; rolling back: %v", cause, err)
	}
	defer unlock()
	return r.rollback(ctx, t, p, res, rep, cause)
}

// rollback restores the previous unit text, starts it and waits until it
// serves. It returns cause, saying whether the previous unit serves again.
func (r *Runbook) rollback(ctx context.Context, t *target, p *planned, res *Result, rep Reporter, cause error) error {
	res.AddIncident(IncidentRolledBack)
	res.did.rolledBack = true
	prev := p.wasText()
	err := r.stop(ctx, t, res, rep)
	if err == nil {
		err = r.writeUnit(ctx, t, p, UnitOld, res, rep)
	}
	if err == nil {
		err = r.clearGPUs(ctx, t, res, rep, false)
	}
	if err == nil {
		err = r.startAndServe(ctx, t, res, rep, true)
	}
	if err != nil {
		return fmt.Errorf("%w; rolling back to the previous unit (%s) also failed: %v", cause, prev, err)
	}
	res.did.restored = true
	return fmt.Errorf("%w; restored the previous unit (%s) and it serves again", cause, prev)
}

// writeTimeout bounds a unit write and its daemon-reload, which run to the
// end even when the job is cancelled (a unit is never left half-changed).
const writeTimeout = time.Minute

// writeUnit puts the new (UnitNew) or the previous (UnitOld) text of p in
// place atomically (a drop-in the change created is removed again for
// UnitOld), then runs daemon-reload. Once begun, it is not cancelled: it ends
// with the file and systemd's view of it both old or both new. res.did.unit
// names the text on disk as soon as it is there.
func (r *Runbook) writeUnit(ctx context.Context, t *target, p *planned, which string, res *Result, rep Reporter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	text, mkdir, remove := p.after, p.created, false
	steps := p.edit.SpecAfter.DraftSteps()
	if which == UnitOld {
		text, remove, steps = p.before, p.created, p.edit.SpecBefore.DraftSteps()
	}
	what := p.path
	if p.filesChange() {
		what = besideNames(p.files) + ", then " + p.path
		if which == UnitOld {
			what = p.path + ", then " + besideNames(p.files)
		}
	}
	st := begin(rep, StepWriteUnit, "writing %s", what)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	res.did.changed = true
	if which == UnitNew {
		// The files first: the new unit names them.
		if err := writeBesideFiles(wctx, t, p, which); err != nil {
			return st.fail(err)
		}
	}
	if mkdir {
		if err := runOK(wctx, t, "mkdir", "-p", path.Dir(p.path)); err != nil {
			return st.fail(err)
		}
	}
	if remove {
		if err := runOK(wctx, t, "rm", "-f", p.path); err != nil {
			return st.fail(err)
		}
	} else if err := t.host.WriteFileAtomic(wctx, p.path, []byte(text), 0o644); err != nil && !landed(wctx, t, p.path, text, err, res, st) {
		return st.fail(err) // it names the file and the host
	}
	res.did.unit, res.did.steps = which, steps
	if which == UnitOld {
		// The unit no longer names them: put them back.
		if err := writeBesideFiles(wctx, t, p, which); err != nil {
			return st.fail(err)
		}
	}
	if err := daemonReload(wctx, t); err != nil {
		if !isUnknownOutcome(wctx, err) {
			return st.fail(err)
		}
		// daemon-reload is idempotent: run it again on a new connection.
		res.AddIncident(IncidentConnectionLost)
		st.warn("connection to %s lost during systemctl daemon-reload (%v): reconnecting to run it again", t.cfg.Host, err)
		if err := daemonReload(wctx, t); err != nil {
			return st.fail(err)
		}
	}
	st.done("written, daemon reloaded")
	return nil
}

// landed reports, after a write of path failed with err, whether text is in
// place all the same: the connection dropped after the replace took effect.
// A write whose connection dropped records connection_lost either way.
func landed(ctx context.Context, t *target, path, text string, err error, res *Result, st *step) bool {
	if ctx.Err() != nil || !errors.Is(err, remote.ErrOutcomeUnknown) {
		return false
	}
	res.AddIncident(IncidentConnectionLost)
	b, rerr := t.host.ReadFile(ctx, path)
	if rerr != nil || string(b) != text {
		return false
	}
	st.warn("connection to %s lost while writing %s (%v): read it back: the new text is in place", t.cfg.Host, path, err)
	return true
}

// onDisk says which text a unit file has after a failed write: the previous
// one, the new one, or neither that could be read.
func onDisk(ctx context.Context, t *target, p *planned) string {
	b, err := t.host.ReadFile(ctx, p.path)
	switch {
	case err != nil && p.created && errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("there is no %s on disk, as before (%s)", path.Base(p.path), p.wasText())
	case err != nil:
		return fmt.Sprintf("reading %s back failed (%v): it holds the previous or the new text, never a mix; `mtp show` says which", p.path, err)
	case string(b) == p.before:
		return fmt.Sprintf("the unit on disk is the previous text (%s)", p.wasText())
	case string(b) == p.after:
		return fmt.Sprintf("the unit on disk is the new text (%s), but systemd may not have loaded it", p.nowText())
	}
	return fmt.Sprintf("%s on disk is neither the previous nor the new text: someone else changed it", p.path)
}

// runOK runs argv on the service's host; a non-zero exit is an error quoting stderr.
func runOK(ctx context.Context, t *target, argv ...string) error {
	out, err := t.host.Run(ctx, nil, argv...)
	if err != nil {
		return err
	}
	if out.ExitStatus != 0 {
		return fmt.Errorf("%s on %s: exit status %d: %s", strings.Join(argv, " "), t.cfg.Host, out.ExitStatus, strings.TrimSpace(string(out.Stderr)))
	}
	return nil
}

// ensureServing starts the service when it is not active and waits until ready.
func (r *Runbook) ensureServing(ctx context.Context, t *target, res *Result, rep Reporter) error {
	s, err := t.unit.Show(ctx)
	if err != nil {
		return err
	}
	if s.Active() {
		return r.waitServing(ctx, t, res, rep, s.ActiveEnterTimestamp, false, s.NRestarts)
	}
	unlock, err := r.holdNode(ctx, t, rep)
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.stop(ctx, t, res, rep); err != nil {
		return err
	}
	if err := r.clearGPUs(ctx, t, res, rep, false); err != nil {
		return err
	}
	return r.startAndServe(ctx, t, res, rep, true)
}

// verify checks that the running engine reports the unit's settings: SGLang
// from /server_info; vLLM, which has no such endpoint, from the draft
// positions of its speculative-decoding counters on /metrics (one per
// speculative token). When the engine reports no such thing the step is
// skipped and says so. A mismatch is a *VerifyError (settings_mismatch).
func (r *Runbook) verify(ctx context.Context, t *target, res *Result, rep Reporter) error {
	sp := res.Spec
	if sp.Engine == unit.VLLM {
		return r.verifyVLLM(ctx, t, res, rep)
	}
	st := begin(rep, "verify", "reading the engine's settings from %s/server_info", t.cfg.URL)
	info, err := t.eng.ServerInfo(ctx)
	if err != nil {
		return st.fail(&VerifyError{Service: t.name, Err: err})
	}
	sp.LiveSteps, sp.LiveTopK, sp.LiveDraftTokens = info.Steps, info.TopK, info.DraftTokens
	if info.Steps != sp.Steps || (sp.TopK != 0 && info.TopK != sp.TopK) || (sp.DraftTokens != 0 && info.DraftTokens != sp.DraftTokens) {
		res.AddIncident(IncidentSettingsDiffer)
		return st.fail(&VerifyError{Service: t.name, Mismatch: true, Err: fmt.Errorf("the engine reports steps %d, topk %d, draft tokens %d; the unit says %d, %d, %d: something else sets them (a drop-in, an environment file?)",
			info.Steps, info.TopK, info.DraftTokens, sp.Steps, sp.TopK, sp.DraftTokens)})
	}
	if sp.Steps == 0 && sp.Adaptive == "" {
		if info.Algorithm != "" {
			res.AddIncident(IncidentSettingsDiffer)
			return st.fail(&VerifyError{Service: t.name, Mismatch: true, Err: fmt.Errorf("the engine runs speculative decoding (%s, steps %d); the unit has none: something else sets it (a drop-in, an environment file?)",
				engine.Excerpt(info.Algorithm), info.Steps)})
		}
		st.done("engine runs without speculative decoding")
		return nil
	}
	if sp.Adaptive != "" {
		on, _ := info.Raw["speculative_adaptive"].(bool)
		path, _ := info.Raw["speculative_adaptive_config"].(string)
		if !on || (sp.Adaptive != AdaptiveDefaultTable && path != sp.Adaptive) {
			res.AddIncident(IncidentSettingsDiffer)
			return st.fail(&VerifyError{Service: t.name, Mismatch: true, Err: fmt.Errorf("the engine reports speculative_adaptive %v with config %q; the unit says adaptive with %s: "+
				"SGLang turns adaptive off, with a warning in its log, for an algorithm other than EAGLE/EAGLE3 or topk above 1", on, engine.Excerpt(path), sp.Adaptive)})
		}
		st.done("engine runs %s per load from %s, launched with steps %d, topk %d, draft tokens %d", algorithmLabel(sp.Algorithm, info.Algorithm), sp.Adaptive, info.Steps, info.TopK, info.DraftTokens)
		return nil
	}
	st.done("engine runs %s steps %d, topk %d, draft tokens %d", algorithmLabel(sp.Algorithm, info.Algorithm), info.Steps, info.TopK, info.DraftTokens)
	return nil
}

// vllmPerPos is vLLM's counter of accepted draft tokens per draft position:
// it has one series per speculative token from the engine's start.
const vllmPerPos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

func (r *Runbook) verifyVLLM(ctx context.Context, t *target, res *Result, rep Reporter) error {
	sp := res.Spec
	st := begin(rep, "verify", "reading the engine's speculative counters from %s/metrics", t.cfg.URL)
	m, err := t.eng.Metrics(ctx)
	if err != nil {
		return st.fail(&VerifyError{Service: t.name, Err: err})
	}
	positions := map[string]bool{}
	for _, s := range m {
		if s.Name == vllmPerPos {
			positions[s.Labels["position"]] = true
		}
	}
	switch {
	case len(positions) == 0 && sp.Steps == 0:
		st.done("engine runs without speculative decoding (no speculative counters on /metrics)")
		return nil
	case len(positions) == 0:
		st.skip("vLLM reports no speculative counters on /metrics: the unit's num_speculative_tokens %d is taken as deployed", sp.Steps)
		return nil
	case sp.Steps == 0:
		res.AddIncident(IncidentSettingsDiffer)
		return st.fail(&VerifyError{Service: t.name, Mismatch: true, Err: fmt.Errorf("the engine counts %d draft positions; the unit has no speculative decoding: something else sets it (a drop-in, an environment file?)",
			len(positions))})
	}
	sp.LiveSteps = len(positions)
	if sp.LiveSteps != sp.Steps {
		res.AddIncident(IncidentSettingsDiffer)
		return st.fail(&VerifyError{Service: t.name, Mismatch: true, Err: fmt.Errorf("the engine counts %d draft positions; the unit says num_speculative_tokens %d: something else sets it (a drop-in, an environment file?)",
			sp.LiveSteps, sp.Steps)})
	}
	st.done("engine runs vLLM num_speculative_tokens %d (%d draft positions on /metrics)", sp.LiveSteps, len(positions))
	return nil
}

// VerifyError is an engine that serves but could not be shown to run the
// unit's settings: it did not answer the settings request, or it reports
// other settings.
type VerifyError struct {
	Service  string
	Mismatch bool // it reports other settings (else it did not answer)
	Err      error
}

func (e *VerifyError) Error() string {
	if e.Mismatch {
		return "the engine does not run the new settings: " + e.Err.Error()
	}
	return "the engine serves but could not be asked its settings: " + e.Err.Error()
}

func (e *VerifyError) Unwrap() error { return e.Err }

// algorithmLabel names the algorithm as the unit does, adding what the engine
// reports when it differs: SGLang runs NEXTN (MTP) as EAGLE and reports EAGLE,
// so the unit's NEXTN reads "NEXTN (engine: EAGLE)" wherever both are shown.
func algorithmLabel(unitAlgo, engineAlgo string) string {
	switch {
	case unitAlgo == "":
		return engineAlgo
	case engineAlgo == "" || strings.EqualFold(unitAlgo, engineAlgo):
		return unitAlgo
	}
	return unitAlgo + " (engine: " + engineAlgo + ")"
}

// readSpec is the step that reads the unit's speculative settings into res.Spec.
func (r *Runbook) readSpec(ctx context.Context, t *target, res *Result, rep Reporter) error {
	st := begin(rep, "read unit", "reading %s on %s", t.cfg.Unit, t.cfg.Host)
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return st.fail(err)
	}
	sp, err := d.eff.Spec()
	if err != nil {
		return st.fail(err)
	}
	res.Spec = specOf(d.eff.Detection.Engine, sp)
	if sp.Adaptive && sp.AdaptiveConfig != "" {
		// The form a result is compared by is the table's contents.
		if b, err := t.host.ReadFile(ctx, sp.AdaptiveConfig); err == nil {
			res.Spec.AdaptiveTable = AdaptiveTableID(string(b))
		}
	}
	st.done("%s in %s", specLine(res.Spec), d.eff.File().Name)
	return nil
}

// MTPShow is `mtp show`: the unit's speculative settings and the engine's.
func (r *Runbook) MTPShow(ctx context.Context, service string, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if err := r.readSpec(ctx, t, res, rep); err != nil {
		return res, err
	}
	line := fmt.Sprintf("%s (%s): unit %s", service, t.cfg.Unit, specLine(res.Spec))
	if t.cfg.Engine == "sglang" {
		if info, err := t.eng.ServerInfo(ctx); err == nil {
			res.Spec.LiveSteps, res.Spec.LiveTopK, res.Spec.LiveDraftTokens = info.Steps, info.TopK, info.DraftTokens
			line += fmt.Sprintf("; engine %s steps %d, topk %d, draft tokens %d", algorithmLabel(res.Spec.Algorithm, info.Algorithm),
				info.Steps, info.TopK, info.DraftTokens)
			if info.AvgAcceptLen > 0 {
				line += fmt.Sprintf(", accept len %.2f since the engine started or its cache was last flushed", info.AvgAcceptLen)
			}
		} else {
			line += "; engine not answering (" + err.Error() + ")"
		}
	}
	res.Summary = line
	return res, nil
}

func specLine(s *Spec) string {
	if s.Engine == unit.VLLM {
		if s.BatchTable != "" {
			return fmt.Sprintf("vLLM per load: num_speculative_tokens_per_batch_size %s (at most %d)", s.BatchTable, s.Steps)
		}
		return fmt.Sprintf("vLLM num_speculative_tokens %d", s.Steps)
	}
	if s.Adaptive != "" {
		return fmt.Sprintf("%s per load from %s (adaptive), launched with steps %d, topk %d, draft tokens %d", s.Algorithm, s.Adaptive, s.Steps, s.TopK, s.DraftTokens)
	}
	return fmt.Sprintf("%s steps %d, topk %d, draft tokens %d", s.Algorithm, s.Steps, s.TopK, s.DraftTokens)
}
