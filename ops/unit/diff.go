package unit

import (
	"fmt"
	"strings"
)

// UnifiedDiff returns a unified diff (3 lines of context) from a to b, with
// "--- a/NAME" and "+++ b/NAME" headers (an absolute NAME without its
// leading slash, as git writes them: a/etc/...); "" when the texts are
// equal. It is
// meant for unit-sized texts: above about 4 million line pairs it shows the
// whole file as replaced.
func UnifiedDiff(name, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	ops := diffLines(al, bl)
	var out strings.Builder
	name = strings.TrimLeft(name, "/")
	fmt.Fprintf(&out, "--- a/%s\n+++ b/%s\n", name, name)
	const ctx = 3
	// ops: sequence of (kind, aIndex, bIndex); kind ' ', '-', '+'.
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// Hunk from max(i-ctx) to the last change within 2*ctx of the next.
		start := max(i-ctx, 0)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*ctx {
				break
			}
		}
		stop := min(end+ctx+1, len(ops))
		aStart, bStart, aN, bN := -1, -1, 0, 0
		for _, o := range ops[start:stop] {
			if aStart < 0 {
				aStart, bStart = o.a, o.b
			}
			if o.kind != '+' {
				aN++
			}
			if o.kind != '-' {
				bN++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aStart, aN), hunkRange(bStart, bN))
		for _, o := range ops[start:stop] {
			var line string
			if o.kind == '+' {
				line = bl[o.b]
			} else {
				line = al[o.a]
			}
			out.WriteByte(o.kind)
			out.WriteString(line)
			if !strings.HasSuffix(line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = stop
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

type diffOp struct {
	kind byte
	a, b int // index of the line in a (for ' ' and '-') and in b (for ' ' and '+'); position otherwise
}

// diffLines computes a line diff by longest common subsequence after
// trimming the common prefix and suffix.
func diffLines(a, b []string) []diffOp {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	var ops []diffOp
	for i := 0; i < p; i++ {
		ops = append(ops, diffOp{' ', i, i})
	}
	am, bm := a[p:len(a)-s], b[p:len(b)-s]
	n, m := len(am), len(bm)
	if n*m > 4_000_000 {
		for i := range am {
			ops = append(ops, diffOp{'-', p + i, p})
		}
		for j := range bm {
			ops = append(ops, diffOp{'+', p + n, p + j})
		}
	} else {
		// lcs[i][j] = LCS length of am[i:], bm[j:].
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if am[i] == bm[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && am[i] == bm[j]:
				ops = append(ops, diffOp{' ', p + i, p + j})
				i++
				j++
			case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
				ops = append(ops, diffOp{'-', p + i, p + j})
				i++
			default:
				ops = append(ops, diffOp{'+', p + i, p + j})
				j++
			}
		}
	}
	for k := 0; k < s; k++ {
		ops = append(ops, diffOp{' ', len(a) - s + k, len(b) - s + k})
	}
	return ops
}
