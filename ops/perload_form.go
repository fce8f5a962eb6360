package ops

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// perLoadProposal is the engine's per-load form of some rows.
type perLoadProposal struct {
	steps          int
	file, fileText string
	table          string
	unit           *UnitChange
	planned        *planned // the unit edit, with the file beside it (its Before read at deploy)
}

// perLoadPlan renders rows in the engine's per-load form and plans the unit
// edit that runs it; the unit edit's refusals (an algorithm or topk SGLang's
// adaptive mode does not run, an odd path) come back as errors.
func (r *Runbook) perLoadPlan(t *target, d *deployed, engine string, rows []PerLoadRow) (*perLoadProposal, error) {
	p := &perLoadProposal{}
	var opts unit.Options
	if engine == "vllm" {
		p.table, p.steps = VLLMBatchTable(rows)
		opts.BatchTable = p.table
	} else {
		p.file, p.fileText = t.cfg.AdaptiveConfig, SGLangAdaptiveConfig(rows)
		p.steps = rows[0].Steps
		opts.AdaptiveConfig = p.file
		opts.MaxRunningRequests = capNeeded(rows)
	}
	pl, err := r.planWith(t, d, p.steps, opts)
	if err != nil {
		return nil, err
	}
	if err := besideUnit(t, d, pl, p.file); err != nil {
		return nil, err
	}
	if p.file != "" {
		pl.files = []FileChange{{Path: p.file, After: p.fileText}}
	}
	p.planned = pl
	e := pl.edit
	p.unit = &UnitChange{Path: pl.path, Before: pl.before, After: pl.after, ArgvBefore: e.ArgvBefore, ArgvAfter: e.ArgvAfter, Diff: e.Diff}
	if pl.path != e.File {
		p.unit.Diff = unit.UnifiedDiff(pl.path, pl.before, pl.after)
	}
	return p, nil
}

// besideUnit refuses a file to write beside the unit (file; "" = none) that
// is one of the unit's own files (the unit, a drop-in, the drop-in the change
// writes) or lies in its drop-in directory: written there, it would replace
// the unit or be read as part of it.
func besideUnit(t *target, d *deployed, pl *planned, file string) error {
	where := ""
	switch {
	case file == "":
		return nil
	case strings.HasPrefix(file, d.mainPath+".d/"):
		where = "lies in " + t.cfg.Unit + "'s drop-in directory " + d.mainPath + ".d"
	case slices.Contains(append([]string{pl.path}, d.order...), file):
		where = "is one of " + t.cfg.Unit + "'s own files"
	default:
		return nil
	}
	return fmt.Errorf("refused: services.%s.adaptive_config %s %s on %s: the adaptive config is a JSON file of its own, and written there it would replace "+
		"or join the unit. Nothing was changed; set services.%s.adaptive_config to a path of its own", t.name, file, where, t.cfg.Host, t.name)
}

// capNeeded is the --max-running-requests a SGLang per-load table needs: the
// largest concurrency when some row above SGLang's cap of 48 (with
// speculation on) keeps speculation on there (steps above 0), else 0. The
// unit edit adds it only when the unit does not set the option itself.
func capNeeded(rows []PerLoadRow) int {
	for _, row := range rows {
		if row.Concurrency > sglangSpecCap && row.Steps > 0 {
			return rows[len(rows)-1].Concurrency
		}
	}
	return 0
}

// raisesCap is the --max-running-requests value a unit change adds (0 when it
// adds none).
func raisesCap(u *UnitChange) int {
	if u == nil || hasFlag(u.ArgvBefore, unit.FlagMaxRunning) {
		return 0
	}
	for i, a := range u.ArgvAfter {
		if v, ok := strings.CutPrefix(a, unit.FlagMaxRunning+"="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
		if a == unit.FlagMaxRunning && i+1 < len(u.ArgvAfter) {
			n, _ := strconv.Atoi(u.ArgvAfter[i+1])
			return n
		}
	}
	return 0
}

// withinCap is rows without those above SGLang's cap of 48: with at most 48
// requests running, their slots are never used.
func withinCap(rows []PerLoadRow) []PerLoadRow {
	var out []PerLoadRow
	for _, row := range rows {
		if row.Concurrency <= sglangSpecCap {
			out = append(out, row)
		}
	}
	return out
}

// SGLangAdaptiveConfig renders rows as SGLang's adaptive config (the format
// of sgl-project/sglang 015c8726, srt/speculative/adaptive_spec_params.py):
// one slot per concurrency, keyed by it as a string, its candidate_steps the
// row's candidates ascending; the engine runs a batch with the slot of the
// largest key not above its (CUDA-graph padded) size. One slot a line, keys
// ascending, a final newline.
func SGLangAdaptiveConfig(rows []PerLoadRow) string {
	var b strings.Builder
	b.WriteString("{\n")
	for i, row := range rows {
		c := slices.Clone(row.Candidates)
		slices.Sort(c)
		fmt.Fprintf(&b, "  %q: {\"candidate_steps\": [%s]}", strconv.Itoa(row.Concurrency), joinInts(c, ", "))
		if i < len(rows)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// vllmTableTop is the largest batch size the last entry of a vLLM table
// covers (a batch no entry covers runs num_speculative_tokens).
const vllmTableTop = 1024

// VLLMBatchTable renders rows as vLLM's num_speculative_tokens_per_batch_size
// (compact JSON, no spaces: [[lo,hi,k],...]): each concurrency's best steps
// from it up to the next concurrency less one, the first from 1, the last up
// to 1024; and num_speculative_tokens, the largest k (vLLM clamps every k to
// it).
func VLLMBatchTable(rows []PerLoadRow) (table string, maxK int) {
	parts := make([]string, len(rows))
	for i, row := range rows {
		lo, hi := row.Concurrency, vllmTableTop
		if i == 0 {
			lo = 1
		}
		if i+1 < len(rows) {
			hi = rows[i+1].Concurrency - 1
		}
		parts[i] = fmt.Sprintf("[%d,%d,%d]", lo, max(hi, lo), row.Steps)
		maxK = max(maxK, row.Steps)
	}
	return "[" + strings.Join(parts, ",") + "]", maxK
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

func hasFlag(argv []string, flag string) bool {
	for _, a := range argv {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// perLoadWords renders rows as mtp per-load's TABLE: "1:7 8:6 32:2 64:2/3"
// (a concurrency, its steps, then its other candidates).
func perLoadWords(rows []PerLoadRow) string {
	parts := make([]string, len(rows))
	for i, row := range rows {
		c := []int{row.Steps}
		for _, n := range row.Candidates {
			if n != row.Steps {
				c = append(c, n)
			}
		}
		parts[i] = fmt.Sprintf("%d:%s", row.Concurrency, joinInts(c, "/"))
	}
	return strings.Join(parts, " ")
}
