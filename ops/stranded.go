package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/gpu"
)

// DefaultStrandedAfter is how long memory no process holds may stay on a GPU
// without falling before `gpu recover` calls it stranded and offers a reset
// (Config.StrandedAfter): a driver releases a dead process's memory within
// seconds, and the wait it replaces was ClearTimeout (2 minutes).
const DefaultStrandedAfter = 10 * time.Second

// StrandedError is GPU memory that no process holds and that stopped
// falling for Config.StrandedAfter: the driver keeps it, and only a reset
// of those GPUs frees it. GPUs are the indexes on Node, the machine that
// owns them.
type StrandedError struct {
	Service string
	Node    string
	GPUs    []int
	MiB     map[int]int // by node index
	After   time.Duration
}

func (e *StrandedError) Error() string {
	var parts []string
	for _, g := range e.GPUs {
		parts = append(parts, fmt.Sprintf("GPU %d %d MiB", g, e.MiB[g]))
	}
	return fmt.Sprintf("memory held by no process on %s (%s), not falling for %s: the driver keeps it and only a reset of %s frees it; %s is stopped",
		e.Node, strings.Join(parts, ", "), e.After, gpuWord(e.GPUs), e.Service)
}

// fall is the lowest reading of a GPU's memory and when it was first seen.
type fall struct {
	mib int
	at  time.Time
}

// waitReleased waits until the service's GPUs are clear (allowing what
// left-alone holders keep). With warn, a wait that lasts beyond
// ReleaseWarnAfter is reported as a warning. Memory that stopped falling
// for StrandedAfter while no process holds those GPUs ends the wait with a
// *StrandedError naming them by the node's indexes. On ctx end it returns
// the last readings and a *gpu.HeldError.
func (r *Runbook) waitReleased(ctx context.Context, t *target, kept map[int]int, warn bool, st *step) ([]gpu.GPU, error) {
	start, warned := time.Now(), false
	low := map[int]fall{}
	var last []gpu.GPU
	for {
		gs, err := gpu.Query(ctx, t.host)
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last, &gpu.HeldError{GPUs: last, ClearMiB: t.cfg.ClearMiB, Allow: kept, Err: ctx.Err()}
			}
			return last, fmt.Errorf("wait for GPUs to clear: %w", err)
		}
		last = mineOf(gs, t.cfg.GPUs)
		held := heldAllowing(last, t.cfg.ClearMiB, kept)
		if len(held) == 0 {
			return last, nil
		}
		now := time.Now()
		still := true
		for _, g := range held {
			if f, ok := low[g.Index]; !ok || (g.Known && g.UsedMiB < f.mib) {
				low[g.Index] = fall{g.UsedMiB, now}
			}
			still = still && now.Sub(low[g.Index].at) >= r.cfg.StrandedAfter
		}
		if still {
			serr, err := r.stranded(ctx, t, held)
			if err != nil || serr != nil {
				return last, firstErr(err, serr)
			}
			low = map[int]fall{} // a process holds them: wait on
		}
		if warn && !warned && now.Sub(start) >= ReleaseWarnAfter && r.cfg.ClearTimeout > ReleaseWarnAfter {
			warned = true
			st.warn("GPU memory still in use after %s with no process holding it (%d MiB): still waiting for the driver (memory that does not fall for %s is stranded: only a GPU reset frees it)",
				ReleaseWarnAfter, usedMiB(last, nil), r.cfg.StrandedAfter)
		}
		if err := sleepCtx(ctx, r.cfg.Poll); err != nil {
			return last, &gpu.HeldError{GPUs: last, ClearMiB: t.cfg.ClearMiB, Allow: kept, Err: err}
		}
	}
}

// stranded checks that no process holds the held GPUs on the node; then the
// memory is stranded (a *StrandedError with the node's indexes); nil when a
// process holds one of them.
func (r *Runbook) stranded(ctx context.Context, t *target, held []gpu.GPU) (*StrandedError, error) {
	holders, err := gpu.Holders(ctx, t.node)
	if err != nil {
		return nil, hostErr("find GPU holders", t.nodeName, err)
	}
	for _, p := range holders {
		for _, g := range held {
			if !p.Daemon && p.OnGPU(g.UUID, g.Index) {
				return nil, nil
			}
		}
	}
	ngs := held
	if t.node != t.host {
		if ngs, err = gpu.Query(ctx, t.node); err != nil {
			return nil, hostErr("nvidia-smi", t.nodeName, err)
		}
	}
	e := &StrandedError{Service: t.name, Node: t.nodeName, MiB: map[int]int{}, After: r.cfg.StrandedAfter}
	for _, n := range ngs {
		for _, g := range held {
			if (g.UUID != "" && g.UUID == n.UUID) || ((g.UUID == "" || n.UUID == "") && g.Index == n.Index) {
				e.GPUs = append(e.GPUs, n.Index)
				e.MiB[n.Index] = n.UsedMiB
			}
		}
	}
	return e, nil
}

// mineOf returns the readings of the GPUs of want (nil = all).
func mineOf(gs []gpu.GPU, want []int) []gpu.GPU {
	var out []gpu.GPU
	for _, g := range gs {
		if wanted(g.Index, want) {
			out = append(out, g)
		}
	}
	return out
}

// heldAllowing returns the GPUs of gs at or above clearMiB plus what
// left-alone holders keep there.
func heldAllowing(gs []gpu.GPU, clearMiB int, kept map[int]int) []gpu.GPU {
	var out []gpu.GPU
	for _, g := range gs {
		if !g.Known || g.UsedMiB >= clearMiB+kept[g.Index] {
			out = append(out, g)
		}
	}
	return out
}

// firstErr returns err, else serr as an error (nil when both are nil).
func firstErr(err error, serr *StrandedError) error {
	if err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	return nil
}
