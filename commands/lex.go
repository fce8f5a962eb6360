package commands

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// normalize undoes what chat clients do to typed text: smart quotes become ASCII
// quotes, a dash that starts a word (Slack turns `--dry-run` into `—dry-run`)
// becomes `--` and one inside a word `-`, an ellipsis `..`, non-breaking and other
// Unicode spaces and tabs a space, zero-width characters and soft hyphens vanish.
// Then it trims, and strips one leading `/` or `!`. Pure ASCII input without tabs
// is returned without allocating.
func normalize(s string) string {
	fast := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || c == '\t' {
			fast = false
			break
		}
	}
	if !fast {
		s = normalizeSlow(s)
	}
	s = strings.TrimSpace(s)
	if len(s) > 0 && (s[0] == '/' || s[0] == '!') {
		s = strings.TrimSpace(s[1:])
	}
	return s
}

func normalizeSlow(s string) string {
	buf := make([]byte, 0, len(s)+8)
	tokStart := 0 // index in buf where the current word starts
	for _, r := range s {
		switch r {
		case '\u2018', '\u2019', '\u201a', '\u201b', '\u2032':
			buf = append(buf, '\'')
		case '\u201c', '\u201d', '\u201e', '\u201f', '\u2033', '\u00ab', '\u00bb':
			buf = append(buf, '"')
		case '\u2010', '\u2011':
			buf = append(buf, '-')
		case '\u2012', '\u2013', '\u2014', '\u2015', '\u2212', '\ufe58', '\ufe63', '\uff0d':
			word := buf[tokStart:]
			switch {
			case len(word) == 0:
				buf = append(buf, '-', '-')
			case strings.Trim(string(word), "-") == "":
				if len(word) == 1 {
					buf = append(buf, '-')
				}
			default:
				buf = append(buf, '-')
			}
		case '\u2026':
			buf = append(buf, '.', '.')
		case '\t', '\v', '\f', '\u00a0', '\u1680', '\u2000', '\u2001', '\u2002', '\u2003', '\u2004',
			'\u2005', '\u2006', '\u2007', '\u2008', '\u2009', '\u200a', '\u202f', '\u205f', '\u3000':
			buf = append(buf, ' ')
			tokStart = len(buf)
		case '\u200b', '\u200c', '\u200d', '\u2060', '\ufeff', '\u00ad':
			// dropped
		default:
			buf = utf8.AppendRune(buf, r)
			if r == ' ' {
				tokStart = len(buf)
			}
		}
	}
	return string(buf)
}

// token is one word of the input. A quoted token holds the text between the quotes.
type token struct {
	s      string
	quoted bool
}

// maxTokens bounds the words of a command (a schedule with a long sweep list fits).
const maxTokens = 48

// lexer splits normalized text into tokens. It stops at the first problem and
// records it; the parser reports it with the usage of the command it could
// identify from the tokens before it.
type lexer struct {
	problem string // "" when the whole input was split
}

// isShellMeta reports the characters that only a shell gives meaning to.
func isShellMeta(c byte) bool {
	switch c {
	case ';', '|', '&', '$', '`', '(', ')', '<', '>', '\\', '{', '}':
		return true
	}
	return false
}

// lex appends the tokens of s to buf (the caller's stack array) and returns them.
func (lx *lexer) lex(s string, buf []token) []token {
	toks := buf[:0]
	i := 0
	for i < len(s) {
		c := s[i]
		if c == ' ' {
			i++
			continue
		}
		if len(toks) == maxTokens {
			lx.problem = fmt.Sprintf("too many words (at most %d)", maxTokens)
			return toks
		}
		if c == '"' || c == '\'' {
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				lx.problem = fmt.Sprintf("unterminated quote: %c without a closing %c", c, c)
				return toks
			}
			end := i + 1 + j
			if end+1 < len(s) && s[end+1] != ' ' {
				lx.problem = "put a space after the closing quote"
				return toks
			}
			toks = append(toks, token{s: s[i+1 : end], quoted: true})
			i = end + 1
			continue
		}
		start := i
		for i < len(s) && s[i] != ' ' {
			c := s[i]
			if c < 0x20 || c >= 0x7f || isShellMeta(c) || c == '"' || c == '\'' {
				lx.problem = badChar(s, i)
				return toks
			}
			i++
		}
		toks = append(toks, token{s: s[start:i]})
	}
	return toks
}

// badChar describes the character at s[i] that no command may contain.
func badChar(s string, i int) string {
	c := s[i]
	switch {
	case c == '\n' || c == '\r':
		return "a command is a single line: found a line break"
	case isShellMeta(c):
		return fmt.Sprintf("%q is not allowed: opsbot commands are not shell commands (; | & $ ( ) < > \\ and backticks are refused)", string(c))
	case c == '"' || c == '\'':
		return "quotes may only surround a whole word (the cron spec)"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("unexpected control character U+%04X", c)
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError {
		return "the text is not valid UTF-8"
	}
	return fmt.Sprintf("unexpected character %q (U+%04X): names and numbers are plain ASCII", string(r), r)
}
