// Package unit reads and edits systemd unit files for LLM inference services.
//
// It parses unit text the way systemd does (sections, comments, backslash
// continuations with comment lines inside them, repeated keys, empty
// assignments that reset lists), parses ExecStart= command lines with systemd's
// rules (prefixes, quotes, C escapes, $$, %%, specifiers, environment
// references), recognises the engine (SGLang or vLLM) from the argv, reads its
// speculative-decoding settings and produces the smallest edit that sets the
// number of draft steps: every byte outside the changed values stays as it was.
//
// Every value carries byte offsets into the original text, so an edit splices
// the original instead of re-rendering it. The package is pure: no I/O, no
// globals; all functions are safe for concurrent use on distinct values, and a
// parsed *Unit is immutable.
package unit

import (
	"strings"
	"unicode/utf8"
)

// maxText bounds the unit text accepted by Parse (systemd's own line limit is 1 MiB).
const maxText = 4 << 20

// Span is a byte range [Start, End) in a unit's text.
type Span struct{ Start, End int }

// Len returns End-Start.
func (s Span) Len() int { return s.End - s.Start }

// Unit is one parsed unit file or drop-in.
type Unit struct {
	// Name identifies the file for diffs and messages (a path or a unit name).
	Name string
	// Text is the original text, byte for byte.
	Text string
	// Entries are the assignments in file order.
	Entries []Entry
	// Warnings are lines systemd would ignore with a warning (missing '=',
	// assignment outside a section); they do not stop parsing.
	Warnings []string
}

// Entry is one assignment Key=Value after continuation lines were joined.
type Entry struct {
	Section string
	Key     string
	// Value is the logical value: continuation lines joined (each trailing
	// backslash replaced by a space, comment lines inside dropped), stripped
	// of surrounding whitespace.
	Value string
	// Line is the 1-based line the assignment starts on.
	Line int
	// Span covers the assignment from the key to the end of its last physical
	// line (without the line break).
	Span Span
	// ValueSpan covers the value's bytes in Text (empty at the end of the key
	// line's '=' when the value is empty).
	ValueSpan Span

	pos []int // pos[i] = offset in Text of Value[i]
}

// TextPos maps a byte index of Value (0..len(Value)) to an offset in Text.
// Index len(Value) maps to just after the last value byte.
func (e *Entry) TextPos(i int) int {
	if i < len(e.pos) {
		return e.pos[i]
	}
	if len(e.pos) == 0 {
		return e.ValueSpan.Start
	}
	return e.pos[len(e.pos)-1] + 1
}

const whitespace = " \t\n\r"

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Parse parses unit text. name is kept for messages and diffs. It fails only
// where systemd refuses the whole file (an invalid section header, text over
// 4 MiB); lines systemd ignores are recorded in Warnings.
func Parse(name, text string) (*Unit, error) {
	if len(text) > maxText {
		return nil, &SyntaxError{Msg: "unit text larger than 4 MiB"}
	}
	u := &Unit{Name: name, Text: text}
	p := 0
	if strings.HasPrefix(text, "\uFEFF") {
		p = 3
	}
	var (
		buf     []byte
		pos     []int
		cont    bool
		startLn int
		lastEnd int
		section string
	)
	line := 0
	for p < len(text) || cont {
		if p >= len(text) { // EOF inside a continuation: parse what we have
			if err := u.parseLine(&section, buf, pos, startLn, lastEnd); err != nil {
				return nil, err
			}
			break
		}
		line++
		start := p
		end := start
		for end < len(text) && text[end] != '\n' && text[end] != '\r' {
			end++
		}
		next := end
		if next < len(text) {
			if text[next] == '\r' && next+1 < len(text) && text[next+1] == '\n' {
				next += 2
			} else {
				next++
			}
		}
		p = next
		phys := text[start:end]
		if t := strings.TrimLeft(phys, whitespace); t != "" && (t[0] == '#' || t[0] == ';') {
			continue // comment lines are dropped, also inside a continuation
		}
		if !cont {
			buf, pos, startLn = buf[:0], pos[:0], line
		}
		for i := 0; i < len(phys); i++ {
			buf = append(buf, phys[i])
			pos = append(pos, start+i)
		}
		lastEnd = end
		n := 0
		for i := len(buf) - 1; i >= 0 && buf[i] == '\\'; i-- {
			n++
		}
		if n%2 == 1 {
			buf[len(buf)-1] = ' '
			cont = true
			continue
		}
		cont = false
		if err := u.parseLine(&section, buf, pos, startLn, lastEnd); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func (u *Unit) parseLine(section *string, buf []byte, pos []int, line, lastEnd int) error {
	a, b := 0, len(buf)
	for a < b && isWS(buf[a]) {
		a++
	}
	for b > a && isWS(buf[b-1]) {
		b--
	}
	if a == b {
		return nil
	}
	l := buf[a:b]
	if l[0] == '[' {
		if l[len(l)-1] != ']' {
			return &SyntaxError{Line: line, Offset: pos[a], Msg: "invalid section header " + quoteMsg(string(l))}
		}
		name := string(l[1 : len(l)-1])
		if strings.ContainsAny(name, "[]") {
			return &SyntaxError{Line: line, Offset: pos[a], Msg: "invalid section header " + quoteMsg(string(l))}
		}
		*section = name
		return nil
	}
	if !utf8.Valid(l) {
		u.Warnings = append(u.Warnings, lineMsg(line, "invalid UTF-8, line ignored"))
		return nil
	}
	if *section == "" {
		u.Warnings = append(u.Warnings, lineMsg(line, "assignment outside of a section, ignored"))
		return nil
	}
	eq := -1
	for i, c := range l {
		if c == '=' {
			eq = i
			break
		}
	}
	if eq < 0 {
		u.Warnings = append(u.Warnings, lineMsg(line, "missing '=', line ignored"))
		return nil
	}
	ka, kb := a, a+eq
	for kb > ka && isWS(buf[kb-1]) {
		kb--
	}
	va, vb := a+eq+1, b
	for va < vb && isWS(buf[va]) {
		va++
	}
	e := Entry{
		Section: *section,
		Key:     string(buf[ka:kb]),
		Value:   string(buf[va:vb]),
		Line:    line,
		Span:    Span{pos[a], lastEnd},
		pos:     append([]int(nil), pos[va:vb]...),
	}
	if va < vb {
		e.ValueSpan = Span{pos[va], pos[vb-1] + 1}
	} else {
		e.ValueSpan = Span{pos[a+eq] + 1, pos[a+eq] + 1}
	}
	u.Entries = append(u.Entries, e)
	return nil
}

func lineMsg(line int, msg string) string {
	return "line " + itoa(line) + ": " + msg
}

func quoteMsg(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return "\"" + s + "\""
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// Lookup returns the entries for section/key in file order.
func (u *Unit) Lookup(section, key string) []*Entry {
	var out []*Entry
	for i := range u.Entries {
		if u.Entries[i].Section == section && u.Entries[i].Key == key {
			out = append(out, &u.Entries[i])
		}
	}
	return out
}

// Value returns the last value assigned to section/key and whether there was one.
func (u *Unit) Value(section, key string) (string, bool) {
	es := u.Lookup(section, key)
	if len(es) == 0 {
		return "", false
	}
	return es[len(es)-1].Value, true
}
