package unit

import (
	"strings"
	"unicode/utf8"
)

// Command is one command line of an ExecStart= (or other Exec*=) value, as
// systemd parses it (systemd.service(5) "Command lines").
type Command struct {
	// Prefix is the special-executable prefix as written ("-", "@", "+", "!!", "-@", ...).
	Prefix        string
	IgnoreFailure bool // "-"
	SeparateArgv0 bool // "@": the second word is argv[0]
	NoEnvExpand   bool // ":": no $VAR substitution (and $$ stays $$)
	Privileged    bool // "+"
	NoSetUID      bool // "!"
	AmbientMagic  bool // "!!"

	// Path is the executable (first word without prefix); specifiers are kept.
	Path string
	// PathWord is the first word as written (its Span includes the prefix).
	PathWord Arg
	// Args is argv as the process sees it: Args[0] is argv[0] (the path
	// itself unless SeparateArgv0). Values have quotes and escapes removed,
	// $$ and %% collapsed; specifiers (%n) and environment references
	// (${FOO}, $FOO) are kept as written and recorded on each Arg.
	Args []Arg
	// Span covers the command's words in the text.
	Span Span
}

// Argv returns the argument values.
func (c *Command) Argv() []string {
	out := make([]string, len(c.Args))
	for i := range c.Args {
		out[i] = c.Args[i].Value
	}
	return out
}

// Arg is one word of a command line.
type Arg struct {
	// Value is the word after unquoting and unescaping, $$ -> $ and %% -> %.
	Value string
	// Span covers the word as written (quotes included) in the text.
	Span Span
	// Env lists environment references systemd substitutes at exec time.
	Env []EnvRef
	// Specifiers lists unit specifiers kept in Value (e.g. "%i", "%h").
	Specifiers []string

	src []srcByte // src[i]: where Value[i] comes from in the text
}

// EnvRef is an environment variable reference in an argument.
type EnvRef struct {
	Name string
	// Split is true for a word that is exactly $NAME: systemd splits the
	// value at whitespace into zero or more arguments.
	Split bool
}

// srcByte records the text bytes an output byte came from and the quote
// context it was written in: 0 (unquoted), a single or a double quote.
type srcByte struct {
	start, end int
	quote      byte
}

// ValueSpan returns the text span that produced Value[i:j] (i < j): replacing
// it with text that unquotes to X replaces Value[i:j] with X, provided X is
// safe in the quote context of those bytes.
func (a *Arg) ValueSpan(i, j int) Span {
	return Span{a.src[i].start, a.src[j-1].end}
}

// ParseCommandLine parses an ExecStart= value (continuations already joined)
// into its commands (several when separated by a lone ";"). Spans are byte
// offsets into value. An empty value yields no commands (the list reset).
func ParseCommandLine(value string) ([]Command, error) {
	return parseCommands(value, nil)
}

// ExecCommands parses the commands of an Exec*= entry; spans refer to u.Text.
func (e *Entry) ExecCommands() ([]Command, error) {
	cmds, err := parseCommands(e.Value, e)
	if err != nil {
		if se, ok := err.(*SyntaxError); ok {
			se.Line = e.Line
			se.Offset = e.TextPos(se.Offset)
		}
		return nil, err
	}
	return cmds, nil
}

type cmdParser struct {
	s   string
	ent *Entry // nil: identity mapping
}

func (p *cmdParser) tpos(i int) int {
	if p.ent == nil {
		return i
	}
	return p.ent.TextPos(i)
}

// span converts a value-index range to a text span.
func (p *cmdParser) span(a, b int) Span {
	if a >= b {
		return Span{p.tpos(a), p.tpos(a)}
	}
	if p.ent == nil {
		return Span{a, b}
	}
	return Span{p.tpos(a), p.tpos(b-1) + 1}
}

func parseCommands(value string, ent *Entry) ([]Command, error) {
	p := &cmdParser{s: value, ent: ent}
	var cmds []Command
	i := 0
	for {
		i = skipWS(value, i)
		if i >= len(value) {
			return cmds, nil
		}
		c, next, err := p.command(i)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c)
		i = next
	}
}

func skipWS(s string, i int) int {
	for i < len(s) && isWS(s[i]) {
		i++
	}
	return i
}

// command parses one command starting at i (not whitespace); returns the
// index after its terminating ";" (or len).
func (p *cmdParser) command(i int) (Command, int, error) {
	var c Command
	start := i
	w, next, err := p.word(i)
	if err != nil {
		return c, 0, err
	}
	// Prefixes are read from the unescaped first word, as systemd does.
	k := 0
	for k < len(w.b) {
		ch := w.b[k]
		switch {
		case ch == '-' && !c.IgnoreFailure:
			c.IgnoreFailure = true
		case ch == '@' && !c.SeparateArgv0:
			c.SeparateArgv0 = true
		case ch == ':' && !c.NoEnvExpand:
			c.NoEnvExpand = true
		case ch == '+' && !(c.Privileged || c.NoSetUID || c.AmbientMagic):
			c.Privileged = true
		case ch == '!' && !(c.Privileged || c.NoSetUID || c.AmbientMagic):
			c.NoSetUID = true
		case ch == '!' && c.NoSetUID:
			c.NoSetUID, c.AmbientMagic = false, true
		default:
			goto done
		}
		k++
	}
done:
	c.Prefix = string(w.b[:k])
	pw := rawWord{b: w.b[k:], src: w.src[k:], a: w.a, z: w.z}
	pathArg, err := p.finish(pw, false, true)
	if err != nil {
		return c, 0, err
	}
	pathArg.Span = p.span(w.a, w.z)
	c.Path = pathArg.Value
	c.PathWord = pathArg
	if err := checkPath(c.Path, w.a); err != nil {
		return c, 0, err
	}
	if !c.SeparateArgv0 {
		a0, err := p.finish(pw, c.NoEnvExpand, false)
		if err != nil {
			return c, 0, err
		}
		a0.Span = pathArg.Span
		c.Args = append(c.Args, a0)
	}
	end := w.z
	i = next
	for {
		i = skipWS(p.s, i)
		if i >= len(p.s) {
			break
		}
		if p.s[i] == ';' && (i+1 == len(p.s) || isWS(p.s[i+1])) {
			i++
			break
		}
		if p.s[i] == '\\' && i+1 < len(p.s) && p.s[i+1] == ';' && (i+2 == len(p.s) || isWS(p.s[i+2])) {
			a := Arg{Value: ";", Span: p.span(i, i+2), src: []srcByte{{start: p.tpos(i), end: p.span(i, i+2).End}}}
			c.Args = append(c.Args, a)
			end = i + 2
			i += 2
			continue
		}
		w, n, err := p.word(i)
		if err != nil {
			return c, 0, err
		}
		a, err := p.finish(w, c.NoEnvExpand, false)
		if err != nil {
			return c, 0, err
		}
		a.Span = p.span(w.a, w.z)
		c.Args = append(c.Args, a)
		end = w.z
		i = n
	}
	if len(c.Args) == 0 {
		return c, 0, &SyntaxError{Offset: start, Msg: "empty executable name or zeroth argument"}
	}
	c.Span = p.span(start, end)
	return c, i, nil
}

func checkPath(path string, off int) error {
	bad := func(msg string) error { return &SyntaxError{Offset: off, Msg: msg + ": " + quoteMsg(path)} }
	if path == "" {
		return &SyntaxError{Offset: off, Msg: "empty path in command line"}
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c < ' ' || c == 0x7f || c == '\\' || c == '"' || c == '\'' {
			return bad("executable name contains special characters")
		}
	}
	if strings.HasSuffix(path, "/") {
		return bad("executable path specifies a directory")
	}
	if path[0] != '/' && !absSpecifierPrefix(path) && (strings.Contains(path, "/") || path == "." || path == ".." || len(path) > 255) {
		return bad("neither a valid executable name nor an absolute path")
	}
	return nil
}

// absSpecifiers are the unit specifiers that systemd resolves to an absolute
// directory or file (systemd.unit(5)): home, runtime, state, cache, logs,
// configuration, temporary and credentials directories, the unit file and
// its directory. A path that starts with one is absolute once resolved, so
// systemd accepts it as an executable path (`%h/venv/bin/python3`).
const absSpecifiers = "hdtSCLETVyY"

func absSpecifierPrefix(path string) bool {
	return len(path) >= 2 && path[0] == '%' && strings.IndexByte(absSpecifiers, path[1]) >= 0 &&
		(len(path) == 2 || path[2] == '/')
}

// rawWord is a word after unquoting/unescaping, before specifiers and env.
type rawWord struct {
	b    []byte
	src  []srcByte // text spans (already mapped)
	a, z int       // value-index range of the word as written
}

// word extracts one word at i like systemd's extract_first_word with
// EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE and whitespace separators.
func (p *cmdParser) word(i int) (rawWord, int, error) {
	s := p.s
	w := rawWord{a: i}
	var quote byte
	for i < len(s) {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
			i++
		case quote == 0 && isWS(c):
			w.z = i
			return w, i, nil
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
			i++
		case c == 0:
			return w, 0, &SyntaxError{Offset: i, Msg: "NUL byte in command line"}
		case c == '\\':
			out, n, err := cunescape(s, i+1)
			if err != nil {
				return w, 0, &SyntaxError{Offset: i, Msg: err.Error()}
			}
			sp := p.span(i, i+1+n)
			for _, b := range out {
				w.b = append(w.b, b)
				w.src = append(w.src, srcByte{sp.Start, sp.End, quote})
			}
			i += 1 + n
		default:
			w.b = append(w.b, c)
			sp := p.span(i, i+1)
			w.src = append(w.src, srcByte{sp.Start, sp.End, quote})
			i++
		}
	}
	if quote != 0 {
		return w, 0, &SyntaxError{Offset: w.a, Msg: "unbalanced quotes in command line"}
	}
	w.z = i
	return w, i, nil
}

type escErr string

func (e escErr) Error() string { return string(e) }

// cunescape decodes the escape whose character follows the backslash at s[i].
// It returns the bytes and how many characters after the backslash it used.
func cunescape(s string, i int) ([]byte, int, error) {
	if i >= len(s) {
		return nil, 0, escErr("trailing backslash in command line")
	}
	hexv := func(j, n int) (rune, bool) {
		if j+n > len(s) {
			return 0, false
		}
		var v rune
		for k := j; k < j+n; k++ {
			c := s[k]
			var d byte
			switch {
			case c >= '0' && c <= '9':
				d = c - '0'
			case c >= 'a' && c <= 'f':
				d = c - 'a' + 10
			case c >= 'A' && c <= 'F':
				d = c - 'A' + 10
			default:
				return 0, false
			}
			v = v<<4 | rune(d)
		}
		return v, true
	}
	switch c := s[i]; c {
	case 'a':
		return []byte{7}, 1, nil
	case 'b':
		return []byte{8}, 1, nil
	case 'f':
		return []byte{12}, 1, nil
	case 'n':
		return []byte{'\n'}, 1, nil
	case 'r':
		return []byte{'\r'}, 1, nil
	case 't':
		return []byte{'\t'}, 1, nil
	case 'v':
		return []byte{11}, 1, nil
	case '\\', '"', '\'':
		return []byte{c}, 1, nil
	case 's':
		return []byte{' '}, 1, nil
	case 'x':
		v, ok := hexv(i+1, 2)
		if !ok || v == 0 {
			return nil, 0, escErr("invalid \\x escape in command line")
		}
		return []byte{byte(v)}, 3, nil
	case 'u', 'U':
		n := 4
		if c == 'U' {
			n = 8
		}
		v, ok := hexv(i+1, n)
		if !ok || v == 0 || !utf8.ValidRune(v) {
			return nil, 0, escErr("invalid \\" + string(c) + " escape in command line")
		}
		return utf8.AppendRune(nil, v), 1 + n, nil
	case '0', '1', '2', '3', '4', '5', '6', '7':
		if i+3 > len(s) {
			return nil, 0, escErr("invalid octal escape in command line")
		}
		v := 0
		for k := i; k < i+3; k++ {
			if s[k] < '0' || s[k] > '7' {
				return nil, 0, escErr("invalid octal escape in command line")
			}
			v = v<<3 | int(s[k]-'0')
		}
		if v == 0 || v > 255 {
			return nil, 0, escErr("invalid octal escape in command line")
		}
		return []byte{byte(v)}, 3, nil
	default:
		return nil, 0, escErr("invalid escape sequence \\" + string(rune(c)) + " in command line")
	}
}

// specifierChars are the unit specifiers systemd resolves (systemd.unit(5)).
const specifierChars = "aAbBCdDEfgGhHiIjJlLmMnNopPqsStTuUvVwWyY"

// finish applies specifier handling (%% -> %, %x recorded) and, unless noEnv
// or pathOnly, environment handling ($$ -> $, ${X} and $X recorded).
func (p *cmdParser) finish(w rawWord, noEnv, pathOnly bool) (Arg, error) {
	var a Arg
	b := make([]byte, 0, len(w.b))
	src := make([]srcByte, 0, len(w.src))
	for i := 0; i < len(w.b); i++ {
		if w.b[i] != '%' {
			b = append(b, w.b[i])
			src = append(src, w.src[i])
			continue
		}
		if i+1 >= len(w.b) {
			return a, &SyntaxError{Offset: w.a, Msg: "unit specifier '%' at the end of a word (write %% for a literal %)"}
		}
		n := w.b[i+1]
		switch {
		case n == '%':
			b = append(b, '%')
			src = append(src, srcByte{w.src[i].start, w.src[i+1].end, w.src[i].quote})
		case strings.IndexByte(specifierChars, n) >= 0:
			b = append(b, '%', n)
			src = append(src, w.src[i], w.src[i+1])
			a.Specifiers = append(a.Specifiers, "%"+string(n))
		default:
			return a, &SyntaxError{Offset: w.a, Msg: "unknown unit specifier %" + string(rune(n)) + " (write %% for a literal %)"}
		}
		i++
	}
	if !noEnv && !pathOnly {
		if len(b) > 1 && b[0] == '$' && validEnvName(b[1:]) {
			a.Env = append(a.Env, EnvRef{Name: string(b[1:]), Split: true})
		} else {
			b2 := make([]byte, 0, len(b))
			src2 := make([]srcByte, 0, len(src))
			for i := 0; i < len(b); i++ {
				if b[i] == '$' && i+1 < len(b) {
					if b[i+1] == '$' {
						b2 = append(b2, '$')
						src2 = append(src2, srcByte{src[i].start, src[i+1].end, src[i].quote})
						i++
						continue
					}
					if b[i+1] == '{' {
						if j := indexByteFrom(b, '}', i+2); j > 0 && validEnvName(b[i+2:j]) {
							a.Env = append(a.Env, EnvRef{Name: string(b[i+2 : j])})
						}
					}
				}
				b2 = append(b2, b[i])
				src2 = append(src2, src[i])
			}
			b, src = b2, src2
		}
	}
	a.Value = string(b)
	a.src = src
	return a, nil
}

func indexByteFrom(b []byte, c byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] == c {
			return i
		}
	}
	return -1
}

func validEnvName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for i, c := range b {
		ok := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// Quote renders a literal argument for an ExecStart= line: parsing the result
// gives back s exactly (no specifier or environment expansion: % and $ are
// doubled). Plain words are returned as they are.
func Quote(s string) string {
	if s == "" {
		return `""`
	}
	plain := s != ";"
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			strings.IndexByte("_-+=:,./@^~", c) >= 0
	}
	if plain {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		b.WriteString(escapeByte(s[i], '"'))
	}
	b.WriteByte('"')
	return b.String()
}

// escapeByte renders one literal byte for the given quote context.
func escapeByte(c byte, quote byte) string {
	switch {
	case c == '%':
		return "%%"
	case c == '$':
		return "$$"
	case c == '\\':
		return `\\`
	case c == '"' && quote != '\'':
		return `\"`
	case c == '\'' && quote != '"':
		return `\'`
	case c == '\n':
		return `\n`
	case c == '\t':
		return `\t`
	case c == '\r':
		return `\r`
	case c == ' ' && quote == 0:
		return `\s`
	case c < ' ' || c >= 0x7f:
		const hx = "0123456789abcdef"
		return `\x` + string([]byte{hx[c>>4], hx[c&15]})
	}
	return string([]byte{c})
}

// escapeFor renders literal text for insertion at a point written in the
// given quote context.
func escapeFor(s string, quote byte) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString(escapeByte(s[i], quote))
	}
	return b.String()
}
