package unit

import (
	"strconv"
	"strings"
)

// DropIn renders a drop-in (for UNIT.d/opsbot.conf) that replaces the whole
// effective ExecStart= list with the edited one: an empty ExecStart= then each
// effective command line as written (continuations kept). It must sort after
// every other drop-in that sets ExecStart=, or those override it.
func DropIn(e *Edit) string {
	var b strings.Builder
	if e.Label != "" {
		b.WriteString("# Written by opsbot: " + e.Label)
	} else {
		b.WriteString("# Written by opsbot: speculative steps ")
		b.WriteString(strconv.Itoa(e.Steps))
		if e.Steps == 0 {
			b.WriteString(" (speculative decoding off)")
		}
	}
	b.WriteString(". Remove this file to restore the unit's own ExecStart=.\n[Service]\nExecStart=\n")
	for _, v := range e.execAfter {
		b.WriteString("ExecStart=")
		b.WriteString(v)
		b.WriteString("\n")
	}
	return b.String()
}
