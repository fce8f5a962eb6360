package commands

import (
	"strings"
	"testing"
	"time"
)

// TestParseScheduleTo: --to TARGETS on schedule add, canonical in the text
// (Parse(c.Text) gives the same command), before or after --dry-run.
func TestParseScheduleTo(t *testing.T) {
	for _, tc := range []struct{ in, text, to string }{
		{`schedule add --to slack:C0OPS "0 3 * * *" bench`, `schedule add --to slack:C0OPS "0 3 * * *" bench qwen`, "slack:C0OPS"},
		{`schedule add --to=slack:C0OPS,matrix:!ops:example.org "@daily" sweep steps 1..3`,
			`schedule add --to slack:C0OPS,matrix:!ops:example.org "@daily" sweep qwen steps 1..3`, "slack:C0OPS,matrix:!ops:example.org"},
		{`schedule add --dry-run --to slack:C1 "0 3 * * *" bench`, `schedule add --dry-run --to slack:C1 "0 3 * * *" bench qwen`, "slack:C1"},
	} {
		c, err := Parse(tc.in, optsOne)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		sa, ok := c.(*ScheduleAdd)
		if !ok {
			t.Fatalf("%s: parsed as %T, want *ScheduleAdd", tc.in, c)
		}
		if Text(c) != tc.text || sa.To != tc.to {
			t.Fatalf("%s: text %q to %q, want %q %q", tc.in, Text(c), sa.To, tc.text, tc.to)
		}
		again, err := Parse(Text(c), optsOne)
		if err != nil {
			t.Fatalf("re-parse %q: %v %+v", Text(c), err, again)
		}
		if sa2, ok := again.(*ScheduleAdd); !ok || Text(again) != Text(c) || sa2.To != sa.To {
			t.Fatalf("re-parse %q: %v %+v", Text(c), err, again)
		}
	}
}

func TestParseWatchdogCommands(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		in   string
		text string
		svc  string
		d    time.Duration
	}{
		{optsOne, "watchdog silence qwen 2h", "watchdog silence qwen 2h", "qwen", 2 * time.Hour},
		{optsOne, "watchdog silence 90m", "watchdog silence qwen 90m", "qwen", 90 * time.Minute},
		{optsOne, "watchdog silence 1h30m", "watchdog silence qwen 90m", "qwen", 90 * time.Minute},
		{optsDefault, "watchdog silence mini 1d", "watchdog silence mini 1d", "mini", 24 * time.Hour},
		{optsDefault, "watchdog silence 1d --dry-run", "watchdog silence llama 1d --dry-run", "llama", 24 * time.Hour},
	} {
		c, err := Parse(tc.in, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		ws, ok := c.(*WatchdogSilence)
		if !ok {
			t.Fatalf("%s: parsed as %T, want *WatchdogSilence", tc.in, c)
		}
		if Text(c) != tc.text || ws.Service != tc.svc || ws.For != tc.d {
			t.Fatalf("%s: %q %q %s", tc.in, Text(c), ws.Service, ws.For)
		}
	}
	c, err := Parse("ack #7", optsOne)
	if err != nil {
		t.Fatalf("ack #7: %v %+v", err, c)
	}
	if ack, ok := c.(*Ack); !ok || ack.Incident != 7 || Text(c) != "ack 7" {
		t.Fatalf("ack #7: %v %+v", err, c)
	}
}

func TestParseWatchdogBad(t *testing.T) {
	for _, tc := range []struct{ in, problem string }{
		{`schedule add --to "0 3 * * *" bench`, "--to needs TARGETS"},
		{`schedule add --to slack "0 3 * * *" bench`, "write platform:room"},
		{`schedule add --to irc:#ops "0 3 * * *" bench`, `unknown platform "irc"`},
		{`schedule add --to slack:C1,slack:C1 "0 3 * * *" bench`, "listed twice"},
		{`schedule add --to slack:C1 --to slack:C2 "0 3 * * *" bench`, "--to is given twice"},
		{`bench --to slack:C1`, "unknown flag"},
		{"watchdog silence qwen", "needs a DURATION"},
		{"watchdog silence qwen 30s", "at least 1m"},
		{"watchdog silence qwen 8d", "at most 7d"},
		{"watchdog silence qwen soon", "DURATION must be like"},
		{"watchdog silence nope 2h", "nope"},
		{"ack", "needs the INCIDENT number"},
		{"ack x", "the incident number must be a number"},
	} {
		_, err := Parse(tc.in, optsOne)
		if err == nil || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%s: error %v, want it to say %q", tc.in, err, tc.problem)
		}
	}
}
