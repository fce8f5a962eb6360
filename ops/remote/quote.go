package remote

import "strings"

// Quote joins argv into one command line for a POSIX shell, so that the shell splits it back
// into exactly argv with no expansion of any kind. A word made only of characters the shell
// never treats specially is left bare; every other word is single-quoted (an embedded single
// quote is written as quote, backslash, quote, quote), and the empty word becomes a pair of
// single quotes. Words containing "=" or starting with "~" are quoted, so an assignment-looking
// word stays an argument. Quote cannot express a NUL byte; Run refuses such words.
func Quote(argv []string) string {
	var b strings.Builder
	for i, w := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		quoteWord(&b, w)
	}
	return b.String()
}

func quoteWord(b *strings.Builder, w string) {
	if w != "" && isSafe(w) {
		b.WriteString(w)
		return
	}
	b.WriteByte('\'')
	b.WriteString(strings.ReplaceAll(w, "'", `'\''`))
	b.WriteByte('\'')
}

// isSafe reports whether w needs no quoting in any position of a simple command.
func isSafe(w string) bool {
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-_./:,+@%", c) >= 0:
		default:
			return false
		}
	}
	return true
}
