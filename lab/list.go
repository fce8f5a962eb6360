package lab

import "strings"

// splitList cuts a command string into the simple commands of a POSIX sh
// list at each ';' outside quotes ("a; b" runs a, then b, as sh does),
// keeping each part's quoting for SplitShell. It recognises the quoting
// SplitShell does (single quotes, double quotes with their backslash
// escapes, a bare backslash); no other operator is one here ('|', '&&'
// stay ordinary characters). An unterminated quote is left to SplitShell
// to report.
func splitList(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return append(parts, s[start:])
			}
			i += j + 1
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case ';':
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}
