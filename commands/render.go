package commands

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// render returns the canonical text of c: the path, positional arguments with
// resolved names, key=N arguments that are set (in registry order), then flags
// (for schedule add, its own flags come before the cron spec).
func render(c *Command) string {
	spec := c.Spec
	var b strings.Builder
	b.Grow(48)
	b.WriteString(spec.Path)
	writeFlags := func() {
		for _, f := range flagNames {
			if spec.flags&f.f != 0 && c.hasFlag(f.f) {
				b.WriteByte(' ')
				b.WriteString(f.name)
			}
		}
	}
	flagsFirst := len(spec.params) > 0 && spec.params[len(spec.params)-1].kind == pSub
	if flagsFirst {
		writeFlags()
	}
	if c.To != "" {
		b.WriteString(" --to ")
		b.WriteString(c.To)
	}
	var num [20]byte
	for _, p := range spec.params {
		switch p.kind {
		case pSteps:
			b.WriteByte(' ')
			b.Write(strconv.AppendInt(num[:0], int64(c.Steps), 10))
		case pService, pTarget:
			if c.Service != "" {
				b.WriteByte(' ')
				b.WriteString(c.Service)
			}
		case pHost:
			if c.Host != "" {
				b.WriteByte(' ')
				b.WriteString(c.Host)
			}
		case pLiteral:
			b.WriteByte(' ')
			b.WriteString(p.word)
		case pStepList:
			b.WriteByte(' ')
			b.WriteString(formatList(c.SweepSteps))
		case pTopKList:
			if len(c.SweepTopK) > 0 {
				b.WriteString(" topk ")
				b.WriteString(formatList(c.SweepTopK))
			}
		case pDraftList:
			if len(c.SweepDraft) > 0 {
				b.WriteString(" draft ")
				b.WriteString(formatList(c.SweepDraft))
			}
		case pAtList:
			if len(c.SweepAt) > 0 {
				b.WriteString(" at ")
				b.WriteString(formatList(c.SweepAt))
			}
		case pLoadTable:
			for _, e := range c.LoadTable {
				b.WriteByte(' ')
				b.WriteString(formatLoadSteps(e))
			}
		case pPerLoad:
			if c.PerLoad {
				b.WriteString(" " + perLoadWord)
			}
		case pAt:
			if c.PerLoad && len(c.SweepAt) > 0 {
				b.WriteString(" at ")
				b.WriteString(formatList(c.SweepAt))
			} else if c.Bench.Concurrency > 0 {
				b.WriteString(" at ")
				b.Write(strconv.AppendInt(num[:0], int64(c.Bench.Concurrency), 10))
			}
		case pRange:
			b.WriteByte(' ')
			b.Write(strconv.AppendInt(num[:0], int64(c.TuneFrom), 10))
			b.WriteString("..")
			b.Write(strconv.AppendInt(num[:0], int64(c.TuneTo), 10))
		case pAll:
			if c.All {
				b.WriteString(" all")
			}
		case pJobID:
			b.WriteByte(' ')
			b.Write(strconv.AppendInt(num[:0], c.JobID, 10))
		case pScheduleID:
			b.WriteByte(' ')
			b.Write(strconv.AppendInt(num[:0], c.ScheduleID, 10))
		case pDuration:
			b.WriteByte(' ')
			b.WriteString(formatDuration(c.Duration))
		case pIncidentID:
			b.WriteByte(' ')
			b.Write(strconv.AppendInt(num[:0], c.IncidentID, 10))
		case pCron:
			b.WriteString(` "`)
			b.WriteString(c.Cron)
			b.WriteByte('"')
		case pSub:
			if c.Sub != nil {
				b.WriteByte(' ')
				b.WriteString(c.Sub.Text)
			}
		case pTopic:
			if c.Topic != "" {
				b.WriteByte(' ')
				b.WriteString(c.Topic)
			}
		}
	}
	for k := range spec.keys {
		if v := spec.keys[k].get(c); v != 0 {
			b.WriteByte(' ')
			b.WriteString(spec.keys[k].name)
			b.WriteByte('=')
			b.Write(strconv.AppendInt(num[:0], int64(v), 10))
		}
	}
	if !flagsFirst {
		writeFlags()
	}
	return b.String()
}

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
// in 1..max, at most MaxSweepPoints values, none twice; order is kept.
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
		a, prob := parseInt(lo, 1, max, "each steps value")
		if prob != "" {
			return nil, prob, ""
		}
		b, prob := parseInt(hi, 1, max, "each steps value")
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

// parseRange parses mtp tune's RANGE: a..b, 1 <= a < b <= max.
func parseRange(s string, max int) (from, to int, problem, suggestion string) {
	lo, hi, ok := strings.Cut(s, "..")
	if !ok {
		return 0, 0, fmt.Sprintf("RANGE is two steps values a..b, got %s", quote(s)), "for example `mtp tune 2..12`"
	}
	a, prob := parseInt(lo, 1, max, "the range's start")
	if prob != "" {
		return 0, 0, prob, ""
	}
	b, prob := parseInt(hi, 1, max, "the range's end")
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
