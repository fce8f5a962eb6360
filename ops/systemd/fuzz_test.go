package systemd

import (
	"strings"
	"testing"
)

func FuzzParseShow(f *testing.F) {
	f.Add([]byte("ActiveState=active\nSubState=running\nNRestarts=0\n"))
	f.Add([]byte("NRestarts=abc\n"))
	f.Add([]byte("=x\n\n"))
	f.Add([]byte("RestartUSec=1min 30s\nExecMainStartTimestamp=Wed 2026-12-02 18:00:00 UTC\nActiveEnterTimestamp=@1700000000.5\n"))
	f.Add([]byte("RestartUSec=9999999999999999999d\nDropInPaths=/a /b\r\nNeedDaemonReload=maybe\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseShow(b)
		if err != nil {
			return
		}
		// A parsed state round-trips through FormatProps.
		again, err := ParseShow([]byte(FormatProps(st.Props)))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", FormatProps(st.Props), err)
		}
		if again.ActiveState != st.ActiveState || again.NRestarts != st.NRestarts {
			t.Fatalf("round trip changed %v to %v", st, again)
		}
		_ = st.String()
	})
}

func FuzzDiagnose(f *testing.F) {
	f.Add("Traceback (most recent call last):\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
	f.Add("[x] (y) Traceback (most recent call last):\n(EngineCore pid=1) ValueError: x\nTypeError: 'NoneType'")
	f.Add("error: argument --tp\n\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		lines := strings.Split(s, "\n")
		d := Diagnose(lines)
		if d.Known() {
			found := false
			for _, l := range lines {
				if strings.TrimSpace(l) == d.Line {
					found = true
				}
			}
			if !found {
				t.Fatalf("decisive line %q is not one of the input lines", d.Line)
			}
		}
	})
}
