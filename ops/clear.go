package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops/gpu"
)

// clearGPUs makes sure the service's GPUs are below its clear threshold before
// a start. Memory whose holder has already exited is waited out (the driver
// releases it asynchronously); memory still held by engine processes (orphaned
// workers, a previous run that did not die) is reaped from the host that sees
// their PIDs; with force every holder but the known GPU daemons is. A process
// that no signal kills ends the step with a *gpu.StuckError. The readings
// before and after go to res.GPUs, every signal sent to res.Killed.
func (r *Runbook) clearGPUs(ctx context.Context, t *target, res *Result, rep Reporter, force bool) error {
	st := begin(rep, "clear GPUs", "checking GPU memory on %s", t.cfg.Host)
	gpus, err := gpu.Query(ctx, t.host)
	if err != nil {
		return st.fail(fmt.Errorf("read GPU memory on %s: %w", t.cfg.Host, err))
	}
	recordGPUs(res, t.cfg.Host, gpus)
	if held := heldGPUs(gpus, t.cfg.GPUs, t.cfg.ClearMiB); len(held) == 0 {
		st.done("%s", clearSummary(gpus, t.cfg.GPUs, t.cfg.ClearMiB))
		return nil
	}
	holders, err := gpu.Holders(ctx, t.node)
	if err != nil {
		return st.fail(fmt.Errorf("find what holds GPU memory on %s: %w", t.nodeName, err))
	}
	var kill, others []gpu.Process
	for _, p := range holders {
		switch {
		case p.Daemon:
		case p.Engine || force:
			kill = append(kill, p)
		default:
			others = append(others, p)
		}
	}
	if len(kill) > 0 {
		res.AddIncident(IncidentGPUMemoryHeld)
		st.progress("GPU memory held by %s since the last stop: stopping them (SIGTERM, then SIGKILL after %s)",
			describeProcs(kill), r.cfg.ReapGrace)
		killed, err := gpu.Reap(ctx, t.node, kill, gpu.ReapOptions{Grace: r.cfg.ReapGrace, Poll: r.cfg.Poll, Force: force,
			Progress: func(s string) { st.progress("%s", s) }})
		for _, k := range killed {
			res.Killed = append(res.Killed, Killed{PID: k.PID, Host: t.nodeName, Command: k.Command, Signal: k.Signal})
		}
		if len(others) > 0 {
			st.warn("also holding GPU memory, not engine processes, left alone: %s", describeProcs(others))
		}
		if err != nil {
			var stuck *gpu.StuckError
			if errors.As(err, &stuck) {
				res.AddIncident(IncidentStuckProcess)
			}
			return st.fail(err)
		}
	} else if len(others) > 0 {
		// Live processes that are not the engine's: they ran beside the engine and
		// will not let go by themselves. Leave them, and let the start tell whether
		// the engine still fits; a start that fails for memory names them again.
		st.warn("GPU memory is held by %s, not engine processes: left alone (`gpu recover %s --force` would kill them)",
			describeProcs(others), t.name)
		st.done("%s", heldSummary(gpus, t.cfg.GPUs))
		return nil
	} else {
		st.progress("GPU memory still in use with no process holding it: waiting for the driver to release it")
	}
	// What the holders left alone keep is not waited for: it would never go.
	clearMiB := t.cfg.ClearMiB
	for _, p := range others {
		clearMiB += max(p.UsedMiB, 0)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ClearTimeout)
	defer cancel()
	gpus, err = gpu.WaitClear(wctx, t.host, t.cfg.GPUs, clearMiB, r.cfg.Poll)
	if gpus != nil {
		recordGPUs(res, t.cfg.Host, gpus)
	}
	if err != nil {
		res.AddIncident(IncidentGPUMemoryHeld)
		return st.fail(err)
	}
	st.done("%s", clearSummary(gpus, t.cfg.GPUs, clearMiB))
	return nil
}

func heldSummary(gpus []gpu.GPU, want []int) string {
	parts := []string{}
	for _, g := range gpus {
		if wanted(g.Index, want) {
			parts = append(parts, fmt.Sprintf("GPU %d %d MiB", g.Index, g.UsedMiB))
		}
	}
	return "in use by others: " + strings.Join(parts, ", ")
}

// heldGPUs returns the GPUs of want (nil = all) at or above clearMiB.
func heldGPUs(gpus []gpu.GPU, want []int, clearMiB int) []gpu.GPU {
	var held []gpu.GPU
	for _, g := range gpus {
		if !wanted(g.Index, want) {
			continue
		}
		if !g.Known || g.UsedMiB >= clearMiB {
			held = append(held, g)
		}
	}
	return held
}

func wanted(i int, want []int) bool {
	if len(want) == 0 {
		return true
	}
	for _, w := range want {
		if w == i {
			return true
		}
	}
	return false
}

func clearSummary(gpus []gpu.GPU, want []int, clearMiB int) string {
	n, max := 0, 0
	for _, g := range gpus {
		if wanted(g.Index, want) {
			n++
			if g.UsedMiB > max {
				max = g.UsedMiB
			}
		}
	}
	return fmt.Sprintf("%d GPUs clear (at most %d MiB used, threshold %d MiB)", n, max, clearMiB)
}

// recordGPUs stores a reading in res.GPUs: as the "before" value the first
// time a GPU is seen, and always as the "after" value.
func recordGPUs(res *Result, host string, gpus []gpu.GPU) {
	for _, g := range gpus {
		i := -1
		for j := range res.GPUs {
			if res.GPUs[j].Host == host && res.GPUs[j].Index == g.Index {
				i = j
			}
		}
		if i < 0 {
			res.GPUs = append(res.GPUs, GPUMemory{Host: host, Index: g.Index, UsedMiBBefore: g.UsedMiB, TotalMiB: g.TotalMiB})
			i = len(res.GPUs) - 1
		}
		res.GPUs[i].UsedMiBAfter = g.UsedMiB
	}
}

// describeProcs renders "PIDs 4242, 4243 (sglang::scheduler_TP0, sglang::scheduler_TP1)".
func describeProcs(ps []gpu.Process) string {
	pids := make([]string, len(ps))
	names := make([]string, 0, len(ps))
	seen := map[string]bool{}
	for i, p := range ps {
		pids[i] = fmt.Sprint(p.PID)
		n := shortCommand(p.Cmdline)
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	word := "PID"
	if len(ps) > 1 {
		word = "PIDs"
	}
	return fmt.Sprintf("%s %s (%s)", word, strings.Join(pids, ", "), strings.Join(names, ", "))
}

// shortCommand is the first word of a command line without its directory, or
// the whole of a process title such as "sglang::scheduler_TP0".
func shortCommand(cmdline string) string {
	f := strings.Fields(cmdline)
	if len(f) == 0 {
		return "?"
	}
	w := f[0]
	if i := strings.LastIndexByte(w, '/'); i >= 0 && !strings.Contains(w, "::") {
		w = w[i+1:]
	}
	if (strings.HasPrefix(w, "python") || w == "vllm") && len(f) > 1 {
		for i := 1; i < len(f); i++ {
			if f[i] == "-m" && i+1 < len(f) {
				return w + " -m " + f[i+1]
			}
		}
		return w + " " + f[1]
	}
	return w
}
