package ops

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/opsbot/opsbot/ops/bench"
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

// Brief is the proposal in one line: "1: steps 10, 8: steps 7, ...".
func (p *PerLoad) Brief() string {
	parts := make([]string, len(p.Rows))
	for i, row := range p.Rows {
		parts[i] = fmt.Sprintf("%d: steps %d (%+.1f%%)", row.Concurrency, row.Steps, row.GainPct)
	}
	return strings.Join(parts, ", ")
}

// Report is the proposal for the result block: the table per concurrency,
// the gain against the best single setting, the unit's diff and the file.
func (p *PerLoad) Report() []string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s  %-10s  %9s  %10s  %6s  %-22s  %s\n", "concurrency", "steps", "tok/s", "accept len", "rate", "best single (steps "+strconv.Itoa(p.Single)+")", "gain")
	unknown := false
	for _, row := range p.Rows {
		steps := strconv.Itoa(row.Steps)
		if len(row.Candidates) > 1 {
			c := slices.Clone(row.Candidates)
			slices.Sort(c)
			steps += " (" + joinInts(c, ",") + ")"
		}
		al, rate := bench.Dash, bench.Dash
		if bench.KnownAcceptLen(row.AcceptLen) {
			al = fmt.Sprintf("%.2f", row.AcceptLen)
			if bench.Known(row.AcceptRate) {
				rate = fmt.Sprintf("%.0f%%", 100*row.AcceptRate)
			}
		}
		unknown = unknown || al == bench.Dash || rate == bench.Dash
		single, gain := figureText(row.SingleTokS, "%.1f"), bench.Dash
		if bench.Known(row.SingleTokS) && row.SingleTokS > 0 {
			gain = fmt.Sprintf("%+.1f%%", row.GainPct)
		}
		fmt.Fprintf(&b, "%-11d  %-10s  %9s  %10s  %6s  %22s  %s\n", row.Concurrency, steps, figureText(row.OutputTokS, "%.1f"), al, rate, single, gain)
	}
	if unknown {
		fmt.Fprintf(&b, "%s: not measured (the tables below say why, once per cause)\n", bench.Dash)
	}
	out := []string{strings.TrimRight(b.String(), "\n")}
	var queued []int
	for _, row := range p.Rows {
		if row.Queued > 0 {
			queued = append(queued, row.Concurrency)
		}
	}
	if note := queuedNote(queued); note != "" {
		out = append(out, note)
	}
	if n := raisesCap(p.Unit); n > 0 {
		out = append(out, fmt.Sprintf("The proposal raises the cap: %s %d (in the unit's diff). Its CUDA graphs grow with it: if they do not fit "+
			"in GPU memory the apply rolls back and gives the command without it.", unit.FlagMaxRunning, n))
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
