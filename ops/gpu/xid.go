package gpu

import "fmt"

// Verdict is what a GPU's health calls for, worst last. Its words are what
// `gpu health` shows and the JSON "verdict" of a GPU.
type Verdict int

// Verdicts, from best to worst.
const (
	Healthy Verdict = iota
	Degraded
	ResetNeeded
	RebootNeeded
	Replace
)

func (v Verdict) String() string {
	return [...]string{"healthy", "degraded", "reset needed", "reboot needed", "hardware: replace"}[v]
}

// MarshalText writes the verdict's words.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// XIDInfo is what one XID means and what to do about it.
type XIDInfo struct {
	XID     int
	Name    string
	Meaning string
	// Software is true for the XIDs NVIDIA attributes to the application
	// (the engine), not to the GPU: its verdict stays healthy.
	Software bool
	Verdict  Verdict // what a recent one calls for
	Action   string
	Source   string // where the meaning and the action were taken from
}

// Sources of the XID table.
const (
	srcXid     = "NVIDIA, Xid Errors (docs.nvidia.com/deploy/xid-errors/index.html)"
	srcCatalog = "NVIDIA, Analyzing Xid Errors with the Xid Catalog, resolution buckets (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)"
	srcDebug   = "NVIDIA, GPU Debug Guidelines, Xid messages (docs.nvidia.com/deploy/gpu-debug-guidelines/index.html#xid-messages)"
	srcMemErr  = "NVIDIA, GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html)"
)

// xids are the common XIDs of inference hosts. An XID not listed is shown
// with its number and the driver's text, verdict degraded, pointing at the
// catalog.
var xids = map[int]XIDInfo{
	13: {Name: "Graphics Engine Exception", Software: true, Verdict: Healthy, Source: srcXid + "; " + srcCatalog,
		Meaning: "the engine's kernel faulted (out-of-range address, illegal instruction): almost always the application",
		Action:  "restart the service; if it recurs with no software change, run DCGM diagnostics (dcgmi diag -r 3)"},
	31: {Name: "GPU memory page fault (MMU fault)", Software: true, Verdict: Healthy, Source: srcXid + "; " + srcDebug,
		Meaning: "the application touched an address it does not own: an engine bug, rarely the driver",
		Action:  "restart the service and check the engine's log; debug with compute-sanitizer if it recurs"},
	43: {Name: "GPU stopped processing (reset channel verification error)", Software: true, Verdict: Healthy, Source: srcXid + "; " + srcCatalog,
		Meaning: "the application hit a software-induced fault and its channel was stopped; the GPU is fine",
		Action:  "restart the service"},
	45: {Name: "Preemptive cleanup, due to previous errors", Software: true, Verdict: Healthy, Source: srcXid + "; " + srcDebug,
		Meaning: "the driver ended a process's channels (it was killed, or another error came first): informational",
		Action:  "nothing by itself; look at the XID before it"},
	48: {Name: "Double bit ECC error (DBE)", Verdict: ResetNeeded, Source: srcXid + "; " + srcDebug,
		Meaning: "an uncorrectable memory error; the application saw it too",
		Action:  "reset the GPU (or reboot); if no XID 63/64 follows, run field diagnostics"},
	61: {Name: "Internal micro-controller breakpoint/warning", Verdict: ResetNeeded, Source: srcXid + "; " + srcDebug,
		Meaning: "the GPU's internal micro-controller stopped at a breakpoint; GPU engines stop working",
		Action:  "reset the GPU; report it to NVIDIA support if it recurs"},
	62: {Name: "Internal micro-controller halt", Verdict: ResetNeeded, Source: srcXid + "; " + srcDebug,
		Meaning: "the GPU's internal micro-controller halted (hardware, driver or thermal cause)",
		Action:  "reset the GPU; report it to NVIDIA support if it recurs"},
	63: {Name: "ECC page retirement or row remapping recording event", Verdict: Degraded, Source: srcXid + "; " + srcMemErr,
		Meaning: "a bad memory row was recorded for remapping (in the InfoROM); it takes effect at the next GPU reset",
		Action:  "reset the GPU when convenient so the remap takes effect"},
	64: {Name: "ECC page retirement or row remapper recording failure", Verdict: RebootNeeded, Source: srcXid + "; " + srcMemErr,
		Meaning: "recording a row remap failed: the memory error cannot be fenced off",
		Action:  "reboot the node now; if it recurs, drain the GPU and report it to NVIDIA (RMA)"},
	74: {Name: "NVLink error", Verdict: ResetNeeded, Source: srcXid + "; " + srcCatalog,
		Meaning: "a link to another GPU or NVSwitch failed (or the GPU at its other end did)",
		Action:  "reset the GPU (or reboot); if it recurs, check the link's mechanics and the peer GPU"},
	79: {Name: "GPU has fallen off the bus", Verdict: RebootNeeded, Source: srcXid + "; " + srcCatalog,
		Meaning: "the driver can no longer reach the GPU over PCIe; no reset reaches it",
		Action:  "reboot the node; if it recurs, check PCIe seating, risers and power, then replace the GPU"},
	92: {Name: "High single-bit ECC error rate", Verdict: Degraded, Source: srcXid + "; " + srcDebug,
		Meaning: "corrected memory errors come often: the memory may be wearing",
		Action:  "watch the aggregate ECC counters; run field diagnostics at the next maintenance"},
	94: {Name: "Contained ECC error", Verdict: Degraded, Source: srcXid + "; " + srcMemErr,
		Meaning: "an uncorrectable memory error was contained to one application, which must restart; others run on",
		Action:  "restart the service; reset the GPU when convenient (a row remap is pending)"},
	95: {Name: "Uncontained ECC error", Verdict: ResetNeeded, Source: srcXid + "; " + srcMemErr,
		Meaning: "an uncorrectable memory error that could not be contained: every application on the GPU is affected",
		Action:  "reset the GPU before the service starts again (reboot if MIG is off and a reset fails)"},
	119: {Name: "GSP RPC timeout", Verdict: ResetNeeded, Source: srcXid + "; " + srcCatalog,
		Meaning: "the GPU System Processor did not answer the driver",
		Action:  "reset the GPU; power-cycle the node if it recurs"},
	120: {Name: "GSP error", Verdict: ResetNeeded, Source: srcXid + "; " + srcCatalog,
		Meaning: "the GPU System Processor reported an error",
		Action:  "reset the GPU; power-cycle the node if it recurs"},
}

// XIDTable returns what xid means; known is false for an XID the table
// does not list (then Info says where to look).
func XIDTable(xid int) (info XIDInfo, known bool) {
	if i, ok := xids[xid]; ok {
		i.XID = xid
		return i, true
	}
	return XIDInfo{XID: xid, Name: fmt.Sprintf("Xid %d", xid), Verdict: Degraded, Source: srcCatalog,
		Meaning: "not in opsbot's table of common XIDs",
		Action:  "look it up in NVIDIA's Xid catalog"}, false
}

// DefaultPagingXIDs are the XIDs the watchdog alerts on by default: those
// whose verdict is a reset or worse, and the ECC events (63, 92, 94) that
// tell of failing memory.
var DefaultPagingXIDs = []int{48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}
