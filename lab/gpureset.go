package lab

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"syscall"
)

// The GPU reset and persistence mode, as nvidia-smi and the driver do them:
//
//   - `nvidia-smi -pm 0|1 [-i N]` sets persistence mode per GPU; while
//     nvidia-persistenced runs it does so through the daemon ("Enabled
//     persistence mode for GPU ..."), without it the driver's legacy mode
//     ("Enabled Legacy persistence mode ..."). Inside a container it is
//     refused (Insufficient Permissions).
//   - `nvidia-smi --gpu-reset|-r [-i N]` resets the GPUs named (all without
//     -i). It is refused, naming each GPU, while any process uses the GPU
//     (memory or its /dev/nvidiaN open: a process in D state too) or while
//     persistence mode holds it [nvidia-smi(1) -r; NVIDIA/NVSentinel 1690:
//     "In use by another client", exit 255]. A reset frees memory held by no
//     process, activates a pending row remap and clears the volatile ECC
//     counters. nv-hostengine (DCGM) does not block a reset in the lab.
//   - Stopping nvidia-persistenced (its unit on the node) drops persistence on
//     every GPU; it starts again with the mode its command line says
//     (--no-persistence-mode: off until set per GPU again).
//   - The persistence-held=G fault: the daemon does not give GPU G up per GPU
//     (`nvidia-smi -pm 0 -i G` answers "Unknown Error", exit 255), so only
//     stopping nvidia-persistenced releases it [NVIDIA/gpu-operator 118].

// persistencedUnit is the node's unit of the persistence daemon.
const persistencedUnit = "nvidia-persistenced.service"

const persistencedUnitText = `[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
`

// resetRefusedText is what nvidia-smi adds after the GPUs it could not reset.
const resetRefusedText = "1 device is currently being used by one or more other processes (e.g. Fabric Manager, CUDA application, graphics application such as an X server, or a monitoring application such as another instance of nvidia-smi). Please first kill all processes using this device and all compute applications running in the system."

// persistencedRunning reports whether the persistence daemon runs (mu held).
func (w *world) persistencedRunning() bool {
	for _, p := range w.procs {
		if p.daemon && len(p.args) > 0 && path.Base(p.args[0]) == "nvidia-persistenced" {
			return true
		}
	}
	return false
}

// persistencedExited is the daemon's exit: persistence drops on every GPU
// (mu held).
func (w *world) persistencedExited() {
	for _, g := range w.gpus {
		g.hw.persistence = false
	}
}

// setPersistence is `nvidia-smi -pm MODE [-i IDS]`.
func (e *cmdEnv) setPersistence(mode string, ids map[int]bool) int {
	var on bool
	switch strings.ToUpper(mode) {
	case "1", "ENABLED":
		on = true
	case "0", "DISABLED":
	default:
		fmt.Fprintf(e.stdout, "Invalid value for persistence mode: %s\n", mode)
		return 2
	}
	w := e.h.w
	w.lock()
	defer w.unlock()
	daemon := w.persistencedRunning()
	code := 0
	for _, g := range w.gpus {
		if ids != nil && !ids[g.index] {
			continue
		}
		switch {
		case e.h.ct != nil:
			fmt.Fprintf(e.stdout, "Unable to set persistence mode for GPU %s: Insufficient Permissions\n", busID(g.index))
			code = 4
			continue
		case !on && g.hw.persistHeld && daemon:
			fmt.Fprintf(e.stdout, "Unable to set persistence mode for GPU %s: Unknown Error\n", busID(g.index))
			code = 255
			continue
		case g.hw.persistence == on:
			fmt.Fprintf(e.stdout, "Persistence mode is already %s for GPU %s.\n", map[bool]string{true: "Enabled", false: "Disabled"}[on], busID(g.index))
			continue
		}
		g.hw.persistence = on
		legacy := ""
		if !daemon {
			legacy = "Legacy "
		}
		fmt.Fprintf(e.stdout, "%s %spersistence mode for GPU %s.\n", map[bool]string{true: "Enabled", false: "Disabled"}[on], legacy, busID(g.index))
	}
	if code != 0 {
		fmt.Fprintln(e.stdout, "Terminating early due to previous errors.")
		return code
	}
	fmt.Fprintln(e.stdout, "All done.")
	return 0
}

// gpuReset is `nvidia-smi --gpu-reset [-i IDS]`.
func (e *cmdEnv) gpuReset(ids map[int]bool) int {
	w := e.h.w
	w.lock()
	defer w.unlock()
	var gs []*gpu
	for _, g := range w.gpus {
		if ids == nil || ids[g.index] {
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		fmt.Fprintln(e.stdout, "No devices were found")
		return 6
	}
	var refused []string
	for _, g := range gs {
		switch {
		case e.h.ct != nil:
			refused = append(refused, fmt.Sprintf("  GPU %s: Insufficient Permissions", busID(g.index)))
		case w.gpuInUse(g.index) || g.hw.persistence:
			refused = append(refused, fmt.Sprintf("  GPU %s: In use by another client", busID(g.index)))
		}
	}
	if len(refused) > 0 {
		fmt.Fprintln(e.stdout, "The following GPUs could not be reset:")
		for _, r := range refused {
			fmt.Fprintln(e.stdout, r)
		}
		if e.h.ct != nil {
			return 4
		}
		fmt.Fprintln(e.stdout)
		fmt.Fprintln(e.stdout, resetRefusedText)
		return 255
	}
	for _, g := range gs {
		w.resetGPU(g)
		fmt.Fprintf(e.stdout, "GPU %s was successfully reset.\n", busID(g.index))
	}
	return 0
}

// gpuInUse reports whether a process uses GPU g: memory on it or its device
// file open, in any state but dead; the GPU daemons aside (mu held).
func (w *world) gpuInUse(g int) bool {
	dev := fmt.Sprintf("/dev/nvidia%d", g)
	for _, p := range w.procs {
		if p.dead || p.daemon || !p.gpuFDs {
			continue
		}
		if _, ok := p.mem[g]; ok || usesDevice(p, dev) {
			return true
		}
	}
	return false
}

// resetGPU is a successful reset of g (mu held): the memory the driver kept
// for no process is freed, a pending row remap is activated, the volatile
// ECC counters start again at 0.
func (w *world) resetGPU(g *gpu) {
	g.hw.strandedMiB, g.hw.strandNext = 0, false
	keep := w.releases[:0]
	for _, r := range w.releases {
		if r.gpu != g.index {
			keep = append(keep, r)
		}
	}
	w.releases = keep
	if g.hw.remapPending {
		g.hw.remapPending = false
	}
	g.hw.eccCorrVol, g.hw.eccUncVol = 0, 0
	g.resets++
	w.node.journal.add("", "kernel", 0, fmt.Sprintf("NVRM: GPU at PCI:%s: %s", kernelPCI(g.index), g.uuid))
	if x := g.hw.xidAfterReset; x != 0 {
		g.hw.xidAfterReset = 0
		w.injectXID(g, x)
	}
}

// startPersistenced runs the persistence daemon as the node's unit and sets
// persistence on every GPU, as an administrator's `nvidia-smi -pm 1` after
// boot does (the unit starts the daemon with --no-persistence-mode).
func (l *Lab) startPersistenced(pve *SimHost) error {
	if err := pve.WriteFile("/lib/systemd/system/"+persistencedUnit, []byte(persistencedUnitText)); err != nil {
		return err
	}
	d := pve.readDiskUnit(persistencedUnit)
	if _, err := pve.enableUnit(d, false); err != nil {
		return fmt.Errorf("enable %s: %w", persistencedUnit, err)
	}
	w := l.w
	w.lock()
	defer w.unlock()
	u := pve.sd.get(d)
	if err := u.start(true); err != nil {
		return fmt.Errorf("start %s: %w", persistencedUnit, err)
	}
	for _, g := range w.gpus {
		g.hw.persistence = true
	}
	return nil
}

// runPersistenced makes main the persistence daemon (mu held): a GPU daemon
// holding every device file; its exit drops persistence on every GPU.
func (h *SimHost) runPersistenced(main *proc) {
	main.daemon, main.gpuFDs, main.stat = true, true, "Ss"
	main.onExit = append(main.onExit, func(int, syscall.Signal) { h.w.persistencedExited() })
}

// HoldPersistence arms the persistence-held fault on GPU g: while
// nvidia-persistenced runs, `nvidia-smi -pm 0 -i g` is refused, so only
// stopping the daemon releases the GPU for a reset.
func (l *Lab) HoldPersistence(g int) error {
	return l.withGPU(g, func(hw *gpuHealth) { hw.persistHeld = true })
}

// GPUReset is what the lab knows of one GPU's reset and persistence.
type GPUReset struct {
	Index       int
	Persistence bool
	Resets      int // successful resets since the lab started
	StrandedMiB int // memory the driver keeps for no process
}

// GPUResets reports every GPU's persistence mode and reset count.
func (l *Lab) GPUResets() []GPUReset {
	w := l.w
	w.lock()
	defer w.unlock()
	var out []GPUReset
	for _, g := range w.gpus {
		out = append(out, GPUReset{Index: g.index, Persistence: g.hw.persistence, Resets: g.resets, StrandedMiB: g.hw.strandedMiB})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}
