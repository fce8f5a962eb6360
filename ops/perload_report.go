package ops

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// queuedNote says how many requests queue at the concurrencies of at above
// SGLang's cap with speculation on (for a unit without
// --max-running-requests), and the flag that lifts it; "" when none does.
func queuedNote(at []int) string {
	var parts []string
	top := 0
	for _, c := range at {
		if c > sglangSpecCap {
			parts = append(parts, fmt.Sprintf("%d of %d at concurrency %d", c-sglangSpecCap, c, c))
			top = max(top, c)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("Requests queued: %s. SGLang runs at most %d requests at once with speculation on; "+
		"--max-running-requests %d in the unit lets them all run, if the GPUs' memory allows it.", strings.Join(parts, ", "), sglangSpecCap, top)
}

// Brief is the measured gains in one line: "over the best single setting /
// over no speculation: 1: +17.0% / +238.6%, 8: ...".
func (p *PerLoad) Brief() string {
	parts := make([]string, len(p.Rows))
	for i, row := range p.Rows {
		parts[i] = fmt.Sprintf("%d: %s / %s", row.Concurrency, pctOr(row.GainPct), pctOr(row.NoSpecGainPct))
	}
	return "gain over the best single setting / over no speculation at " + strings.Join(parts, ", ")
}

// pctOr is a gain in percent, or "—" when it is unknown.
func pctOr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%+.1f%%", *v)
}

// tokOr is a tok/s figure, or "—" when it is unknown.
func tokOr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f", *v)
}

// Report is the proposal for the result block: the table per concurrency
// (what ran there and what it measured, beside the steps value alone, the
// best single setting and no speculation), the unit's diff and the file.
func (p *PerLoad) Report() []string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s  %-12s  %9s  %10s  %6s  %11s  %-22s  %7s  %9s  %7s\n", "concurrency", "steps", "tok/s", "accept len", "rate",
		"steps alone", "best single (steps "+strconv.Itoa(p.Single)+")", "gain", "no spec", "gain")
	for _, row := range p.Rows {
		steps := strconv.Itoa(row.Steps)
		if len(row.Candidates) > 1 {
			c := slices.Clone(row.Candidates)
			slices.Sort(c)
			steps += " (" + joinInts(c, ",") + ")"
		}
		if row.Slot != 0 {
			steps = fmt.Sprintf("slot %d: %s", row.Slot, steps)
		}
		al, rate, alone := "—", "—", "—"
		if row.StepsTokS > 0 {
			alone = fmt.Sprintf("%.1f", row.StepsTokS)
		}
		if row.AcceptLen > 0 {
			al = fmt.Sprintf("%.2f", row.AcceptLen)
		}
		if !math.IsNaN(row.AcceptRate) && (row.AcceptRate > 0 || (row.AcceptLen == 1 && len(row.Candidates) == 1 && row.Steps > 0)) {
			rate = fmt.Sprintf("%.0f%%", 100*row.AcceptRate) // per load the drafts per step vary: unknown unless measured
		}
		fmt.Fprintf(&b, "%-11d  %-12s  %9s  %10s  %6s  %11s  %22s  %7s  %9s  %7s\n", row.Concurrency, steps, tokOr(row.OutputTokS), al, rate,
			alone, tokOr(row.SingleTokS), pctOr(row.GainPct), tokOr(row.NoSpecTokS), pctOr(row.NoSpecGainPct))
	}
	out := []string{strings.TrimRight(b.String(), "\n")}
	var queued []int
	for _, row := range p.Rows {
		if row.Queued > 0 {
			queued = append(queued, row.Concurrency)
		}
	}
	if note := queuedNote(queued); note != "" && len(p.Dropped) == 0 {
		out = append(out, note)
	}
	if n := raisesCap(p.Unit); n > 0 {
		out = append(out, fmt.Sprintf("The proposal raises the cap: %s %d (in the unit's diff); the tune started it so and measured it.", unit.FlagMaxRunning, n))
	}
	if p.Unit != nil && p.Unit.Diff != "" {
		out = append(out, p.Unit.Diff)
	}
	if p.Unit != nil {
		out = append(out, filesText(p.Unit.Files)...)
	}
	if p.Table != "" {
		out = append(out, "--speculative-config gets num_speculative_tokens_per_batch_size "+p.Table)
	}
	return out
}
