package commands

// The lists and tables of the language: parsing and canonical rendering.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// formatList renders sweep values, runs of three or more consecutive ascending
// values as a range: [1 2 3 4 5 10] -> "1..5,10".
func formatList(vals []int) string {
	var b []byte
	for i := 0; i < len(vals); {
		j := i
		for j+1 < len(vals) && vals[j+1] == vals[j]+1 {
			j++
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		if j-i >= 2 {
			b = strconv.AppendInt(b, int64(vals[i]), 10)
			b = append(b, '.', '.')
			b = strconv.AppendInt(b, int64(vals[j]), 10)
			i = j + 1
			continue
		}
		b = strconv.AppendInt(b, int64(vals[i]), 10)
		i++
	}
	return string(b)
}

// parseStepList parses a sweep list: comma-separated values and a..b ranges, each
// in 0..max (0: speculative decoding off), at most MaxSweepPoints values, none
// twice; order is kept.
func parseStepList(s string, max int) (vals []int, problem, suggestion string) {
	if s == "" {
		return nil, "the steps list is empty", ""
	}
	vals = make([]int, 0, 8)
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return nil, fmt.Sprintf("empty value in the steps list %s", quote(s)), ""
		}
		lo, hi, isRange := strings.Cut(item, "..")
		if !isRange {
			if a, b, ok := strings.Cut(item, "-"); ok && isDigits(a) && isDigits(b) {
				return nil, fmt.Sprintf("write ranges with two dots: %s..%s, not %s", a, b, item), ""
			}
			hi = lo
		}
		a, prob := parseInt(lo, 0, max, "each steps value")
		if prob != "" {
			return nil, prob, ""
		}
		b, prob := parseInt(hi, 0, max, "each steps value")
		if prob != "" {
			return nil, prob, ""
		}
		if b < a {
			return nil, fmt.Sprintf("the range %s goes backwards", item), fmt.Sprintf("write %d..%d", b, a)
		}
		if len(vals)+b-a+1 > MaxSweepPoints {
			return nil, fmt.Sprintf("a sweep has at most %d values, %s has more", MaxSweepPoints, quote(s)), ""
		}
		for v := a; v <= b; v++ {
			for _, seen := range vals {
				if seen == v {
					return nil, fmt.Sprintf("steps %d is listed twice in %s: each value is run once", v, quote(s)), ""
				}
			}
			vals = append(vals, v)
		}
	}
	return vals, "", ""
}

// MaxSweepConcurrencies bounds the concurrencies of a sweep's `at LIST`.
const MaxSweepConcurrencies = 8

// DefaultTuneTo is the highest steps value mtp tune searches when no RANGE is
// given (lowered to the steps limit).
const DefaultTuneTo = 16

// Limits of a sweep's topk and draft lists (SGLang's own bounds).
const (
	MaxTopK        = 64
	MaxDraftTokens = 1024
	maxGridList    = 8 // values in a topk or draft list
)

// parseIntList parses a topk or draft list: values and a..b ranges, each in
// lo..hi, at most maxGridList, none twice; order is kept.
func parseIntList(s string, lo, hi int, what, word string) ([]int, string) {
	var vals []int
	for item := range strings.SplitSeq(s, ",") {
		a0, b0, isRange := strings.Cut(item, "..")
		if !isRange {
			b0 = a0
		}
		a, prob := parseInt(a0, lo, hi, what)
		if prob != "" {
			return nil, prob
		}
		b, prob := parseInt(b0, lo, hi, what)
		if prob != "" {
			return nil, prob
		}
		if b < a || len(vals)+b-a+1 > maxGridList {
			return nil, fmt.Sprintf("%s takes at most %d values, in ascending ranges: %s", word, maxGridList, quote(s))
		}
		for v := a; v <= b; v++ {
			if slices.Contains(vals, v) {
				return nil, fmt.Sprintf("%s %d is listed twice in %s", word, v, quote(s))
			}
			vals = append(vals, v)
		}
	}
	return vals, ""
}

// parseConcList parses a sweep's `at LIST`: concurrencies as values and a..b
// ranges, each in 1..1024, at most MaxSweepConcurrencies, none twice; order
// is kept.
func parseConcList(s string) ([]int, string) {
	var vals []int
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(item, "..")
		if !isRange {
			hi = lo
		}
		a, prob := parseInt(lo, keyConcurrency.min, keyConcurrency.max, "each concurrency")
		if prob != "" {
			return nil, prob
		}
		b, prob := parseInt(hi, keyConcurrency.min, keyConcurrency.max, "each concurrency")
		if prob != "" {
			return nil, prob
		}
		if b < a || len(vals)+b-a+1 > MaxSweepConcurrencies {
			return nil, fmt.Sprintf("at takes at most %d concurrencies, in ascending ranges: %s", MaxSweepConcurrencies, quote(s))
		}
		for v := a; v <= b; v++ {
			if slices.Contains(vals, v) {
				return nil, fmt.Sprintf("concurrency %d is listed twice in %s", v, quote(s))
			}
			vals = append(vals, v)
		}
	}
	return vals, ""
}

// parseRange parses mtp tune's RANGE: a..b, 0 <= a < b <= max (0: speculative decoding off).
func parseRange(s string, max int) (from, to int, problem, suggestion string) {
	lo, hi, ok := strings.Cut(s, "..")
	if !ok {
		return 0, 0, fmt.Sprintf("RANGE is two steps values a..b, got %s", quote(s)), "for example `mtp tune 2..12`"
	}
	a, prob := parseInt(lo, 0, max, "the range's start")
	if prob != "" {
		return 0, 0, prob, ""
	}
	b, prob := parseInt(hi, 0, max, "the range's end")
	if prob != "" {
		return 0, 0, prob, ""
	}
	if b <= a {
		sugg := ""
		if b < a {
			sugg = fmt.Sprintf("write %d..%d", b, a)
		}
		return 0, 0, fmt.Sprintf("the range %s must go up and hold two values at least", quote(s)), sugg
	}
	return a, b, "", ""
}

// formatLoadSteps renders one TABLE entry: "64:2/3".
func formatLoadSteps(e LoadSteps) string {
	parts := make([]string, len(e.Steps))
	for i, n := range e.Steps {
		parts[i] = strconv.Itoa(n)
	}
	return strconv.Itoa(e.Concurrency) + ":" + strings.Join(parts, "/")
}

// parseLoadTable parses mtp per-load's TABLE: "1:7,8:6,64:2/3" (commas or
// the spaces between words), concurrencies rising, steps 0..maxSteps, at
// least one of them above 0 (all 0 is speculative decoding off: mtp steps 0).
func parseLoadTable(s string, maxSteps int) ([]LoadSteps, string) {
	var out []LoadSteps
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		cs, ss, ok := strings.Cut(part, ":")
		if !ok || !isDigits(cs) || ss == "" {
			return nil, fmt.Sprintf("%s is not concurrency:steps (e.g. 8:6, or 64:2/3 for candidates)", quote(part))
		}
		c, prob := parseInt(cs, keyConcurrency.min, keyConcurrency.max, "the concurrency")
		if prob != "" {
			return nil, prob
		}
		if len(out) > 0 && c <= out[len(out)-1].Concurrency {
			return nil, fmt.Sprintf("concurrencies must rise, each once: %d after %d", c, out[len(out)-1].Concurrency)
		}
		e := LoadSteps{Concurrency: c}
		for _, w := range strings.Split(ss, "/") {
			if !isDigits(w) {
				return nil, fmt.Sprintf("steps %s at concurrency %d: want a number 0..%d", quote(w), c, maxSteps)
			}
			n, prob := parseInt(w, 0, maxSteps, "steps")
			if prob != "" {
				return nil, prob
			}
			if slices.Contains(e.Steps, n) {
				return nil, fmt.Sprintf("steps %d is given twice at concurrency %d", n, c)
			}
			e.Steps = append(e.Steps, n)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, "the table is empty: give concurrency:steps pairs, e.g. 1:10 8:7 32:1 64:1"
	}
	if !slices.ContainsFunc(out, func(e LoadSteps) bool { return slices.ContainsFunc(e.Steps, func(n int) bool { return n > 0 }) }) {
		return nil, "every steps value of the table is 0: that is speculative decoding off at every load, `mtp steps 0`"
	}
	return out, ""
}
