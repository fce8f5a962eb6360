package bench

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Figures are rounded where they are made: no float noise reaches JSON or text.
func TestFiguresAreRounded(t *testing.T) {
	t.Parallel()
	acceptLen, k := 7.68, 10.0 // the incident's steps 10; variables: constant arithmetic would be exact
	if got := (acceptLen - 1) / k; got == 0.668 {
		t.Fatalf("the example no longer shows float noise (%v): pick another", got)
	}
	if got := round((acceptLen - 1) / k); got != 0.668 {
		t.Errorf("round((7.68-1)/10) = %v, want 0.668", got)
	}
	rows := []RequestRow{
		{OK: true, OutputTokens: 7, TTFTMs: 10.1 / 3, E2EMs: 100.0 / 3, TPOTMs: 1.0 / 3, itl: []time.Duration{time.Millisecond / 3}},
		{OK: true, OutputTokens: 7, TTFTMs: 20.2 / 3, E2EMs: 200.0 / 3, TPOTMs: 2.0 / 3},
	}
	var r Result
	r.compute(rows, 1234567891*time.Nanosecond/3)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	// Every figure keeps at most figureDigits significant digits.
	for _, m := range regexp.MustCompile(`-?[0-9][0-9.e+-]*`).FindAll(b, -1) {
		v, err := strconv.ParseFloat(string(m), 64)
		if err != nil {
			continue
		}
		if digits := len(strings.TrimLeft(strings.ReplaceAll(strconv.FormatFloat(v, 'e', -1, 64)[:strings.IndexByte(strconv.FormatFloat(v, 'e', -1, 64), 'e')], ".", ""), "-")); digits > figureDigits {
			t.Errorf("unrounded figure %s (%d significant digits) in %s", m, digits, b)
		}
	}
}
