package commands

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; every error is a *UsageError with a problem and a
// usage line; anything accepted round-trips through its Text, names only
// configured services and hosts, and its Text carries no shell metacharacter.
func FuzzParse(f *testing.F) {
	for _, s := range benchMix {
		f.Add(s, false)
	}
	for _, s := range Specs() {
		for _, ex := range s.Examples {
			f.Add(ex, true)
		}
	}
	for _, s := range []string{
		"mtp steps 10 \u2014dry-run", "sweep steps 1, 2 ,3..5", `schedule add "CRON_TZ=Europe/Berlin 0 3 * * *" bench in=5`,
		"schedule add @every 1h mtp steps 3", `schedule add "TZ=UTC" bench`, "help /svc logs", "cancel #7", "gpu recover gpu2 --force",
		"mtp steps 10; rm -rf /", "$(reboot)", "`id`", "mtp steps 10\nreboot", "gpu status llama",
	} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, in string, multi bool) {
		opts := optsOne
		if multi {
			opts = optsMulti
		}
		c, err := Parse(in, opts)
		if err != nil {
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("Parse(%q): error %T, want *UsageError", in, err)
			}
			if ue.Problem == "" || !strings.HasPrefix(ue.Usage, "usage: ") {
				t.Fatalf("Parse(%q): incomplete usage error %+v", in, *ue)
			}
			return
		}
		checkAccepted(t, in, c, opts)
		again, err := Parse(Text(c), opts)
		if err != nil {
			t.Fatalf("Parse(%q) accepted as %q, which fails: %v", in, Text(c), err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip of %q via %q:\n got %+v\nwant %+v", in, Text(c), again, c)
		}
	})
}

// scheduled returns the command c schedules (schedule add's), or nil.
func scheduled(c Command) Command {
	if sa, ok := c.(*ScheduleAdd); ok {
		return sa.Sub
	}
	return nil
}

func checkAccepted(t *testing.T, in string, c Command, opts Options) {
	t.Helper()
	for cc := c; cc != nil; cc = scheduled(cc) {
		on := Where(cc)
		if on.Service != "" {
			if !ValidName(on.Service) {
				t.Fatalf("Parse(%q): service %q is not a valid name", in, on.Service)
			}
			found := false
			for _, s := range opts.Services {
				found = found || (s.Name == on.Service && s.Host == on.Host)
			}
			if !found {
				t.Fatalf("Parse(%q): service %q on %q is not configured", in, on.Service, on.Host)
			}
		}
		if on.Host != "" && !ValidName(on.Host) {
			t.Fatalf("Parse(%q): host %q is not a valid name", in, on.Host)
		}
		if ms, ok := cc.(*MTPSteps); ok && (ms.Steps > opts.maxSteps() || ms.Steps < 0) {
			t.Fatalf("Parse(%q): steps %d out of range", in, ms.Steps)
		}
	}
	// Outside the quoted cron spec the text is plain ASCII words.
	text := Text(c)
	if sa, ok := c.(*ScheduleAdd); ok && sa.Cron != "" {
		text = strings.Replace(text, `"`+sa.Cron+`"`, "CRON", 1)
		if strings.ContainsAny(sa.Cron, ";|&$`()<>\\{}\"'\n\r") {
			t.Fatalf("Parse(%q): cron %q holds a shell metacharacter", in, sa.Cron)
		}
	}
	for i := 0; i < len(text); i++ {
		ch := text[i]
		if ch < 0x20 || ch >= 0x7f || isShellMeta(ch) || ch == '"' || ch == '\'' {
			t.Fatalf("Parse(%q): Text %q holds %q", in, Text(c), ch)
		}
	}
}
