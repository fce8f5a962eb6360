package ops

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/ops/systemd"
)

// restoreTimeout bounds putting persistence mode back, which runs even when
// the job's context has ended.
const restoreTimeout = 30 * time.Second

// releasePersistence turns persistence mode off for exactly the reset GPUs
// that have it on, per GPU through the driver (`nvidia-smi -pm 0 -i N`).
// Where the driver refuses that, it stops nvidia-persistenced instead and
// says which other GPUs lose persistence with it. It returns the function
// that puts every changed GPU back as it was (always to be called), which
// returns how that went in a few words.
func (r *Runbook) releasePersistence(ctx context.Context, p *resetPlan, res *Result, rep Reporter) (func(context.Context) string, error) {
	var on []int
	for _, g := range p.gpus {
		if p.persist[g] {
			on = append(on, g)
		}
	}
	if len(on) == 0 {
		return func(context.Context) string { return "was off" }, nil
	}
	st := begin(rep, "persistence", "releasing persistence mode on %s (nvidia-smi -pm 0)", gpuWord(on))
	var off []int
	var refused error
	for _, g := range on {
		if err := gpu.SetPersistence(ctx, p.io, g, false); err != nil {
			refused = err
			break
		}
		off = append(off, g)
	}
	daemon := systemd.Service{R: p.io, Unit: gpu.PersistencedUnit, Poll: r.cfg.Poll}
	var stopped []int // every GPU that had persistence when the daemon stopped
	if refused != nil {
		var ce *gpu.CommandError
		if !errors.As(refused, &ce) || ce.ExitStatus == 4 { // no permission: stopping the daemon would not be allowed either
			r.restorePersistence(ctx, p, off, nil, daemon, st)
			return nil, st.fail(refused)
		}
		stopped = p.persistOn()
		others := minusInts(stopped, p.gpus)
		st.warn("the driver refused it (%v): stopping %s instead, which drops persistence mode on %s too (%s) until it is started again right after the reset; a GPU in use keeps working without it",
			refused, gpu.PersistencedUnit, gpuWord(others), p.othersText(others))
		if err := daemon.Stop(ctx); err != nil {
			r.restorePersistence(ctx, p, off, nil, daemon, st)
			return nil, st.fail(err)
		}
		st.done("%s stopped: persistence mode is off on every GPU of %s", gpu.PersistencedUnit, p.node)
	} else {
		st.done("persistence mode off on %s", gpuWord(off))
	}
	return func(ctx context.Context) string {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
		defer cancel()
		back := append(append([]int(nil), off...), minusInts(stopped, off)...)
		sort.Ints(back)
		rs := begin(rep, "restore persistence", "putting persistence mode back on %s", gpuWord(back))
		if err := r.restorePersistence(rctx, p, off, stopped, daemon, rs); err != nil {
			res.AddIncident(IncidentRestoreFailed)
			rs.fail(err)
			return "NOT restored (" + err.Error() + ")"
		}
		rs.done("persistence mode back as it was")
		return "restored"
	}, nil
}

// restorePersistence starts nvidia-persistenced again when it was stopped
// (stopped: the GPUs that had persistence then), then sets persistence mode
// back on every GPU of off and stopped that lacks it, and checks.
func (r *Runbook) restorePersistence(ctx context.Context, p *resetPlan, off, stopped []int, daemon systemd.Service, st *step) error {
	if stopped != nil {
		if err := daemon.Start(ctx); err != nil {
			return err
		}
	}
	want := append(append([]int(nil), off...), minusInts(stopped, off)...)
	sort.Ints(want)
	now, err := gpu.QueryPersistence(ctx, p.io)
	if err != nil {
		return err
	}
	var failed []string
	for _, g := range want {
		if now[g] {
			continue
		}
		if err := gpu.SetPersistence(ctx, p.io, g, true); err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	if now, err = gpu.QueryPersistence(ctx, p.io); err != nil {
		return err
	}
	var still []int
	for _, g := range want {
		if !now[g] {
			still = append(still, g)
		}
	}
	if len(still) > 0 {
		return fmt.Errorf("persistence mode still off on %s", gpuWord(still))
	}
	return nil
}

// minResetVerify is the least time the check after a reset waits for the
// GPUs to read 0 MiB, whatever StrandedAfter says: long enough for a query
// over a slow SSH connection to come back (a shorter wait would end the
// query itself, not the wait). The wait ends as soon as they read 0.
const minResetVerify = 5 * time.Second

// resetAndVerify resets the GPUs and checks them: 0 MiB used, no Xid
// logged since the reading before.
func (r *Runbook) resetAndVerify(ctx context.Context, p *resetPlan, res *Result, rep Reporter) error {
	st := begin(rep, "reset", "%s on %s", strings.Join(gpu.ResetArgv(p.gpus), " "), p.node)
	if err := gpu.Reset(ctx, p.io, p.gpus); err != nil {
		return st.fail(err)
	}
	st.done("%s reset", gpuWord(p.gpus))
	vs := begin(rep, "verify", "checking %s: memory and new Xid events", gpuWord(p.gpus))
	wctx, cancel := context.WithTimeout(ctx, max(r.cfg.StrandedAfter, minResetVerify))
	gs, err := gpu.WaitClear(wctx, p.io, p.gpus, 1, r.cfg.Poll) // below 1 MiB: 0 MiB
	cancel()
	recordGPUs(res, p.node, gs, p.gpus)
	if err != nil {
		return vs.fail(fmt.Errorf("after the reset: %w", err))
	}
	hs, logErr, err := gpu.ReadHealth(ctx, p.io)
	if err != nil {
		return vs.fail(hostErr("read the GPUs", p.node, err))
	}
	if p.logErr != nil || logErr != nil {
		vs.warn("the kernel log could not be read, so new Xid events are unknown: `gpu health %s` shows what is known", p.node)
	}
	var fresh []string
	for _, g := range p.gpus {
		h, _ := healthOf(hs, g)
		if p.logErr == nil && logErr == nil && len(h.XIDs) > p.xids[g] {
			for _, e := range h.XIDs[p.xids[g]:] {
				fresh = append(fresh, fmt.Sprintf("GPU %d Xid %d (%s)", g, e.XID, e.Text))
			}
		}
	}
	if len(fresh) > 0 {
		return vs.fail(fmt.Errorf("new Xid events since the reset: %s; the services are left stopped: `gpu health %s` says what they mean", strings.Join(fresh, "; "), p.node))
	}
	vs.done("0 MiB used on %s, no new Xid", gpuWord(p.gpus))
	return nil
}

// startEnabled starts the services on the reset GPUs whose units are
// enabled (their wanted state) and waits until each serves; the others are
// left stopped and said so. It returns the services serving again; the
// first start that failed is its error. With one service on the GPUs, its
// state is res.Left.
func (r *Runbook) startEnabled(ctx context.Context, p *resetPlan, res *Result, rep Reporter) ([]string, error) {
	var serving []string
	var first error
	for _, t := range p.services {
		state, err := t.unit.Enabled(ctx)
		if err != nil {
			first = errors.Join(first, err)
			continue
		}
		sub := &Result{Incidents: []string{}}
		if state != "enabled" {
			res.Details = append(res.Details, fmt.Sprintf("%s left stopped: its unit %s is %s, not enabled", t.name, t.cfg.Unit, state))
		} else {
			sub.did.gpusClear = true
			err = r.startAndServe(ctx, t, sub, rep, false)
			if err == nil {
				serving = append(serving, t.name)
			} else if first == nil {
				first = err
			}
			for _, in := range sub.Incidents {
				res.AddIncident(in)
			}
		}
		if len(p.services) == 1 {
			r.leave(ctx, t, sub, err == nil && state == "enabled")
			res.Left = sub.Left
		}
	}
	return serving, first
}

// persistOn returns the node's GPUs whose persistence mode was on before.
func (p *resetPlan) persistOn() []int {
	var out []int
	for _, h := range p.hs {
		if h.Persistence != nil && *h.Persistence {
			out = append(out, h.Index)
		}
	}
	return out
}

// othersText names whose the GPUs of gs are: "coder's 4,5,6,7; no service's 8".
func (p *resetPlan) othersText(gs []int) string {
	by := map[string][]string{}
	var keys []string
	for _, g := range gs {
		k := "no service's"
		if ts := p.owners[g]; len(ts) > 0 {
			k = strings.Join(names(ts), " and ") + "'s"
		}
		if by[k] == nil {
			keys = append(keys, k)
		}
		by[k] = append(by[k], fmt.Sprint(g))
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + strings.Join(by[k], ",")
	}
	return strings.Join(parts, "; ")
}

// minusInts returns a without the elements of b.
func minusInts(a, b []int) []int {
	var out []int
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}
