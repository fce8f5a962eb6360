package engine

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
)

// This file emulates the parts of Python's argparse that engine command lines meet: long
// options with "--flag value" and "--flag=value", unique-prefix abbreviations, store_true
// flags, typed values, choices, nargs="+", one optional positional, and argparse's error
// messages and exit status 2.

type kind int

const (
	kStr     kind = iota
	kInt          // type=int
	kFloat        // type=float
	kTrue         // action="store_true"
	kBoolOpt      // argparse.BooleanOptionalAction: --x / --no-x
	kJSON         // type=json.loads
	kList         // nargs="+"
)

// flagSpec is one add_argument call.
type flagSpec struct {
	names    []string // option strings, the first is the one usage shows
	dest     string
	kind     kind
	def      any // default; nil is Python's None
	choices  []string
	required bool
}

// argParser is one ArgumentParser.
type argParser struct {
	prog        string
	usageLine   string // fixed usage text; "" = generated from the flags like argparse
	flags       []flagSpec
	byName      map[string]int
	positional  string // dest of an optional positional argument, "" for none
	underscores bool   // --max_num_seqs means --max-num-seqs (vLLM)
	usageOnce   sync.Once
	usageLines  []string
}

func newParser(prog, usage, positional string, underscores bool, flags []flagSpec) *argParser {
	p := &argParser{prog: prog, usageLine: usage, flags: flags, byName: map[string]int{},
		positional: positional, underscores: underscores}
	for i, f := range flags {
		for _, n := range f.names {
			p.byName[n] = i
			if f.kind == kBoolOpt {
				p.byName["--no-"+strings.TrimPrefix(n, "--")] = i
			}
		}
	}
	return p
}

// parsed holds argparse's Namespace: every dest with its value (defaults included) and which
// ones the command line set.
type parsed struct {
	vals  map[string]any
	given map[string]bool
}

// isOption is argparse's test for an option string: a leading '-', unless the word looks
// like a negative number (^-\d+$ or ^-\d*\.\d+$).
func isOption(a string) bool {
	return len(a) > 1 && a[0] == '-' && !isNegNumber(a)
}

func isNegNumber(a string) bool {
	digits, dot, afterDot := 0, false, 0
	for i := 1; i < len(a); i++ {
		switch c := a[i]; {
		case c >= '0' && c <= '9':
			digits++
			if dot {
				afterDot++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits > 0 && (!dot || afterDot > 0)
}

// parse parses args (the arguments after the program) like parse_args.
func (p *argParser) parse(args []string) (parsed, *ArgError) {
	res := parsed{vals: make(map[string]any, len(p.flags)+1), given: make(map[string]bool, len(args))}
	for _, f := range p.flags {
		res.vals[f.dest] = f.def
	}
	if p.positional != "" {
		res.vals[p.positional] = nil
	}
	var extras []string
	positional := func(a string) {
		if p.positional != "" && !res.given[p.positional] {
			res.vals[p.positional], res.given[p.positional] = a, true
			return
		}
		extras = append(extras, a)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			for _, r := range args[i+1:] {
				positional(r)
			}
			break
		}
		if !isOption(a) {
			positional(a)
			continue
		}
		if a == "-h" || a == "--help" {
			return res, &ArgError{Lines: p.usage(), ExitStatus: 0}
		}
		idx, name, explicit, hasExplicit, err := p.match(a)
		if err != nil {
			return res, err
		}
		if idx < 0 {
			if strings.Contains(a, " ") {
				positional(a)
			} else {
				extras = append(extras, a)
			}
			continue
		}
		f := p.flags[idx]
		label := strings.Join(f.names, "/")
		switch f.kind {
		case kTrue, kBoolOpt:
			if hasExplicit {
				return res, p.fail("argument " + label + ": ignored explicit argument " + pyRepr(explicit))
			}
			res.vals[f.dest] = f.kind == kTrue || !strings.HasPrefix(name, "--no-")
		case kList:
			var vals []string
			if hasExplicit {
				vals = append(vals, explicit)
			} else {
				for i+1 < len(args) && !isOption(args[i+1]) && args[i+1] != "--" {
					i++
					vals = append(vals, args[i])
				}
			}
			if len(vals) == 0 {
				return res, p.fail("argument " + label + ": expected at least one argument")
			}
			res.vals[f.dest] = vals
		default:
			v := explicit
			if !hasExplicit {
				if i+1 >= len(args) || isOption(args[i+1]) || args[i+1] == "--" {
					return res, p.fail("argument " + label + ": expected one argument")
				}
				i++
				v = args[i]
			}
			val, msg := convert(f, v)
			if msg != "" {
				return res, p.fail("argument " + label + ": " + msg)
			}
			res.vals[f.dest] = val
		}
		res.given[f.dest] = true
	}
	var missing []string
	for _, f := range p.flags {
		if f.required && !res.given[f.dest] {
			missing = append(missing, strings.Join(f.names, "/"))
		}
	}
	if len(missing) > 0 {
		return res, p.fail("the following arguments are required: " + strings.Join(missing, ", "))
	}
	if len(extras) > 0 {
		return res, p.fail("unrecognized arguments: " + strings.Join(extras, " "))
	}
	return res, nil
}

// match finds the flag an option string names: exact, then by unique prefix (long options).
// idx is -1 for an unknown option.
func (p *argParser) match(a string) (idx int, name, explicit string, hasExplicit bool, err *ArgError) {
	opt := a
	if k := strings.IndexByte(a, '='); k >= 0 {
		opt, explicit, hasExplicit = a[:k], a[k+1:], true
	}
	if p.underscores && strings.HasPrefix(opt, "--") {
		opt = "--" + strings.ReplaceAll(opt[2:], "_", "-")
	}
	if i, ok := p.byName[opt]; ok {
		return i, opt, explicit, hasExplicit, nil
	}
	if !strings.HasPrefix(opt, "--") || len(opt) < 3 {
		return -1, "", "", false, nil
	}
	var names []string
	for _, f := range p.flags {
		for _, n := range f.names {
			if strings.HasPrefix(n, opt) {
				names = append(names, n)
			}
			if f.kind == kBoolOpt {
				if no := "--no-" + strings.TrimPrefix(n, "--"); strings.HasPrefix(no, opt) {
					names = append(names, no)
				}
			}
		}
	}
	switch len(names) {
	case 0:
		return -1, "", "", false, nil
	case 1:
		return p.byName[names[0]], names[0], explicit, hasExplicit, nil
	}
	return -1, "", "", false, p.fail("ambiguous option: " + a + " could match " + strings.Join(names, ", "))
}

func convert(f flagSpec, v string) (any, string) {
	switch f.kind {
	case kInt:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return nil, "invalid int value: " + pyRepr(v)
		}
		return n, ""
	case kFloat:
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, "invalid float value: " + pyRepr(v)
		}
		return x, ""
	case kJSON:
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			return nil, "invalid loads value: " + pyRepr(v)
		}
		return x, ""
	}
	if len(f.choices) > 0 {
		for _, c := range f.choices {
			if c == v {
				return v, ""
			}
		}
		q := make([]string, len(f.choices))
		for i, c := range f.choices {
			q[i] = pyRepr(c)
		}
		return nil, "invalid choice: " + pyRepr(v) + " (choose from " + strings.Join(q, ", ") + ")"
	}
	return v, ""
}

// fail is parser.error: the usage, then "PROG: error: MSG", exit status 2.
func (p *argParser) fail(msg string) *ArgError {
	return &ArgError{Lines: append(p.usage(), p.prog+": error: "+msg), ExitStatus: 2}
}

// usage returns (a copy of) argparse's usage text, wrapped at 78 columns as without a terminal.
func (p *argParser) usage() []string {
	p.usageOnce.Do(func() { p.usageLines = p.renderUsage() })
	return append([]string(nil), p.usageLines...)
}

func (p *argParser) renderUsage() []string {
	if p.usageLine != "" {
		return []string{"usage: " + p.usageLine}
	}
	parts := []string{"[-h]"}
	for _, f := range p.flags {
		var part string
		switch f.kind {
		case kTrue:
			part = f.names[0]
		case kBoolOpt:
			part = f.names[0] + " | --no-" + strings.TrimPrefix(f.names[0], "--")
		default:
			meta := strings.ToUpper(f.dest)
			if len(f.choices) > 0 {
				meta = "{" + strings.Join(f.choices, ",") + "}"
			}
			part = f.names[0] + " " + meta
			if f.kind == kList {
				part += " [" + meta + " ...]"
			}
		}
		if !f.required {
			part = "[" + part + "]"
		}
		parts = append(parts, part)
	}
	head := "usage: " + p.prog + " "
	indent := strings.Repeat(" ", len(head))
	var lines []string
	line := head
	for _, part := range parts {
		if len(line) > len(head) && len(line)+len(part) > 78 {
			lines = append(lines, strings.TrimRight(line, " "))
			line = indent
		}
		line += part + " "
	}
	return append(lines, strings.TrimRight(line, " "))
}

// pyRepr quotes s like Python's repr of a str (enough for error messages).
func pyRepr(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	r := strings.NewReplacer(`\`, `\\`, q, `\`+q, "\n", `\n`, "\t", `\t`)
	return q + r.Replace(s) + q
}
