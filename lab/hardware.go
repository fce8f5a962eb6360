package lab

import (
	"fmt"
	"strings"
)

// gpuHealth is what nvidia-smi reports of one simulated GPU's health, and the
// memory the driver keeps for no process. Guarded by world.mu.
type gpuHealth struct {
	persistence                                  bool
	tempC, powerW, powerLimitW                   int
	throttle                                     uint64 // clocks_event_reasons.active (nvml.h bits)
	linkGen, linkGenMax, linkWidth, linkWidthMax int
	eccCorrVol, eccUncVol, eccCorrAgg, eccUncAgg int
	remapCorr, remapUnc                          int
	remapPending, remapFailure                   bool
	// strandedMiB is memory the driver holds with no process on the GPU:
	// only a GPU reset frees it (the stuck-memory fault).
	strandedMiB int
	// strandNext, when set, makes the next holder that exits leave its
	// memory on this GPU stranded instead of releasing it.
	strandNext bool
	// persistHeld: nvidia-persistenced does not give this GPU up per GPU
	// (the persistence-held fault; gpureset.go).
	persistHeld bool
	// xidAfterReset, when set, is the XID the GPU reports right after
	// its next reset (the xid-after-reset fault).
	xidAfterReset int
}

// Throttle reason bits of clocks_event_reasons.active [nvml.h
// nvmlClocksEventReason*]: the ones the lab sets.
const (
	throttleSWThermal = 0x20
	throttleHWThermal = 0x40
)

func healthyGPU() gpuHealth {
	return gpuHealth{persistence: true, tempC: 34, powerW: 70, powerLimitW: 700, linkGen: 5, linkGenMax: 5, linkWidth: 16, linkWidthMax: 16}
}

// busID is GPU i's PCI address as nvidia-smi prints it (pci.bus_id).
func busID(i int) string { return fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x20) }

// kernelPCI is GPU i's PCI address as the driver's kernel log lines print it.
func kernelPCI(i int) string { return fmt.Sprintf("0000:%02x:00", 0x18+i*0x20) }

// xidText is what the driver writes after "NVRM: Xid (PCI:...): N, " for the
// XIDs the lab injects: the shape of the r535+ drivers' lines (pid and name
// of the channel's process, then the event's own words).
var xidText = map[int]string{
	13:  "pid=2417, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
	31:  "pid=2417, name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_4c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
	43:  "pid=2417, name=python3, Ch 00000008",
	45:  "pid=2417, name=python3, Ch 00000010",
	48:  "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
	61:  "pid='<unknown>', name=<unknown>, 0cec(2fe4) 00000000 00000000",
	62:  "pid='<unknown>', name=<unknown>, 0000(0000) 00000000 00000000",
	63:  "pid='<unknown>', name=<unknown>, Row Remapper: New row (0x00000000000cad00) marked for remapping, reset gpu to activate.",
	64:  "pid='<unknown>', name=<unknown>, Row Remapper: Failed to record a row remapping in the InfoROM.",
	74:  "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
	79:  "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
	92:  "pid='<unknown>', name=<unknown>, High single-bit ECC error rate",
	94:  "pid=2417, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
	95:  "pid='<unknown>', name=<unknown>, Uncontained: FBHUB. RST: Yes, D-RST: No",
	119: "pid='<unknown>', name=<unknown>, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
	120: "pid='<unknown>', name=<unknown>, GSP task exception: (cause:0x4) ",
}

// InjectedXIDs are the XIDs InjectXID (and the xid fault) know.
func InjectedXIDs() []int {
	return []int{13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}
}

// InjectXID makes GPU g of the node fail as the driver reports XID xid: the
// node's kernel log gets the driver's lines, and the GPU's state changes as
// the event does on real hardware: 48 and 95 count an uncorrected ECC error
// (volatile and aggregate), 94 a contained one with a row marked for
// remapping, 63 marks a row for remapping (pending until a reset). Other XIDs
// (64 included: the InfoROM write failed, the remapper's state is unchanged)
// only log.
func (l *Lab) InjectXID(g, xid int) error {
	if _, ok := xidText[xid]; !ok {
		return fmt.Errorf("inject xid %d: the lab injects %v", xid, InjectedXIDs())
	}
	w := l.w
	w.lock()
	defer w.unlock()
	gg := w.gpuByIndex(g)
	if gg == nil {
		return fmt.Errorf("inject xid %d: the node has no GPU %d", xid, g)
	}
	w.injectXID(gg, xid)
	return nil
}

// FailAfterReset arms GPU g to report XID xid right after its next reset,
// as hardware a reset does not cure does (the xid-after-reset fault).
func (l *Lab) FailAfterReset(g, xid int) error {
	if _, ok := xidText[xid]; !ok {
		return fmt.Errorf("xid %d after a reset: the lab injects %v", xid, InjectedXIDs())
	}
	return l.withGPU(g, func(hw *gpuHealth) { hw.xidAfterReset = xid })
}

// injectXID is InjectXID with w.mu held and xid known.
func (w *world) injectXID(gg *gpu, xid int) {
	g, text := gg.index, xidText[xid]
	hw := &gg.hw
	switch xid {
	case 48, 95:
		hw.eccUncVol++
		hw.eccUncAgg++
	case 94:
		hw.eccUncVol++
		hw.eccUncAgg++
		hw.remapUnc++
		hw.remapPending = true
	case 63:
		hw.remapUnc++
		hw.remapPending = true
	}
	k := w.node.journal
	if xid == 79 {
		k.add("", "kernel", 0, fmt.Sprintf("NVRM: GPU at PCI:%s: %s", kernelPCI(g), gg.uuid))
	}
	k.add("", "kernel", 0, fmt.Sprintf("NVRM: Xid (PCI:%s): %d, %s", kernelPCI(g), xid, text))
}

// DegradeLink makes GPU g's PCIe link train at gen 4 x8 of gen 5 x16.
func (l *Lab) DegradeLink(g int) error {
	return l.withGPU(g, func(hw *gpuHealth) { hw.linkGen, hw.linkWidth = 4, 8 })
}

// Overheat makes GPU g run hot, its clocks slowed by the thermal throttle
// reasons (software and hardware thermal slowdown).
func (l *Lab) Overheat(g int) error {
	return l.withGPU(g, func(hw *gpuHealth) {
		hw.tempC = 92
		hw.throttle |= throttleSWThermal | throttleHWThermal
	})
}

// StrandMemory arms GPU g so that the next process holding memory there
// that exits (once) leaves it held by no process: the driver keeps it until the GPU
// is reset (nvidia-smi --gpu-reset). The stuck-memory fault arms it at start.
func (l *Lab) StrandMemory(g int) error {
	return l.withGPU(g, func(hw *gpuHealth) { hw.strandNext = true })
}

func (l *Lab) withGPU(g int, f func(*gpuHealth)) error {
	l.w.lock()
	defer l.w.unlock()
	gg := l.w.gpuByIndex(g)
	if gg == nil {
		return fmt.Errorf("the node has no GPU %d", g)
	}
	f(&gg.hw)
	return nil
}

// applyGPUFaults applies the hardware faults of the fault list at start.
func (l *Lab) applyGPUFaults() error {
	for _, f := range l.opts.Faults {
		var err error
		switch f.Name {
		case "xid":
			err = l.InjectXID(f.GPU, f.XID)
		case "remap-pending":
			err = l.InjectXID(f.GPU, 63)
		case "pcie-degraded":
			err = l.DegradeLink(f.GPU)
		case "thermal":
			err = l.Overheat(f.GPU)
		case "stuck-memory":
			err = l.StrandMemory(f.GPU)
		case "persistence-held":
			err = l.HoldPersistence(f.GPU)
		case "xid-after-reset":
			err = l.FailAfterReset(f.GPU, f.XID)
		}
		if err != nil {
			return fmt.Errorf("fault %s: %w", f, err)
		}
	}
	return nil
}

// healthField is the value of one --query-gpu health field for g, "" for a
// field that is not a health field.
func healthField(f string, g gpu, nounits bool) string {
	hw := g.hw
	unit := func(v, u string) string {
		if nounits {
			return v
		}
		return v + " " + u
	}
	yes := func(b bool, y, n string) string {
		if b {
			return y
		}
		return n
	}
	switch f {
	case "persistence_mode":
		return yes(hw.persistence, "Enabled", "Disabled")
	case "temperature.gpu":
		return fmt.Sprint(hw.tempC)
	case "power.draw":
		return unit(fmt.Sprintf("%d.%02d", hw.powerW+g.util*6, 17), "W")
	case "power.limit":
		return unit(fmt.Sprintf("%d.00", hw.powerLimitW), "W")
	case "clocks_event_reasons.active", "clocks_throttle_reasons.active":
		return fmt.Sprintf("0x%016X", hw.throttle)
	case "pcie.link.gen.current":
		return fmt.Sprint(hw.linkGen)
	case "pcie.link.gen.max":
		return fmt.Sprint(hw.linkGenMax)
	case "pcie.link.width.current":
		return fmt.Sprint(hw.linkWidth)
	case "pcie.link.width.max":
		return fmt.Sprint(hw.linkWidthMax)
	case "ecc.errors.corrected.volatile.total":
		return fmt.Sprint(hw.eccCorrVol)
	case "ecc.errors.uncorrected.volatile.total":
		return fmt.Sprint(hw.eccUncVol)
	case "ecc.errors.corrected.aggregate.total":
		return fmt.Sprint(hw.eccCorrAgg)
	case "ecc.errors.uncorrected.aggregate.total":
		return fmt.Sprint(hw.eccUncAgg)
	case "retired_pages.pending":
		return "[N/A]" // Hopper remaps rows instead of retiring pages
	case "mig.mode.current":
		return "Disabled"
	}
	return ""
}

// healthHeaderUnit is the unit nvidia-smi's CSV header gives a health field.
var healthHeaderUnit = map[string]string{"power.draw": "W", "power.limit": "W"}

// isHealthField reports the --query-gpu fields healthField answers.
func isHealthField(f string) bool {
	return healthField(f, gpu{}, true) != ""
}

// remappedRowFields are the --query-remapped-rows fields the lab answers.
var remappedRowFields = map[string]bool{"gpu_uuid": true, "gpu_bus_id": true, "remapped_rows.correctable": true,
	"remapped_rows.uncorrectable": true, "remapped_rows.pending": true, "remapped_rows.failure": true}

func remappedRowField(f string, g gpu) string {
	yes := func(b bool) string {
		if b {
			return "Yes"
		}
		return "No"
	}
	switch f {
	case "gpu_uuid":
		return g.uuid
	case "gpu_bus_id":
		return busID(g.index)
	case "remapped_rows.correctable":
		return fmt.Sprint(g.hw.remapCorr)
	case "remapped_rows.uncorrectable":
		return fmt.Sprint(g.hw.remapUnc)
	case "remapped_rows.pending":
		return yes(g.hw.remapPending)
	case "remapped_rows.failure":
		return yes(g.hw.remapFailure)
	}
	return ""
}

// xidFault reports whether the fault name takes XID@GPU.
func xidFault(name string) bool { return name == "xid" || name == "xid-after-reset" }

// parseGPUFault parses the value of a GPU fault: "G" or, for xid, "N@G".
func parseGPUFault(f *Fault, val string) string {
	val = strings.TrimSpace(val)
	if xidFault(f.Name) {
		n, g, ok := strings.Cut(val, "@")
		x, err := atoiStrict(n)
		if !ok || err != nil {
			return "needs XID@GPU, e.g. " + f.Name + "=79@2"
		}
		if _, known := xidText[x]; !known {
			return fmt.Sprintf("the lab injects XIDs %v", InjectedXIDs())
		}
		f.XID = x
		val = g
	}
	i, err := atoiStrict(val)
	if err != nil || i < 0 {
		return "needs a GPU index, e.g. " + f.Name + "=2"
	}
	f.GPU = i
	return ""
}

func atoiStrict(s string) (int, error) {
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s {
		return 0, fmt.Errorf("not a number: %q", s)
	}
	return n, nil
}

// SetRemapFailure records that GPU g's row remapper failed (its spare rows
// are used up), as nvidia-smi's remapped_rows.failure then reports.
func (l *Lab) SetRemapFailure(g int) error {
	return l.withGPU(g, func(hw *gpuHealth) { hw.remapFailure = true })
}
