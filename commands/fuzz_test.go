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
		again, err := Parse(c.Text, opts)
		if err != nil {
			t.Fatalf("Parse(%q) accepted as %q, which fails: %v", in, c.Text, err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip of %q via %q:\n got %+v\nwant %+v", in, c.Text, *again, *c)
		}
	})
}

func checkAccepted(t *testing.T, in string, c *Command, opts Options) {
	t.Helper()
	for cc := c; cc != nil; cc = cc.Sub {
		if cc.Service != "" {
			if !ValidName(cc.Service) {
				t.Fatalf("Parse(%q): service %q is not a valid name", in, cc.Service)
			}
			found := false
			for _, s := range opts.Services {
				found = found || (s.Name == cc.Service && s.Host == cc.Host)
			}
			if !found {
				t.Fatalf("Parse(%q): service %q on %q is not configured", in, cc.Service, cc.Host)
			}
		}
		if cc.Host != "" && !ValidName(cc.Host) {
			t.Fatalf("Parse(%q): host %q is not a valid name", in, cc.Host)
		}
		if cc.Steps > opts.maxSteps() || cc.Steps < 0 {
			t.Fatalf("Parse(%q): steps %d out of range", in, cc.Steps)
		}
	}
	// Outside the quoted cron spec the text is plain ASCII words.
	text := c.Text
	if c.Cron != "" {
		text = strings.Replace(text, `"`+c.Cron+`"`, "CRON", 1)
		if strings.ContainsAny(c.Cron, ";|&$`()<>\\{}\"'\n\r") {
			t.Fatalf("Parse(%q): cron %q holds a shell metacharacter", in, c.Cron)
		}
	}
	for i := 0; i < len(text); i++ {
		ch := text[i]
		if ch < 0x20 || ch >= 0x7f || isShellMeta(ch) || ch == '"' || ch == '\'' {
			t.Fatalf("Parse(%q): Text %q holds %q", in, c.Text, ch)
		}
	}
}
