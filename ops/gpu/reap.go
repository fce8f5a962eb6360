package gpu

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Killed is a process Reap ended, with the signal that was needed.
type Killed struct {
	PID     int
	Command string // its command line
	Signal  string // "TERM" or "KILL"
}

// ReapOptions tune Reap. Zero values take the defaults.
type ReapOptions struct {
	Grace    time.Duration // how long SIGTERM gets before SIGKILL (default DefaultGrace)
	Poll     time.Duration // how often ps checks who is left (default 25ms)
	KillWait time.Duration // how long SIGKILL gets before a survivor is stuck (default 2s)
	Force    bool          // also signal holders that are not engine processes (never daemons)
	Progress func(string)  // called with a line for each phase; may be nil
}

// Defaults of ReapOptions. DefaultGrace is also the runbook's (ops.Config.ReapGrace).
const (
	DefaultGrace    = 5 * time.Second
	DefaultReapPoll = 25 * time.Millisecond
	DefaultKillWait = 2 * time.Second
)

// StuckError is processes that survived SIGKILL in D state (uninterruptible
// sleep, typically inside the GPU driver): no signal can end them, and the
// driver refuses a GPU reset while they hold the GPU: only a reboot.
// Retrying does not help.
type StuckError struct {
	PIDs     []int
	Commands []string // command lines, same order
}

func (e *StuckError) Error() string {
	parts := make([]string, len(e.PIDs))
	for i, pid := range e.PIDs {
		parts[i] = fmt.Sprintf("%d (%s)", pid, shortCmd(e.Commands[i]))
	}
	word, verb, obj := "PID", "is", "it"
	if len(e.PIDs) > 1 {
		word, verb, obj = "PIDs", "are", "them"
	}
	return fmt.Sprintf("%s %s %s in D state: no signal can kill %s; only a reboot of the host frees the GPU", word, strings.Join(parts, ", "), verb, obj)
}

// SurvivorError is processes that outlived SIGKILL and KillWait without being
// in D state (for example stopped by a debugger).
type SurvivorError struct {
	PIDs  []int
	Stats []string
}

func (e *SurvivorError) Error() string {
	parts := make([]string, len(e.PIDs))
	for i, pid := range e.PIDs {
		parts[i] = fmt.Sprintf("%d (state %s)", pid, e.Stats[i])
	}
	return "processes survived SIGKILL: " + strings.Join(parts, ", ")
}

// shortCmd is the program of a command line without its directory, or a
// process title such as "sglang::scheduler_TP0" whole.
func shortCmd(cmdline string) string {
	f := strings.Fields(cmdline)
	if len(f) == 0 {
		return "?"
	}
	if strings.Contains(f[0], "::") {
		return f[0]
	}
	return base(f[0])
}

// Reap ends the engine processes among procs, usually the result of Holders
// on the same r: it re-reads them with ps (a PID whose command line changed
// was reused and is left alone), sends SIGTERM, polls every Poll until they are
// gone, sends SIGKILL to those left after Grace and polls again for KillWait.
// Daemons are never signalled, nor other non-engine processes unless Force;
// zombies are skipped (they hold nothing). It returns what it ended with the
// signal each needed, and, when some survive, a *StuckError (in D state) or a
// *SurvivorError. On ctx end it returns what it ended so far and ctx's error.
func Reap(ctx context.Context, r Runner, procs []Process, opts ReapOptions) ([]Killed, error) {
	opts = opts.withDefaults()
	cmd, pids := reapable(procs, opts)
	if len(pids) == 0 {
		return nil, nil
	}
	live, err := stillRunning(ctx, r, cmd, pids, opts)
	if err != nil {
		return nil, err
	}
	if len(live) == 0 {
		return nil, nil
	}
	var killed []Killed
	gone := func(pids []int, sig string) {
		for _, pid := range pids {
			killed = append(killed, Killed{PID: pid, Command: cmd[pid], Signal: sig})
		}
	}

	opts.say("SIGTERM to %s", describe(live, cmd))
	left, _, err := signalAndWait(ctx, r, "TERM", live, opts.Grace, opts.Poll)
	gone(minus(live, left), "TERM")
	if err != nil {
		return killed, fmt.Errorf("reap GPU holders: %w", err)
	}
	if len(left) == 0 {
		opts.say("all %d ended after SIGTERM", len(live))
		return killed, nil
	}

	opts.say("%s survived SIGTERM for %s: SIGKILL", describe(left, cmd), opts.Grace)
	still, stats, err := signalAndWait(ctx, r, "KILL", left, opts.KillWait, opts.Poll)
	gone(minus(left, still), "KILL")
	if err != nil {
		return killed, fmt.Errorf("reap GPU holders: %w", err)
	}
	if len(still) == 0 {
		opts.say("all ended (%d needed SIGKILL)", len(left))
		return killed, nil
	}
	return killed, survivorsError(still, stats, cmd)
}

// withDefaults is o with its zero durations set to the defaults.
func (o ReapOptions) withDefaults() ReapOptions {
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Poll <= 0 {
		o.Poll = DefaultReapPoll
	}
	if o.KillWait <= 0 {
		o.KillWait = DefaultKillWait
	}
	return o
}

// say tells o.Progress, when set, a line.
func (o ReapOptions) say(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// reapable picks the processes of procs Reap may signal: not daemons, not
// PID 1 or below, each PID once, and engine processes only unless
// opts.Force (each other one is said). It returns their command lines by
// PID and the PIDs ascending.
func reapable(procs []Process, opts ReapOptions) (map[int]string, []int) {
	cmd := map[int]string{}
	var pids []int
	for _, p := range procs {
		switch {
		case p.Daemon || IsDaemon(p.Cmdline):
			continue
		case !p.Engine && !opts.Force:
			opts.say("not signalling PID %d (%s): not an engine process", p.PID, shortCmd(p.Cmdline))
			continue
		case p.PID <= 1 || cmd[p.PID] != "":
			continue
		}
		cmd[p.PID] = p.Cmdline
		pids = append(pids, p.PID)
	}
	slices.Sort(pids)
	return cmd, pids
}

// stillRunning re-reads pids with ps and returns those that still run the
// same command line (cmd[pid]) and are not zombies: a PID whose command line
// changed was reused, and is said and left alone.
func stillRunning(ctx context.Context, r Runner, cmd map[int]string, pids []int, opts ReapOptions) ([]int, error) {
	rows, err := ps(ctx, r, "pid=,ppid=,stat=,args=", 4, pids)
	if err != nil {
		return nil, fmt.Errorf("reap GPU holders: %w", err)
	}
	var live []int
	for _, row := range rows {
		c, ok := cmd[row.PID]
		switch {
		case !ok || row.Stat[0] == 'Z':
		case row.Args != c:
			opts.say("not signalling PID %d: it now runs %q (the PID was reused)", row.PID, truncate(row.Args))
		default:
			live = append(live, row.PID)
		}
	}
	return live, nil
}

// signalAndWait sends SIG to pids and polls every poll, for up to wait,
// until they are gone; it returns those left with their STAT (waitGone).
// When the signal cannot be sent, every PID is left.
func signalAndWait(ctx context.Context, r Runner, sig string, pids []int, wait, poll time.Duration) ([]int, map[int]string, error) {
	if err := signal(ctx, r, sig, pids); err != nil {
		return pids, nil, err
	}
	return waitGone(ctx, r, pids, wait, poll)
}

// survivorsError is the error for the PIDs still that outlived SIGKILL: a
// *StuckError when some are in D state (by their STAT in stats), else a
// *SurvivorError.
func survivorsError(still []int, stats map[int]string, cmd map[int]string) error {
	stuck := &StuckError{}
	other := &SurvivorError{}
	for _, pid := range still {
		if strings.HasPrefix(stats[pid], "D") {
			stuck.PIDs = append(stuck.PIDs, pid)
			stuck.Commands = append(stuck.Commands, cmd[pid])
		} else {
			other.PIDs = append(other.PIDs, pid)
			other.Stats = append(other.Stats, stats[pid])
		}
	}
	if len(stuck.PIDs) > 0 {
		return stuck
	}
	return other
}

func describe(pids []int, cmd map[int]string) string {
	parts := make([]string, len(pids))
	for i, pid := range pids {
		parts[i] = fmt.Sprintf("%d (%s)", pid, shortCmd(cmd[pid]))
	}
	word := "PID"
	if len(pids) > 1 {
		word = "PIDs"
	}
	return word + " " + strings.Join(parts, ", ")
}

func minus(a, b []int) []int {
	var out []int
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// signal runs `kill -SIG PID...`. A PID that is already gone ("No such
// process") is not an error.
func signal(ctx context.Context, r Runner, sig string, pids []int) error {
	argv := []string{"kill", "-" + sig}
	for _, p := range pids {
		argv = append(argv, strconv.Itoa(p))
	}
	out, err := r.Run(ctx, nil, argv...)
	if err != nil {
		return fmt.Errorf("send SIG%s: %w", sig, err)
	}
	if out.ExitStatus == 0 && out.Signal == "" {
		return nil
	}
	if out.Signal == "" && out.ExitStatus == 1 {
		onlyGone := true
		for _, l := range strings.Split(strings.TrimSpace(string(out.Stderr)), "\n") {
			if !strings.Contains(l, "No such process") {
				onlyGone = false
			}
		}
		if onlyGone {
			return nil
		}
	}
	return fmt.Errorf("send SIG%s: %w", sig, commandError(argv, out))
}

// waitGone polls `ps -o pid=,stat= -p PIDS` until none of pids is left (a
// zombie counts as gone) or d passed. It returns those left with their STAT.
func waitGone(ctx context.Context, r Runner, pids []int, d, poll time.Duration) ([]int, map[int]string, error) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		rows, err := ps(ctx, r, "pid=,stat=", 2, pids)
		if err != nil {
			return pids, nil, err
		}
		var left []int
		stats := map[int]string{}
		for _, row := range rows {
			if slices.Contains(pids, row.PID) && row.Stat[0] != 'Z' {
				left = append(left, row.PID)
				stats[row.PID] = row.Stat
			}
		}
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left, stats, nil
		}
		select {
		case <-ctx.Done():
			return left, stats, ctx.Err()
		case <-tick.C:
		}
	}
}

// DefaultClearMiB is the clear threshold (WaitClear's clearMiB) a service
// uses when its configuration sets none: a GPU counts as clear below 1 GiB
// used. It is also opsbot's services.NAME.clear_mib when unset.
const DefaultClearMiB = 1024

// HeldError is GPUs still at or above the clear threshold when WaitClear's
// context ended. It wraps the context's error.
type HeldError struct {
	GPUs     []GPU // the last readings of the GPUs waited for
	ClearMiB int
	Allow    map[int]int // MiB allowed on top of ClearMiB, by GPU index (what others keep)
	Err      error
}

func (e *HeldError) Error() string {
	var held []string
	for _, g := range e.GPUs {
		switch {
		case !g.Known:
			held = append(held, fmt.Sprintf("GPU %d [N/A]", g.Index))
		case g.UsedMiB >= e.ClearMiB+e.Allow[g.Index]:
			held = append(held, fmt.Sprintf("GPU %d %d MiB", g.Index, g.UsedMiB))
		}
	}
	return fmt.Sprintf("GPU memory not released (threshold %d MiB): %s: %v", e.ClearMiB, strings.Join(held, ", "), e.Err)
}

func (e *HeldError) Unwrap() error { return e.Err }

// clear reports whether every GPU of want (nil = all) in gs reads below
// clearMiB; missing lists the wanted indexes gs lacks.
func clearOf(gs []GPU, want []int, clearMiB int, allow map[int]int) (sel []GPU, ok bool, missing []int) {
	ok = true
	for _, g := range gs {
		if want != nil && !slices.Contains(want, g.Index) {
			continue
		}
		sel = append(sel, g)
		if !g.Known || g.UsedMiB >= clearMiB+allow[g.Index] {
			ok = false
		}
	}
	for _, i := range want {
		if !slices.ContainsFunc(gs, func(g GPU) bool { return g.Index == i }) {
			missing = append(missing, i)
		}
	}
	return sel, ok, missing
}

// WaitClear polls Query every poll (default 25ms) until every GPU of gpus (nil
// = all) reads below clearMiB, and returns that reading (of the GPUs waited
// for). A GPU index the host lacks or a negative clearMiB is an error at once,
// as is a failing query; on ctx end it returns the last readings and a
// *HeldError.
func WaitClear(ctx context.Context, r Runner, gpus []int, clearMiB int, poll time.Duration) ([]GPU, error) {
	return WaitClearAllowing(ctx, r, gpus, clearMiB, nil, poll)
}

// WaitClearAllowing is WaitClear where GPU i counts as clear below clearMiB +
// allow[i]: memory that holders deliberately left alone keep there (a
// neighbour's process, a non-engine process) is not waited for.
func WaitClearAllowing(ctx context.Context, r Runner, gpus []int, clearMiB int, allow map[int]int, poll time.Duration) ([]GPU, error) {
	if clearMiB < 0 {
		return nil, fmt.Errorf("wait for GPUs to clear: negative threshold %d MiB", clearMiB)
	}
	if poll <= 0 {
		poll = DefaultReapPoll
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var last []GPU
	for {
		gs, err := Query(ctx, r)
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last, &HeldError{GPUs: last, ClearMiB: clearMiB, Allow: allow, Err: ctx.Err()}
			}
			return last, fmt.Errorf("wait for GPUs to clear: %w", err)
		}
		sel, ok, missing := clearOf(gs, gpus, clearMiB, allow)
		if len(missing) > 0 {
			return sel, fmt.Errorf("wait for GPUs to clear: the host has no GPU %s (it has %d)", pidList(missing), len(gs))
		}
		if ok {
			return sel, nil
		}
		last = sel
		select {
		case <-ctx.Done():
			return sel, &HeldError{GPUs: sel, ClearMiB: clearMiB, Allow: allow, Err: ctx.Err()}
		case <-tick.C:
		}
	}
}
