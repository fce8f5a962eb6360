package ops

import (
	"fmt"
	"strings"
)

// Decision is the first lines of a per-load proposal's report: the command
// that applies it and what it is, then at each concurrency what the tune
// measured with it running and its gain over the best single setting and
// over no speculation, then what was dropped on the way and the other
// configurations compared. Unknown figures read "—" with the reason.
func (p *PerLoad) Decision() []string {
	what := "vLLM's per-batch table in --speculative-config"
	if p.Engine != "vllm" {
		what = "SGLang's adaptive config at " + orText(p.File, "services.NAME.adaptive_config") + " and the unit's flags"
	}
	if n := raisesCap(p.Unit); n > 0 {
		what += fmt.Sprintf(", with --max-running-requests %d", n)
	}
	first := fmt.Sprintf("Apply: `%s` (%s). This tune started it and measured it at every concurrency", p.Apply, what)
	switch {
	case len(p.Missed) > 0:
		first += fmt.Sprintf("; it misses the goal: more than %.0f%% below what would run otherwise at %s", 100*perLoadGoal, missText(p.Missed))
	case p.Mixed:
		first += fmt.Sprintf("; it is compare's mix, within %.0f%% of what would run otherwise at every load", 100*perLoadGoal)
	}
	out := []string{first + ":"}
	single := "the best single setting, " + StepsText(p.Single)
	for _, row := range p.Rows {
		line := fmt.Sprintf("concurrency %d: ", row.Concurrency)
		if row.OutputTokS == nil {
			line += "— (" + orText(row.MeasureError, "not measured") + ")"
		} else {
			line += fmt.Sprintf("%.1f tok/s; %s over %s (%s); %s over no speculation (%s)", *row.OutputTokS,
				pctOr(row.GainPct), single, tokOr(row.SingleTokS), pctOr(row.NoSpecGainPct), tokOr(row.NoSpecTokS))
		}
		if row.Slot != 0 {
			line += fmt.Sprintf("; the slot at %d serves it", row.Slot)
		}
		if row.Queued > 0 {
			line += fmt.Sprintf("; %d of %d requests queued", row.Queued, row.Concurrency)
		}
		out = append(out, line)
	}
	if n := p.belowNoSpec(); n != "" {
		out = append(out, n)
	}
	if p.Mix != "" {
		out = append(out, p.Mix)
	}
	for _, d := range p.Dropped {
		line := fmt.Sprintf("Not proposed: `%s` did not serve when started: %s; rolled back", d.Table, d.Reason)
		if d.Change != "" {
			line += "; the next try dropped " + d.Change
		}
		out = append(out, line+".")
	}
	for _, c := range p.Compared {
		if c.Name != "no_speculation" && c.Name != "best_single" {
			out = append(out, p.comparedLine(c))
		}
	}
	return out
}

// comparedLine is a compared configuration at each concurrency, with the
// proposal's gain over it.
func (p *PerLoad) comparedLine(c PerLoadCompared) string {
	parts := make([]string, 0, len(c.Points))
	for i, pt := range c.Points {
		if pt.OutputTokS == nil {
			parts = append(parts, fmt.Sprintf("%d: — (%s)", pt.Concurrency, orText(pt.Error, "not measured")))
			continue
		}
		part := fmt.Sprintf("%d: %.1f tok/s", pt.Concurrency, *pt.OutputTokS)
		if i < len(p.Rows) && p.Rows[i].Concurrency == pt.Concurrency {
			part += fmt.Sprintf(" (the proposal %s)", pctOr(gainPct(p.Rows[i].OutputTokS, pt.OutputTokS)))
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("Compared, at the same concurrencies: %s: %s.", c.Setting, strings.Join(parts, ", "))
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// belowNoSpec says where the proposal measured below no speculation by more
// than PerLoadNoise, and what serves those loads faster; "" when nowhere.
func (p *PerLoad) belowNoSpec() string {
	var at []string
	for _, row := range p.Rows {
		if g := row.NoSpecGainPct; g != nil && *g < -100*PerLoadNoise {
			at = append(at, fmt.Sprintf("%d (%+.1f%%)", row.Concurrency, *g))
		}
	}
	if len(at) == 0 {
		return ""
	}
	why := "as measured with the per-batch table running"
	switch {
	case p.Engine == "vllm":
	case p.SkipZeroDraftExtend:
		why = "SGLang's cap of 48 running requests applies unless raised, and a stream drafting again after a step 0 starts from a cold draft state"
	default:
		why = "SGLang's adaptive step 0 still runs the draft model over each token to keep its KV cache up to date, and its cap of 48 running requests applies unless raised"
	}
	return fmt.Sprintf("Below no speculation at concurrency %s: %s. Where those loads dominate, no speculative decoding serves them faster (`mtp steps 0` applies it, for every load).",
		strings.Join(at, ", "), why)
}
