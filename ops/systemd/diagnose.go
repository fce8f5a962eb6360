package systemd

import (
	"regexp"
	"strings"
)

// Causes Diagnose names.
const (
	CauseGPUMemoryHeld = "gpu_memory_held"
	CauseBadArgument   = "bad_argument"
	CauseCrash         = "crash"
	CauseShmFull       = "shm_full"
	CausePortInUse     = "port_in_use"
	// CauseSettingsDoNotFit is an out-of-memory start on GPUs seen clear just
	// before it (Diagnosis.OnClearGPUs): the engine's own settings need more
	// GPU memory than there is.
	CauseSettingsDoNotFit = "settings_do_not_fit"
)

// Diagnosis is the known cause of a failed or looping start, read from the
// unit's journal.
type Diagnosis struct {
	Cause string // one of the Cause constants, "" when unknown
	Line  string // the decisive journal line, quoted in messages (trimmed)
	Hint  string // what to do
}

// Known reports whether a cause was found.
func (d Diagnosis) Known() bool { return d.Cause != "" }

// pattern is one recognised journal line. rank orders specificity: a higher
// rank beats a lower one wherever it appears; within a rank the latest wins.
type pattern struct {
	cause, hint string
	rank        int
	match       func(line, lower string) bool
}

const (
	rankTraceback = 1 // "Traceback (most recent call last):" with no exception line yet
	rankException = 2 // the exception line of some traceback
	rankKnown     = 3 // a line that names the cause
)

const (
	hintMemory = "GPU memory is held by other processes (often workers of the previous run): reap them and wait until the GPUs are clear, then start again"
	hintArg    = "the engine refused its command line: fix the flag named in the line"
	hintNone   = "set --speculative-eagle-topk and --speculative-num-draft-tokens with --speculative-num-steps"
	hintShm    = "/dev/shm is full or too small: free it or enlarge it (e.g. the container's shm size)"
	hintPort   = "another process listens on the engine's port: stop it or change --port"
	hintCrash  = "the engine crashed while starting: see the quoted exception and the lines before it"
)

func has(subs ...string) func(line, lower string) bool {
	return func(_, lower string) bool {
		for _, s := range subs {
			if strings.Contains(lower, s) {
				return true
			}
		}
		return false
	}
}

// The engines' out-of-memory lines at start (lower case).
const (
	lineNoRoom     = "not enough memory. please try to increase --mem-fraction-static" // SGLang: no room left for the KV cache
	lineUnbalanced = "the memory capacity is unbalanced. some gpus may be occupied by other processes"
	lineCUDAOOM    = "cuda out of memory"                                     // PyTorch, e.g. SGLang's "Capture cuda graph failed: CUDA out of memory ..."
	lineFreeLess   = "on startup is less than desired gpu memory utilization" // vLLM, after "Free memory on device"
)

var patterns = []pattern{
	{cause: CauseGPUMemoryHeld, hint: hintMemory, rank: rankKnown, match: has(lineNoRoom, lineUnbalanced, lineCUDAOOM)},
	{cause: CauseGPUMemoryHeld, hint: hintMemory, rank: rankKnown, match: func(_, lower string) bool {
		return strings.Contains(lower, "free memory on device") && strings.Contains(lower, lineFreeLess)
	}},
	{cause: CauseBadArgument, hint: hintArg, rank: rankKnown, match: func(_, lower string) bool {
		return strings.Contains(lower, "error: unrecognized arguments") || strings.Contains(lower, "error: argument ") ||
			strings.Contains(lower, "invalid choice") || strings.Contains(lower, "error: ambiguous option")
	}},
	{cause: CauseCrash, hint: hintNone, rank: rankKnown, match: func(line, _ string) bool {
		return strings.Contains(line, "TypeError") && strings.Contains(line, "'NoneType'")
	}},
	{cause: CauseShmFull, hint: hintShm, rank: rankKnown, match: has("fatal python error: bus error")},
	{cause: CausePortInUse, hint: hintPort, rank: rankKnown, match: has("address already in use")},
}

// Hints for an out-of-memory start on GPUs seen clear just before it.
const (
	clearBefore     = "the GPUs were clear just before this start, so no other process held this memory, whatever PIDs the line names (they are the engine's own, gone now): "
	hintFitSGLang   = clearBefore + "the settings need more GPU memory than there is (deeper speculation means larger CUDA graphs); try fewer steps, a lower --mem-fraction-static or a smaller --cuda-graph-max-bs"
	hintFitVLLM     = clearBefore + "the settings need more GPU memory than there is (more speculative tokens mean larger CUDA graphs); try fewer steps, a lower --gpu-memory-utilization or a smaller --max-num-seqs"
	hintFitNoRoom   = clearBefore + "the model's weights leave no room for the KV cache within --mem-fraction-static; raise it or spread the model over more GPUs (--tp)"
	hintFitVLLMUtil = clearBefore + "--gpu-memory-utilization asks for more than a clear GPU has free; lower it"
)

// OnClearGPUs is d for a start on GPUs that were seen clear just before it,
// by the engine named (sglang, vllm or "" when unknown). An out-of-memory
// line then cannot mean memory held by others, whatever processes it names
// (inside a container they are host PIDs, and the engine's own): the cause is
// the settings (CauseSettingsDoNotFit), with what to change. SGLang's
// "memory capacity is unbalanced" still means that something took memory on
// some GPUs since, and every other diagnosis is returned as it is.
func (d Diagnosis) OnClearGPUs(engine string) Diagnosis {
	if d.Cause != CauseGPUMemoryHeld {
		return d
	}
	lower := strings.ToLower(d.Line)
	hint := ""
	switch {
	case strings.Contains(lower, lineUnbalanced):
		return d
	case strings.Contains(lower, lineNoRoom):
		hint = hintFitNoRoom
	case strings.Contains(lower, lineFreeLess):
		hint = hintFitVLLMUtil
	case engine == "vllm":
		hint = hintFitVLLM
	default:
		hint = hintFitSGLang
	}
	return Diagnosis{Cause: CauseSettingsDoNotFit, Line: d.Line, Hint: hint}
}

// exceptionLine matches a Python exception line such as "RuntimeError: ..."
// or "torch.OutOfMemoryError: ...", after optional "[...]" / "(...)" log
// prefixes.
var exceptionLine = regexp.MustCompile(`^(?:[\[(][^\])]*[\])]\s*)*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Iteration))(?::\s.*|:?)$`)

// Diagnose reads the journal lines of a failed or looping start and names the
// known cause (see the Cause constants). The decisive line is the most
// specific match (a line that names a cause beats a traceback's exception
// line, which beats a bare "Traceback" line); among equals the latest wins.
// It never fails: an unknown cause is the zero Diagnosis.
func Diagnose(lines []string) Diagnosis {
	best, bestRank := Diagnosis{}, 0
	take := func(d Diagnosis, rank int) {
		if rank >= bestRank {
			best, bestRank = d, rank
		}
	}
	inTraceback := false
	for _, raw := range lines {
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		lower := strings.ToLower(line)
		for _, p := range patterns {
			if p.match(line, lower) {
				take(Diagnosis{Cause: p.cause, Line: line, Hint: p.hint}, p.rank)
				break
			}
		}
		if strings.Contains(line, "Traceback (most recent call last)") {
			inTraceback = true
			take(Diagnosis{Cause: CauseCrash, Line: line, Hint: hintCrash}, rankTraceback)
			continue
		}
		if inTraceback && raw == strings.TrimLeft(raw, " \t") && exceptionLine.MatchString(line) {
			take(Diagnosis{Cause: CauseCrash, Line: line, Hint: hintCrash}, rankException)
		}
	}
	return best
}
