package ops

import (
	"errors"
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
//
// skipZero sets SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND in the unit
// (unit.Options.SkipZeroDraftExtend): refused unless a slot holds only 0.
func (r *Runbook) perLoadPlan(t *target, d *deployed, engine string, rows []PerLoadRow, skipZero bool) (*perLoadProposal, error) {
	p := &perLoadProposal{}
	var opts unit.Options
	if !slices.ContainsFunc(tableRows(rows), func(r PerLoadRow) bool { return maxCandidate(r) > 0 }) {
		return nil, errors.New("every steps value of the table is 0: that is speculative decoding off at every load, `mtp steps 0`")
	}
	if skipZero && (engine == "vllm" || !zeroOnlySlot(rows)) {
		return nil, fmt.Errorf("%s: only for SGLang's adaptive table with a slot that holds only 0 (steps 0 is where it skips the draft model's extend)", skipZeroWord)
	}
	p.steps = startSteps(engine, rows)
	if engine == "vllm" {
		// vLLM: every k of the table is clamped to num_speculative_tokens,
		// which must be above 0; a k of 0 is no speculation at that batch
		// size (vllm-project/vllm vllm/config/speculative.py,
		// num_speculative_tokens Field(gt=0); vllm/v1/spec_decode/dynamic/
		// utils.py, "speculative_token_schedule K values must be >= 0").
		p.table, _ = VLLMBatchTable(rows)
		opts.BatchTable = p.table
	} else {
		p.file, p.fileText = t.cfg.AdaptiveConfig, SGLangAdaptiveConfig(rows)
		opts.AdaptiveConfig = p.file
		opts.MaxRunningRequests = capNeeded(rows)
		opts.SkipZeroDraftExtend = skipZero
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

// capNeeded is the --max-running-requests a SGLang per-load table needs:
// the largest concurrency when the table has a slot above SGLang's cap of 48
// (with speculation on), else 0. Without it no batch reaches that slot and
// the requests above 48 queue, even where the slot turns drafting off (0);
// SGLang captures each step's CUDA graphs only for the batch sizes whose
// slot lists it, so a slot of 0 above 48 costs little graph memory. The unit
// edit adds it only when the unit does not set the option itself.
func capNeeded(rows []PerLoadRow) int {
	tab := tableRows(rows)
	if top := tab[len(tab)-1].Concurrency; top > sglangSpecCap {
		return top
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

// withinCap is rows with SGLang's cap of 48 left alone: a row above 48
// loses its slot (no batch reaches it) and is served by the largest slot at
// or below 48 (SGLang pads a batch up to a CUDA-graph size and takes the
// largest slot key not above it), whose steps it then holds. Rows with no
// slot at or below 48 are left as they are.
func withinCap(rows []PerLoadRow) []PerLoadRow {
	out := slices.Clone(rows)
	var below *PerLoadRow
	for i := range out {
		row := &out[i]
		switch {
		case row.Concurrency <= sglangSpecCap:
			if row.Slot == 0 {
				below = row
			}
		case below != nil:
			row.Slot, row.Steps, row.Candidates = below.Concurrency, below.Steps, below.Candidates
		}
	}
	return out
}

// SGLangAdaptiveConfig renders rows as SGLang's adaptive config (the format
// of sgl-project/sglang 015c8726, srt/speculative/adaptive_spec_params.py):
// one slot per concurrency that has its own (tableRows), keyed by it as a
// string, its candidate_steps the row's candidates ascending (0: drafting
// off at that batch size); the engine runs a batch with the slot of the
// largest key not above its CUDA-graph padded size (adaptive_step_router.py,
// batch_size_key_for_batch). No "strategy" key: SGLang's default, ema, which
// runs a step of 0 (throughput_aware refuses one, so it is never written).
// One slot a line, keys ascending, a final newline.
func SGLangAdaptiveConfig(rows []PerLoadRow) string {
	rows = tableRows(rows)
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
	rows = tableRows(rows)
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

// skipZeroWord is mtp per-load's word that sets SGLang's
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND in the unit.
const skipZeroWord = "skip-zero-extend"

// zeroOnlySlot reports whether a slot of rows' table holds only 0: the
// slots where SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND saves the
// draft model's extend on every step.
func zeroOnlySlot(rows []PerLoadRow) bool {
	return slices.ContainsFunc(tableRows(rows), func(r PerLoadRow) bool { return maxCandidate(r) == 0 })
}

// perLoadCommand is mtp per-load's arguments for rows: the TABLE, then
// skipZeroWord when skipZero.
func perLoadCommand(rows []PerLoadRow, skipZero bool) string {
	if skipZero {
		return perLoadWords(rows) + " " + skipZeroWord
	}
	return perLoadWords(rows)
}

// perLoadWords renders rows as mtp per-load's TABLE: "1:7 8:6 32:2 64:2/3"
// (a concurrency, its steps, then its other candidates).
func perLoadWords(rows []PerLoadRow) string {
	rows = tableRows(rows)
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
