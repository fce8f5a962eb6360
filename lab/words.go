package lab

import (
	"fmt"
	"strings"
)

// SyntaxError reports a command string or unit value that cannot be split into words.
type SyntaxError struct {
	Input   string
	Problem string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("split %q: %s", e.Input, e.Problem)
}

// SplitShell splits a command string into words with POSIX sh quoting rules: single quotes are
// literal, double quotes honour the backslash escapes \\ \" \$ \` and backslash-newline, a bare
// backslash quotes the next character, and blanks (space, tab, newline) separate words. It does
// no expansion of any kind; operators such as ';' or '|' are ordinary characters. An unterminated
// quote or a trailing backslash is a *SyntaxError.
func SplitShell(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, &SyntaxError{Input: s, Problem: "unterminated quoted string"}
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			inWord = true
			i++
			for ; ; i++ {
				if i >= len(s) {
					return nil, &SyntaxError{Input: s, Problem: "unterminated quoted string"}
				}
				d := s[i]
				if d == '"' {
					break
				}
				if d == '\\' && i+1 < len(s) {
					switch n := s[i+1]; n {
					case '\\', '"', '$', '`':
						cur.WriteByte(n)
						i++
						continue
					case '\n':
						i++
						continue
					}
				}
				cur.WriteByte(d)
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, &SyntaxError{Input: s, Problem: "trailing backslash"}
			}
			i++
			if s[i] == '\n' {
				continue
			}
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
