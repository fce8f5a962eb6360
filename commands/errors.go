package commands

import (
	"strconv"
	"strings"
)

// UsageError is returned by Parse (and Help) for input that is not a valid command.
// Nothing must be started for it; show Error() to the user.
type UsageError struct {
	Problem    string // what was wrong: "steps must be between 1 and 16, got 40"
	Usage      string // "usage: mtp steps N [SERVICE] [--dry-run]" (several lines for a group)
	Suggestion string // "did you mean `mtp show`?", or ""
}

// Error joins Problem, Suggestion and Usage, one per line, leaving out empty ones.
func (e *UsageError) Error() string {
	var b strings.Builder
	b.Grow(len(e.Problem) + len(e.Usage) + len(e.Suggestion) + 2)
	for _, s := range [...]string{e.Problem, e.Suggestion, e.Usage} {
		if s == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
	return b.String()
}

// usageErr builds a UsageError for spec (nil: the general usage).
func usageErr(spec *Spec, problem, suggestion string) *UsageError {
	return &UsageError{Problem: problem, Usage: usageLine(spec), Suggestion: suggestion}
}

func usageLine(spec *Spec) string {
	if spec == nil {
		return "usage: COMMAND [ARGS] - one of " + strings.Join(groups, ", ") + " (`help` lists them)"
	}
	return "usage: " + spec.Usage
}

func groupUsage(g string) string {
	var b strings.Builder
	for i, s := range groupSpecs(g) {
		if i == 0 {
			b.WriteString("usage: ")
		} else {
			b.WriteString("\n       ")
		}
		b.WriteString(s.Usage)
	}
	return b.String()
}

// didYouMean formats a suggestion of an example command, or "" for "".
func didYouMean(s string) string {
	if s == "" {
		return ""
	}
	return "did you mean `" + s + "`?"
}

// quote renders user text for a message: Go-quoted, at most 40 bytes of it.
func quote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return strconv.Quote(s)
}

// closest returns the candidate nearest to word by edit distance (transpositions
// count as one edit), or a candidate word is a prefix of; "" when none is close.
func closest(word string, candidates []string) string {
	word = strings.ToLower(word)
	best, bestD := "", 1<<30
	for _, c := range candidates {
		if c == word {
			return c
		}
		d := editDistance(word, c)
		if d < bestD {
			best, bestD = c, d
		}
	}
	limit := 1
	if len(word) >= 5 {
		limit = 2
	}
	if len(word) >= 9 {
		limit = 3
	}
	if bestD <= limit && bestD < len(word) {
		return best
	}
	if len(word) >= 3 {
		for _, c := range candidates {
			if strings.HasPrefix(c, word) {
				return c
			}
		}
	}
	return ""
}

// editDistance is the optimal string alignment distance between a and b (bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20
	}
	var rows [3][66]int
	prev2, prev, cur := &rows[0], &rows[1], &rows[2]
	for j := 0; j <= len(b); j++ {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// Closest returns the candidate nearest to word (a "did you mean" for a
// name the config gives, and for its unknown keys), or "" when none is close.
func Closest(word string, candidates []string) string { return closest(word, candidates) }
