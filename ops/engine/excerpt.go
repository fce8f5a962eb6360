package engine

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// ExcerptRunes is the most characters of an engine's text an Excerpt keeps.
const ExcerptRunes = 160

// Excerpt is how text from an engine's answer (a body, a header such as
// Location, an error inside a stream, a line it served) is quoted in an
// error, a chat message or a log: short and printable. Runs of white space
// and of characters that are not printable (control characters, escapes,
// invalid UTF-8) become one space, the ends are trimmed, and the text is cut
// after ExcerptRunes characters, the cut marked "...". Every quote of an
// engine's text goes through it, so what an engine (or whatever holds its
// port) says can neither flood nor rewrite what a person reads.
func Excerpt(s string) string {
	out := make([]rune, 0, min(len(s), ExcerptRunes+1))
	gap := false
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			gap = len(out) > 0
			continue
		}
		if gap {
			out, gap = append(out, ' '), false
		}
		if len(out) >= ExcerptRunes {
			return strings.TrimRight(string(out[:ExcerptRunes]), " ") + "..."
		}
		out = append(out, r)
	}
	return string(out)
}
