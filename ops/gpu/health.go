package gpu

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Health is one GPU's health as the host that owns it reports it. Figures
// nvidia-smi could not read are nil (JSON null), never 0.
type Health struct {
	Index       int      `json:"index"`
	UUID        string   `json:"uuid"`
	BusID       string   `json:"bus_id"`
	Persistence *bool    `json:"persistence"`
	MIG         *bool    `json:"mig"`
	TempC       *int     `json:"temperature_c"`
	PowerW      *float64 `json:"power_w"`
	PowerLimitW *float64 `json:"power_limit_w"`
	UtilPct     *int     `json:"utilization_pct"`
	UsedMiB     *int     `json:"memory_used_mib"`
	// Throttle are the active clock event (throttle) reasons by name; nil
	// when unknown.
	Throttle []string `json:"throttle"`
	PCIe     Link     `json:"pcie"`
	ECC      ECC      `json:"ecc"`
	// RetiredPending is a page retirement pending a reset (GPUs before
	// Ampere); nil where the GPU remaps rows instead.
	RetiredPending *bool `json:"retired_pages_pending"`
	Remap          Remap `json:"remapped_rows"`
	// XIDs are the driver's Xid events for this GPU since boot, oldest first.
	XIDs []XIDEvent `json:"xids"`
	// Apps counts the compute processes nvidia-smi lists on it (-1: unknown).
	Apps int `json:"apps"`
}

// Link is the PCIe link: current against maximum.
type Link struct {
	Gen      *int `json:"gen"`
	GenMax   *int `json:"gen_max"`
	Width    *int `json:"width"`
	WidthMax *int `json:"width_max"`
}

// ECC are the ECC error counters: volatile since the last driver load or
// reset, aggregate over the GPU's life.
type ECC struct {
	CorrectedVolatile    *int `json:"corrected_volatile"`
	UncorrectedVolatile  *int `json:"uncorrected_volatile"`
	CorrectedAggregate   *int `json:"corrected_aggregate"`
	UncorrectedAggregate *int `json:"uncorrected_aggregate"`
}

// Remap is the row remapper's state (Ampere and later).
type Remap struct {
	Correctable   *int  `json:"correctable"`
	Uncorrectable *int  `json:"uncorrectable"`
	Pending       *bool `json:"pending"`
	Failure       *bool `json:"failure"`
}

// XIDEvent is one `NVRM: Xid` line of the kernel log.
type XIDEvent struct {
	At   time.Time `json:"at"` // zero when the line had no time stamp
	XID  int       `json:"xid"`
	PCI  string    `json:"pci"`  // as the driver wrote it, e.g. 0000:18:00
	Text string    `json:"text"` // the driver's words after the number
}

// healthFields are the --query-gpu fields HealthArgv asks for, in order
// (names as `nvidia-smi --help-query-gpu` lists them, driver r535 and later;
// clocks_event_reasons is clocks_throttle_reasons on older drivers).
var healthFields = []string{"index", "uuid", "pci.bus_id", "persistence_mode", "mig.mode.current", "temperature.gpu",
	"power.draw", "power.limit", "utilization.gpu", "memory.used", "clocks_event_reasons.active",
	"pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
	"ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
	"ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total", "retired_pages.pending"}

// Argv of the health reads.
var (
	HealthArgv = []string{"nvidia-smi", "--query-gpu=" + strings.Join(healthFields, ","), "--format=csv,noheader,nounits"}
	// HealthArgvOld is HealthArgv for drivers before r535, which name the
	// throttle reasons clocks_throttle_reasons.
	HealthArgvOld = []string{"nvidia-smi", "--query-gpu=" + strings.ReplaceAll(strings.Join(healthFields, ","), "clocks_event_reasons", "clocks_throttle_reasons"), "--format=csv,noheader,nounits"}
	RemapArgv     = []string{"nvidia-smi", "--query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure", "--format=csv,noheader,nounits"}
	KernelLogArgv = []string{"journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q"}
	// DmesgArgv reads the kernel ring buffer where there is no journal.
	DmesgArgv = []string{"dmesg", "--time-format", "iso"}
)

// throttleNames are the clocks_event_reasons bits [nvml.h
// nvmlClocksEventReason*]; idle and application clocks are no slowdown.
var throttleNames = []struct {
	bit  uint64
	name string
}{{0x4, "sw_power_cap"}, {0x8, "hw_slowdown"}, {0x10, "sync_boost"}, {0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"}, {0x80, "hw_power_brake_slowdown"}}

// ParseHealth parses HealthArgv's output: one row per GPU, fields in
// healthFields' order. Unknown values ([N/A], [Not Supported]) are nil.
func ParseHealth(out []byte) ([]Health, error) {
	const what = "nvidia-smi --query-gpu (health)"
	var hs []Health
	err := lines(out, func(n int, line string) error {
		f := fields(line)
		if strings.EqualFold(f[0], "index") {
			return nil
		}
		if len(f) != len(healthFields) {
			return &ParseError{What: what, Line: n, Text: line, Msg: fmt.Sprintf("want %d fields, got %d", len(healthFields), len(f))}
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return &ParseError{What: what, Line: n, Text: line, Msg: "GPU index is not a number"}
		}
		h := Health{Index: idx, BusID: f[2], Apps: -1}
		if h.UUID, err = uuidField(f[1]); err != nil {
			return &ParseError{What: what, Line: n, Text: line, Msg: err.Error()}
		}
		var bad string
		num := func(v string) *int {
			if unknownValue(v) {
				return nil
			}
			i, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(v, "MiB"), "%")))
			if err != nil {
				bad = fmt.Sprintf("%q is not a number", truncate(v))
				return nil
			}
			return &i
		}
		flt := func(v string) *float64 {
			if unknownValue(v) {
				return nil
			}
			x, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(v, "W")), 64)
			if err != nil {
				bad = fmt.Sprintf("%q is not a number", truncate(v))
				return nil
			}
			return &x
		}
		h.Persistence, h.MIG = onOff(f[3]), onOff(f[4])
		h.TempC, h.PowerW, h.PowerLimitW, h.UtilPct, h.UsedMiB = num(f[5]), flt(f[6]), flt(f[7]), num(f[8]), num(f[9])
		if !unknownValue(f[10]) {
			mask, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(f[10]), "0x"), 16, 64)
			if err != nil {
				bad = fmt.Sprintf("throttle reasons %q are not a hex mask", truncate(f[10]))
			}
			h.Throttle = []string{}
			for _, t := range throttleNames {
				if mask&t.bit != 0 {
					h.Throttle = append(h.Throttle, t.name)
				}
			}
		}
		h.PCIe = Link{Gen: num(f[11]), GenMax: num(f[12]), Width: num(f[13]), WidthMax: num(f[14])}
		h.ECC = ECC{CorrectedVolatile: num(f[15]), UncorrectedVolatile: num(f[16]), CorrectedAggregate: num(f[17]), UncorrectedAggregate: num(f[18])}
		h.RetiredPending = yesNo(f[19])
		if bad != "" {
			return &ParseError{What: what, Line: n, Text: line, Msg: bad}
		}
		hs = append(hs, h)
		return nil
	})
	return hs, err
}

// ParseRemap parses RemapArgv's output into h (joined on the GPU's UUID).
func ParseRemap(out []byte, hs []Health) error {
	const what = "nvidia-smi --query-remapped-rows"
	return lines(out, func(n int, line string) error {
		f := fields(line)
		if strings.EqualFold(f[0], "gpu_uuid") {
			return nil
		}
		if len(f) != 5 {
			return &ParseError{What: what, Line: n, Text: line, Msg: "want gpu_uuid and 4 remapped_rows fields"}
		}
		for i := range hs {
			if hs[i].UUID != "" && hs[i].UUID == f[0] {
				var r Remap
				if !unknownValue(f[1]) {
					if v, err := strconv.Atoi(f[1]); err == nil {
						r.Correctable = &v
					}
				}
				if !unknownValue(f[2]) {
					if v, err := strconv.Atoi(f[2]); err == nil {
						r.Uncorrectable = &v
					}
				}
				r.Pending, r.Failure = yesNo(f[3]), yesNo(f[4])
				hs[i].Remap = r
			}
		}
		return nil
	})
}

func onOff(v string) *bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "enabled", "on":
		t := true
		return &t
	case "disabled", "off":
		f := false
		return &f
	}
	return nil
}

// yesNo reads a yes/no field: "Yes"/"No" as the CSV prints the remapper's
// flags, or a count ("0", "1") as NVML holds them.
func yesNo(v string) *bool {
	v = strings.ToLower(strings.TrimSpace(v))
	switch v {
	case "yes", "true":
		t := true
		return &t
	case "no", "false":
		f := false
		return &f
	}
	if n, err := strconv.Atoi(v); err == nil {
		b := n > 0
		return &b
	}
	return nil
}

// xidLine matches the driver's Xid line; older drivers leave out "PCI:".
var xidLine = regexp.MustCompile(`NVRM: Xid \((?:PCI:)?([0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)(?:\.[0-9a-fA-F])?\): (\d+), ?(.*)$`)

// ParseXIDs finds the `NVRM: Xid` lines of a kernel log read with
// KernelLogArgv (journalctl -o short-iso: "2024-05-18T19:02:39+0000 host
// kernel: NVRM: Xid (PCI:0000:2b:00): 79, ...") or DmesgArgv (dmesg
// --time-format iso: "2024-05-18T19:02:39,123456+00:00 NVRM: Xid ..."). A line
// whose time stamp does not parse keeps a zero At. Other lines are skipped.
func ParseXIDs(out []byte) []XIDEvent {
	var evs []XIDEvent
	_ = lines(out, func(_ int, line string) error {
		m := xidLine.FindStringSubmatch(line)
		if m == nil {
			return nil
		}
		x, err := strconv.Atoi(m[2])
		if err != nil {
			return nil
		}
		ev := XIDEvent{XID: x, PCI: strings.ToLower(m[1]), Text: strings.TrimSpace(m[3])}
		if sp := strings.IndexByte(line, ' '); sp > 0 {
			ev.At = logTime(line[:sp])
		}
		evs = append(evs, ev)
		return nil
	})
	return evs
}

func logTime(s string) time.Time {
	s = strings.Replace(s, ",", ".", 1)
	for _, l := range []string{"2006-01-02T15:04:05-0700", "2006-01-02T15:04:05.999999999-0700", "2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05Z07:00"} {
		if t, err := time.Parse(l, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// pciKey normalises a PCI address ("00000000:18:00.0" from nvidia-smi,
// "0000:18:00" from the driver) to domain:bus:device in lower-case hex
// without leading zeros.
func pciKey(a string) string {
	a, _, _ = strings.Cut(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(a)), "pci:"), ".")
	parts := strings.Split(a, ":")
	if len(parts) != 3 {
		return a
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 16, 32)
		if err != nil {
			return a
		}
		parts[i] = strconv.FormatUint(n, 16)
	}
	return strings.Join(parts, ":")
}

// AttachXIDs gives each GPU the events of its PCI address.
func AttachXIDs(hs []Health, evs []XIDEvent) {
	for i := range hs {
		k := pciKey(hs[i].BusID)
		hs[i].XIDs = []XIDEvent{}
		for _, e := range evs {
			if pciKey(e.PCI) == k {
				hs[i].XIDs = append(hs[i].XIDs, e)
			}
		}
	}
}

// ReadHealth reads every GPU's health on r, the host that owns the GPUs (the
// Proxmox node for a container): nvidia-smi's health fields (falling back to
// the pre-r535 field names), the row remapper (unknown where the GPU has
// none), the compute apps, and the driver's Xid lines of the kernel log since
// boot (journalctl -k; dmesg where there is no journal). The kernel log
// failing leaves XIDs nil (unknown) and says so in logErr.
func ReadHealth(ctx context.Context, r Runner) (hs []Health, logErr error, err error) {
	out, err := r.Run(ctx, nil, HealthArgv...)
	if err == nil && out.ExitStatus != 0 && strings.Contains(string(out.Stdout), "is not a valid field") {
		out, err = r.Run(ctx, nil, HealthArgvOld...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read GPU health: %w", err)
	}
	if out.ExitStatus != 0 || out.Signal != "" {
		return nil, nil, fmt.Errorf("read GPU health: %w", commandError(HealthArgv, out))
	}
	if hs, err = ParseHealth(out.Stdout); err != nil {
		return nil, nil, fmt.Errorf("read GPU health: %w", err)
	}
	if out, err := r.Run(ctx, nil, RemapArgv...); err == nil && out.ExitStatus == 0 {
		if err := ParseRemap(out.Stdout, hs); err != nil {
			return nil, nil, fmt.Errorf("read GPU health: %w", err)
		}
	}
	if apps, err := ComputeApps(ctx, r); err == nil {
		for i := range hs {
			hs[i].Apps = 0
			for _, a := range apps {
				if a.GPUUUID == hs[i].UUID {
					hs[i].Apps++
				}
			}
		}
	}
	evs, logErr := readKernelLog(ctx, r)
	if logErr == nil {
		AttachXIDs(hs, evs)
	}
	return hs, logErr, nil
}

func readKernelLog(ctx context.Context, r Runner) ([]XIDEvent, error) {
	out, err := r.Run(ctx, nil, KernelLogArgv...)
	if err != nil {
		return nil, fmt.Errorf("read the kernel log: %w", err)
	}
	if out.ExitStatus == 0 && out.Signal == "" {
		return ParseXIDs(out.Stdout), nil
	}
	jerr := commandError(KernelLogArgv, out)
	out, err = r.Run(ctx, nil, DmesgArgv...)
	if err != nil {
		return nil, fmt.Errorf("read the kernel log: %w", err)
	}
	if out.ExitStatus != 0 || out.Signal != "" {
		return nil, fmt.Errorf("read the kernel log: %v; %w", jerr, commandError(DmesgArgv, out))
	}
	return ParseXIDs(out.Stdout), nil
}
