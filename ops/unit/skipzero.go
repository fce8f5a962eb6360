package unit

import "strings"

// skipZeroLine is the Environment= line an edit writes for
// Options.SkipZeroDraftExtend (and the only one it removes).
const skipZeroLine = "Environment=" + EnvSkipZeroDraftExtend + "=1"

// skipZeroSplices are the splices of the engine's file that make the unit's
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND on (insert skipZeroLine above the
// engine's ExecStart= unless it is on already) or off (remove each
// skipZeroLine of that file), and the change they make.
func (eff *Effective) skipZeroSplices(on bool) ([]splice, []Change) {
	u := eff.Engine.Unit
	v, _ := eff.EnvValue(EnvSkipZeroDraftExtend)
	was := envBool(v)
	if on {
		if was {
			return nil, nil
		}
		at := strings.LastIndexByte(u.Text[:eff.Engine.Entry.Span.Start], '\n') + 1
		return []splice{{Span: Span{Start: at, End: at}, Text: skipZeroLine + "\n"}}, []Change{{Flag: EnvSkipZeroDraftExtend, From: v, To: "1"}}
	}
	var out []splice
	for _, en := range u.Entries {
		if en.Section != "Service" || u.Text[en.Span.Start:en.Span.End] != skipZeroLine {
			continue
		}
		start := strings.LastIndexByte(u.Text[:en.Span.Start], '\n') + 1
		end := en.Span.End
		if end < len(u.Text) && u.Text[end] == '\n' {
			end++
		}
		if strings.TrimSpace(u.Text[start:en.Span.Start]) != "" {
			continue
		}
		out = append(out, splice{Span: Span{Start: start, End: end}})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, []Change{{Flag: EnvSkipZeroDraftExtend, From: v, To: ""}}
}
