package ops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/opsbot/opsbot/commands"
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
}

func (r *Runbook) plan(t *target, d *deployed, steps int) (*planned, error) {
	e, err := d.eff.SetSteps(steps, unit.Options{MaxSteps: r.cfg.MaxSteps})
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
	return &Spec{Engine: engineName, Algorithm: s.Algorithm, Steps: s.DraftSteps(), TopK: s.TopK, DraftTokens: s.DraftTokens}
}

// MTPSteps is `mtp steps N`: edit the unit, stop, clear the GPUs, write,
// daemon-reload, start (recovering a restart loop once), wait until ready,
// verify the engine's settings and benchmark. When the new unit cannot be made
// to serve, the previous text is restored and started and the job fails
// saying why (rolled_back).
func (r *Runbook) MTPSteps(ctx context.Context, service string, steps int, dryRun bool, rep Reporter) (*Result, error) {
	return r.mtpSteps(ctx, service, steps, dryRun, true, rep)
}

// mtpSteps is MTPSteps; without benchmark it stops once the engine is verified.
func (r *Runbook) mtpSteps(ctx context.Context, service string, steps int, dryRun, benchmark bool, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	st := begin(rep, "read unit", "reading %s on %s", t.cfg.Unit, t.cfg.Host)
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, st.fail(err)
	}
	p, err := r.plan(t, d, steps)
	if err != nil {
		return res, st.fail(err)
	}
	e := p.edit
	res.Unit = &UnitChange{Path: p.path, Before: p.before, After: p.after, ArgvBefore: e.ArgvBefore, ArgvAfter: e.ArgvAfter, Diff: e.Diff}
	if p.path != e.File {
		res.Unit.Diff = unit.UnifiedDiff(p.path, p.before, p.after)
	}
	res.Spec = specOf(e.Engine, e.SpecAfter)
	from := e.SpecBefore.DraftSteps()
	if len(e.Changed) == 0 {
		st.done("%s already runs steps %d", t.cfg.Unit, steps)
	} else {
		st.done("steps %d -> %d: %s", from, steps, changeList(e.Changed))
	}
	if dryRun {
		res.Summary = fmt.Sprintf("dry run: steps %d -> %d on %s, nothing changed", from, steps, service)
		res.Details = append(res.Details, "would: stop "+t.cfg.Unit+", clear GPU memory held by dead engine processes, write "+
			p.path+", daemon-reload, start, wait until ready, verify /server_info, benchmark")
		if res.Unit.Diff != "" {
			res.Details = append(res.Details, res.Unit.Diff)
		}
		return res, nil
	}
	if len(e.Changed) > 0 {
		if err := r.deploy(ctx, t, p, res, rep); err != nil {
			return res, err
		}
	} else if err := r.ensureServing(ctx, t, res, rep); err != nil {
		return res, err
	}
	if err := r.verify(ctx, t, res, rep); err != nil {
		return res, err
	}
	if !benchmark {
		res.Summary = fmt.Sprintf("steps %d -> %d on %s, serving", from, steps, service)
		return res, nil
	}
	b, err := r.benchmark(ctx, t, commands.BenchParams{}, res, rep)
	if err != nil {
		return res, err
	}
	res.Summary = fmt.Sprintf("steps %d -> %d on %s: %s", from, steps, service, b)
	return res, nil
}

func changeList(cs []unit.Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		if c.From == "" {
			parts[i] = fmt.Sprintf("%s %s (added)", c.Flag, c.To)
		} else {
			parts[i] = fmt.Sprintf("%s %s -> %s", c.Flag, c.From, c.To)
		}
	}
	return strings.Join(parts, ", ")
}

// deploy stops the service, clears the GPUs, writes the change, reloads and
// starts; on a start that cannot be recovered it rolls back. It holds the
// service's node from the stop until the service serves (or the rollback ends).
func (r *Runbook) deploy(ctx context.Context, t *target, p *planned, res *Result, rep Reporter) error {
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
	if err := r.write(ctx, t, p.path, p.after, p.created, false, res, rep); err != nil {
		// The write is atomic: the previous unit is still in place (a write that
		// landed all the same went on). Say what is on disk, and start it again.
		if ctx.Err() == nil {
			disk := onDisk(ctx, t, p)
			if serr := r.startAndServe(ctx, t, res, rep, true); serr != nil {
				return fmt.Errorf("%w; %s; starting it again also failed: %v", err, disk, serr)
			}
			return fmt.Errorf("%w; %s, and serves again", err, disk)
		}
		return err
	}
	err = r.startAndServe(ctx, t, res, rep, true)
	var se *StartError
	if err == nil || !errors.As(err, &se) || ctx.Err() != nil {
		return err
	}
	// The new unit does not serve: put the previous one back.
	if rerr := r.rollback(ctx, t, p, res, rep); rerr != nil {
		return fmt.Errorf("%w; rolling back also failed: %v", err, rerr)
	}
	return fmt.Errorf("%w; restored the previous unit (steps %d) and it serves again", err, p.edit.SpecBefore.DraftSteps())
}

func (r *Runbook) rollback(ctx context.Context, t *target, p *planned, res *Result, rep Reporter) error {
	res.AddIncident(IncidentRolledBack)
	if err := r.stop(ctx, t, res, rep); err != nil {
		return err
	}
	if err := r.write(ctx, t, p.path, p.before, false, p.created, res, rep); err != nil {
		return err
	}
	if err := r.clearGPUs(ctx, t, res, rep, false); err != nil {
		return err
	}
	return r.startAndServe(ctx, t, res, rep, true)
}

// write replaces path with text atomically (remove deletes it instead), then
// runs daemon-reload.
func (r *Runbook) write(ctx context.Context, t *target, p, text string, mkdir, remove bool, res *Result, rep Reporter) error {
	st := begin(rep, "write unit", "writing %s", p)
	if mkdir {
		if err := runOK(ctx, t, "mkdir", "-p", path.Dir(p)); err != nil {
			return st.fail(err)
		}
	}
	if remove {
		if err := runOK(ctx, t, "rm", "-f", p); err != nil {
			return st.fail(err)
		}
	} else if err := t.host.WriteFileAtomic(ctx, p, []byte(text), 0o644); err != nil && !landed(ctx, t, p, text, err, res, st) {
		return st.fail(err) // it names the file and the host
	}
	if err := daemonReload(ctx, t); err != nil {
		if !isUnknownOutcome(ctx, err) {
			return st.fail(err)
		}
		// daemon-reload is idempotent: run it again on a new connection.
		res.AddIncident(IncidentConnectionLost)
		st.warn("connection to %s lost during systemctl daemon-reload (%v): reconnecting to run it again", t.cfg.Host, err)
		if err := daemonReload(ctx, t); err != nil {
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
		return fmt.Sprintf("there is no %s on disk, as before (steps %d)", path.Base(p.path), p.edit.SpecBefore.DraftSteps())
	case err != nil:
		return fmt.Sprintf("reading %s back failed (%v): it holds the previous or the new text, never a mix; `mtp show` says which", p.path, err)
	case string(b) == p.before:
		return fmt.Sprintf("the unit on disk is the previous text (steps %d)", p.edit.SpecBefore.DraftSteps())
	case string(b) == p.after:
		return fmt.Sprintf("the unit on disk is the new text (steps %d), but systemd may not have loaded it", p.edit.SpecAfter.DraftSteps())
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
		return r.waitServing(ctx, t, res, rep, s.ActiveEnterTimestamp, s.NRestarts)
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

// verify checks that the running engine reports the unit's settings.
func (r *Runbook) verify(ctx context.Context, t *target, res *Result, rep Reporter) error {
	st := begin(rep, "verify", "reading the engine's settings from %s", t.cfg.URL)
	if t.cfg.Engine != "sglang" {
		st.skip("vLLM has no /server_info: the unit's settings are taken as deployed")
		return nil
	}
	info, err := t.eng.ServerInfo(ctx)
	if err != nil {
		return st.fail(err)
	}
	sp := res.Spec
	sp.LiveSteps, sp.LiveTopK, sp.LiveDraftTokens = info.Steps, info.TopK, info.DraftTokens
	if info.Steps != sp.Steps || (sp.TopK != 0 && info.TopK != sp.TopK) || (sp.DraftTokens != 0 && info.DraftTokens != sp.DraftTokens) {
		res.AddIncident(IncidentSettingsDiffer)
		return st.fail(fmt.Errorf("the engine reports steps %d, topk %d, draft tokens %d; the unit says %d, %d, %d: something else sets them (a drop-in, an environment file?)",
			info.Steps, info.TopK, info.DraftTokens, sp.Steps, sp.TopK, sp.DraftTokens))
	}
	st.done("engine runs %s steps %d, topk %d, draft tokens %d", algorithmLabel(sp.Algorithm, info.Algorithm), info.Steps, info.TopK, info.DraftTokens)
	return nil
}

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
				line += fmt.Sprintf(", lifetime accept len %.2f", info.AvgAcceptLen)
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
		return fmt.Sprintf("vLLM num_speculative_tokens %d", s.Steps)
	}
	return fmt.Sprintf("%s steps %d, topk %d, draft tokens %d", s.Algorithm, s.Steps, s.TopK, s.DraftTokens)
}
