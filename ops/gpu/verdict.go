package gpu

import (
	"fmt"
	"slices"
	"time"
)

// Finding is one thing a GPU's health shows, with the verdict it calls for
// and what to do about it.
type Finding struct {
	Verdict Verdict `json:"verdict"`
	What    string  `json:"what"`
	Action  string  `json:"action"`
	Source  string  `json:"source,omitempty"`
	XID     int     `json:"xid,omitempty"` // the XID it is about, 0 for none
}

// JudgeOptions tune Judge.
type JudgeOptions struct {
	Now time.Time
	// Recent is how far back an XID counts toward the verdict (default
	// 24 h); older ones since boot are history.
	Recent time.Duration
	// ClearMiB is the memory below which a GPU with no process counts as
	// empty (default DefaultClearMiB).
	ClearMiB int
}

// slowdowns are the throttle reasons that mean the GPU is held back by
// heat or power delivery (not the ordinary power cap).
var slowdowns = []string{"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}

// Judge gives h's verdict (the worst of its findings; healthy when there is
// none) and its findings, worst first.
func Judge(h Health, o JudgeOptions) (Verdict, []Finding) {
	if o.Recent <= 0 {
		o.Recent = 24 * time.Hour
	}
	if o.ClearMiB <= 0 {
		o.ClearMiB = DefaultClearMiB
	}
	var fs []Finding
	add := func(v Verdict, what, action string) { fs = append(fs, Finding{Verdict: v, What: what, Action: action}) }
	// XIDs in the recent window, one finding per XID.
	type seen struct {
		n    int
		last XIDEvent
	}
	recent := map[int]*seen{}
	var order []int
	for _, e := range h.XIDs {
		if !e.At.IsZero() && o.Now.Sub(e.At) > o.Recent {
			continue
		}
		s := recent[e.XID]
		if s == nil {
			s = &seen{}
			recent[e.XID] = s
			order = append(order, e.XID)
		}
		s.n++
		s.last = e
	}
	for _, x := range order {
		info, _ := XIDTable(x)
		s := recent[x]
		when := "time unknown"
		if !s.last.At.IsZero() {
			when = "last " + s.last.At.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		what := fmt.Sprintf("Xid %d %s (%d in %s, %s): %s", x, info.Name, s.n, hours(o.Recent), when, info.Meaning)
		if info.Software {
			what += " [the software's, not the GPU's]"
		}
		fs = append(fs, Finding{Verdict: info.Verdict, What: what, Action: info.Action, Source: info.Source, XID: x})
	}
	if r := h.Remap.Failure; r != nil && *r {
		add(Replace, "row remapping failed: the GPU cannot fence off its bad memory any more",
			"drain the GPU and replace it (RMA with NVIDIA)")
	}
	if r := h.Remap.Pending; r != nil && *r {
		add(ResetNeeded, "a memory row is marked for remapping: it takes effect at the next GPU reset", "reset the GPU")
	}
	if r := h.RetiredPending; r != nil && *r {
		add(ResetNeeded, "a memory page is pending retirement: it takes effect at the next GPU reset or reboot", "reset the GPU")
	}
	if u := h.ECC.UncorrectedVolatile; u != nil && *u > 0 {
		add(ResetNeeded, fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", *u),
			"reset the GPU (it clears them and applies pending remaps)")
	}
	if l := h.PCIe; l.Width != nil && l.WidthMax != nil && *l.Width < *l.WidthMax {
		add(Degraded, fmt.Sprintf("PCIe link x%d of x%d", *l.Width, *l.WidthMax),
			"reseat the GPU or its riser at the next maintenance; a reboot retrains the link")
	} else if l.Gen != nil && l.GenMax != nil && *l.Gen < *l.GenMax && h.UtilPct != nil && *h.UtilPct > 0 {
		// An idle GPU lowers its link generation to save power: only a busy
		// one below its maximum is degraded.
		add(Degraded, fmt.Sprintf("PCIe link gen %d of gen %d while busy", *l.Gen, *l.GenMax),
			"reseat the GPU or its riser at the next maintenance; a reboot retrains the link")
	}
	var slow []string
	for _, t := range h.Throttle {
		if slices.Contains(slowdowns, t) {
			slow = append(slow, t)
		}
	}
	if len(slow) > 0 {
		what := fmt.Sprintf("clocks slowed: %v", slow)
		if h.TempC != nil {
			what += fmt.Sprintf(" at %d C", *h.TempC)
		}
		add(Degraded, what, "check the node's cooling and power supply")
	}
	if h.UsedMiB != nil && *h.UsedMiB > o.ClearMiB && h.Apps == 0 {
		add(ResetNeeded, fmt.Sprintf("%d MiB held by no process (the driver keeps it)", *h.UsedMiB),
			"reset the GPU: no process holds it, so only a reset frees the memory")
	}
	slices.SortStableFunc(fs, func(a, b Finding) int { return int(b.Verdict) - int(a.Verdict) })
	v := Healthy
	if len(fs) > 0 {
		v = fs[0].Verdict
	}
	return v, fs
}

func hours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return d.String()
}
