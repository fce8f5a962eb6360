package report

import (
	"fmt"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// SettingsKey renders a result's settings as the canonical key results are
// compared by ("steps=10,topk=1,draft=11"); per-load speculation adds its
// form, so a per-load run is compared only with runs of the same one:
// ",adaptive=sha256:..." (SGLang's file by its contents, ops.AdaptiveTableID;
// its path when the contents were not read, "default" for SGLang's own
// table), then ",skip_zero_extend" when the unit sets
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND, or ",table=[[1,1,10],...]"
// (vLLM's).
func SettingsKey(s *ops.Spec) string {
	if s == nil {
		return ""
	}
	k := fmt.Sprintf("steps=%d,topk=%d,draft=%d", s.Steps, s.TopK, s.DraftTokens)
	switch {
	case s.AdaptiveTable != "":
		k += ",adaptive=" + s.AdaptiveTable
	case s.Adaptive != "":
		k += ",adaptive=" + s.Adaptive
	}
	if s.SkipZeroDraftExtend {
		k += ",skip_zero_extend"
	}
	if s.BatchTable != "" {
		k += ",table=" + s.BatchTable
	}
	return k
}

// LoadOf returns the load a benchmark ran under, from its settings.
func LoadOf(f *ops.BenchResult) store.Load {
	s := f.Settings
	l := store.Load{Prompts: s.Prompts, Concurrency: s.Concurrency, InputLen: s.InputLen, OutputLen: s.OutputLen}
	if l.Concurrency == 0 {
		l.Concurrency = f.Concurrency
	}
	return l
}

// ResultSource names what produced a stored benchmark result: its job
// ("#12"), or "opsbot bench" for a result of the command line tool, which
// runs no job.
func ResultSource(r store.BenchResult) string {
	if r.JobID == 0 {
		return "opsbot bench"
	}
	return fmt.Sprintf("#%d", r.JobID)
}

// CompareLine puts a benchmark result beside an earlier one at the same
// load: tok/s and accept length ("—" where not measured), and the change in
// tok/s.
func CompareLine(label string, prev store.BenchResult, cur *ops.BenchResult) string {
	tok := func(v float64) string { return cell(v, ops.Known(v), "%.1f") }
	al := func(v float64) string { return cell(v, ops.KnownAcceptLen(v), "%.2f") }
	return fmt.Sprintf("%s (%s, %s): %s → %s tok/s (%s), accept len %s → %s",
		label, ResultSource(prev), Stamp(prev.At), tok(prev.OutputTokS), tok(cur.OutputTokS),
		pctChange(prev.OutputTokS, cur.OutputTokS), al(prev.AcceptLen), al(cur.AcceptLen))
}
