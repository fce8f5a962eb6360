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

var patterns = []pattern{
	{cause: CauseGPUMemoryHeld, hint: hintMemory, rank: rankKnown, match: has(
		"not enough memory. please try to increase --mem-fraction-static",
		"the memory capacity is unbalanced. some gpus may be occupied by other processes",
		"cuda out of memory",
	)},
	{cause: CauseGPUMemoryHeld, hint: hintMemory, rank: rankKnown, match: func(_, lower string) bool {
		return strings.Contains(lower, "free memory on device") && strings.Contains(lower, "on startup is less than desired gpu memory utilization")
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
