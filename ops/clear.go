package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/gpu"
)

// clearGPUs makes sure the service's GPUs are below its clear threshold before
// a start. Memory whose holder has already exited is waited out (the driver
// releases it asynchronously). A holder is reaped from the host that sees its
// PID only when it holds one of the service's own GPUs (memory there, or its
// /dev/nvidiaN) and belongs to the service (its unit's cgroup, or orphaned from
// it inside its container: gpu.Scope.Owner), and is an engine process, or any
// process with force. Everything else on the service's GPUs is left alone and
// named in the thread with whose it is; the GPU daemons are never touched. The
// wait for clear GPUs looks at the service's GPUs only and does not wait for
// what left-alone holders keep. A process that no signal kills ends the step
// with a *gpu.StuckError. The readings before and after go to res.GPUs, every
// signal sent to res.Killed.
func (r *Runbook) clearGPUs(ctx context.Context, t *target, res *Result, rep Reporter, force bool) error {
	st := begin(rep, "clear GPUs", "checking GPU memory of %s on %s", t.name, t.cfg.Host)
	gpus, err := gpu.Query(ctx, t.host)
	if err != nil {
		return st.fail(fmt.Errorf("read GPU memory on %s: %w", t.cfg.Host, err))
	}
	recordGPUs(res, t.cfg.Host, gpus, t.cfg.GPUs)
	if held := heldGPUs(gpus, t.cfg.GPUs, t.cfg.ClearMiB); len(held) == 0 {
		res.did.gpusClear = true
		st.done("%s", clearSummary(gpus, t.cfg.GPUs, t.cfg.ClearMiB))
		return nil
	}
	holders, err := gpu.Holders(ctx, t.node)
	if err != nil {
		return st.fail(fmt.Errorf("find what holds GPU memory on %s: %w", t.nodeName, err))
	}
	s := sortHolders(t, gpus, holders, force)
	kill := s.kill
	if len(kill) > 0 {
		res.AddIncident(IncidentGPUMemoryHeld)
		st.progress("GPU memory held by %s since the last stop: stopping them (SIGTERM, then SIGKILL after %s)",
			describeProcs(kill), r.cfg.ReapGrace)
		killed, err := gpu.Reap(ctx, t.node, kill, gpu.ReapOptions{Grace: r.cfg.ReapGrace, Poll: r.cfg.Poll, Force: force,
			Progress: func(s string) { st.progress("%s", s) }})
		for _, k := range killed {
			res.Killed = append(res.Killed, Killed{PID: k.PID, Host: t.nodeName, Command: k.Command, Signal: k.Signal})
		}
		if len(s.alone) > 0 {
			st.warn("left alone: %s", s.describeAlone(t))
		}
		if err != nil {
			var stuck *gpu.StuckError
			if errors.As(err, &stuck) {
				res.AddIncident(IncidentStuckProcess)
				msg, advice := stuckAdvice(t, kill, stuck, names(r.onNode(t.nodeName)))
				res.did.advice = advice
				err = &StuckProcessError{Service: t.name, Node: t.nodeName, Msg: msg, Advice: advice, Err: stuck}
			} else {
				res.did.gpuHeld = true
			}
			return st.fail(err)
		}
	} else if len(s.alone) > 0 {
		// Live processes that are not the service's engine: they ran beside the
		// engine or belong to someone else, and will not let go by themselves.
		// Leave them, and let the start tell whether the engine still fits; a
		// start that fails for memory names them again.
		st.warn("GPU memory of %s is held by processes left alone: %s", t.name, s.describeAlone(t))
		st.done("%s", heldSummary(gpus, t.cfg.GPUs))
		return nil
	} else {
		// The engine stopped a moment ago: the driver frees its memory
		// asynchronously. Only a release that takes long is worth a warning.
		st.progress("waiting for the driver to release %d MiB the stopped engine held on %s (no process holds it)",
			usedMiB(gpus, t.cfg.GPUs), gpuList(heldGPUs(gpus, t.cfg.GPUs, t.cfg.ClearMiB)))
	}
	// What the holders left alone keep is not waited for: it would never go.
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ClearTimeout)
	defer cancel()
	gpus, err = r.waitReleased(wctx, t, s.kept, len(kill) == 0, st)
	if gpus != nil {
		recordGPUs(res, t.cfg.Host, gpus, t.cfg.GPUs)
	}
	if err != nil {
		var se *StrandedError
		switch {
		case errors.As(err, &se):
			res.AddIncident(IncidentGPUMemoryHeld)
			res.did.resetGPUs, res.did.resetNode = se.GPUs, se.Node
		case ctx.Err() == nil:
			res.AddIncident(IncidentGPUMemoryHeld)
			res.did.gpuHeld = true
		}
		return st.fail(err)
	}
	// Clear, unless holders left alone keep memory (they were allowed for).
	res.did.gpusClear = len(s.kept) == 0
	st.done("%s", clearSummary(gpus, t.cfg.GPUs, t.cfg.ClearMiB))
	return nil
}

// ReleaseWarnAfter is how long the driver may take to release the memory of
// an engine that was just stopped before clearGPUs warns that memory is held
// with no process holding it.
const ReleaseWarnAfter = 5 * time.Second

// usedMiB sums the memory used on the GPUs of want (nil = all).
func usedMiB(gpus []gpu.GPU, want []int) int {
	n := 0
	for _, g := range gpus {
		if wanted(g.Index, want) && g.UsedMiB > 0 {
			n += g.UsedMiB
		}
	}
	return n
}

// sorted is what clearGPUs (and the previews) make of the holders of a
// service's GPUs.
type sorted struct {
	kill  []gpu.Process
	alone []leftAlone
	kept  map[int]int // service GPU index -> MiB that left-alone holders keep there
}

// leftAlone is a holder that is not killed, and why.
type leftAlone struct {
	p   gpu.Process
	why string
}

// sortHolders decides, for each holder seen on the node, whether it is
// reaped: only processes on the service's GPUs (gpus is the service host's
// reading) that belong to the service, engine processes or, with force, any
// but the daemons. Holders of other GPUs only are not the service's business
// and are not listed.
func sortHolders(t *target, gpus []gpu.GPU, holders []gpu.Process, force bool) sorted {
	s := sorted{kept: map[int]int{}}
	var mine []gpu.GPU
	for _, g := range gpus {
		if wanted(g.Index, t.cfg.GPUs) {
			mine = append(mine, g)
		}
	}
	for _, p := range holders {
		if p.Daemon {
			continue
		}
		var on []gpu.GPU
		for _, g := range mine {
			if p.OnGPU(g.UUID, g.Index) {
				on = append(on, g)
			}
		}
		own := t.scope.Owner(p)
		switch {
		case len(on) == 0 && len(p.GPUs) == 0 && own.Service:
			s.alone = append(s.alone, leftAlone{p, "holds only /dev/nvidiactl or /dev/nvidia-uvm, no GPU of " + t.name + "'s"})
			continue
		case len(on) == 0:
			continue // a neighbour's, on its own GPUs
		case !own.Service:
			s.alone = append(s.alone, leftAlone{p, own.Whose + ", not " + t.name + "'s: never killed"})
		case p.Engine || force:
			s.kill = append(s.kill, p)
			continue
		default:
			s.alone = append(s.alone, leftAlone{p, "not an engine process (`gpu recover " + t.name + " --force` would kill it)"})
		}
		for _, g := range on {
			for _, h := range p.GPUs {
				if h.UsedMiB > 0 && ((h.UUID != "" && h.UUID == g.UUID) || (h.UUID == "" || g.UUID == "") && h.Index == g.Index) {
					s.kept[g.Index] += h.UsedMiB
				}
			}
		}
	}
	return s
}

// describeAlone renders "PID 5123 (python3 -m sglang.launch_server) on GPU 0,
// 6000 MiB: container 130, not qwen's: never killed; ...".
func (s sorted) describeAlone(t *target) string {
	parts := make([]string, len(s.alone))
	for i, a := range s.alone {
		var on []string
		for _, g := range a.p.GPUs {
			on = append(on, fmt.Sprint(g.Index))
		}
		where := ""
		if len(on) > 0 {
			where = " on " + t.nodeName + " GPU " + strings.Join(on, ",")
		}
		mem := ""
		if a.p.UsedMiB > 0 {
			mem = fmt.Sprintf(", %d MiB", a.p.UsedMiB)
		}
		parts[i] = fmt.Sprintf("PID %d (%s)%s%s: %s", a.p.PID, shortCommand(a.p.Cmdline), where, mem, a.why)
	}
	return strings.Join(parts, "; ")
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

// recordGPUs stores a reading of the GPUs of want (nil = all) in res.GPUs: as
// the "before" value the first time a GPU is seen, and always as the "after" value.
func recordGPUs(res *Result, host string, gpus []gpu.GPU, want []int) {
	for _, g := range gpus {
		if !wanted(g.Index, want) {
			continue
		}
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

// gpuList renders "GPU 0" or "GPUs 0,1,2".
func gpuList(gpus []gpu.GPU) string {
	idx := make([]string, len(gpus))
	for i, g := range gpus {
		idx[i] = fmt.Sprint(g.Index)
	}
	if len(idx) == 1 {
		return "GPU " + idx[0]
	}
	return "GPUs " + strings.Join(idx, ",")
}
