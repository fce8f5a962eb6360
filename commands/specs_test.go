package commands

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestSpecs pins every command's declared policy: usage line, role, mutating,
// confirmation, lock and whether it can be scheduled.
func TestSpecs(t *testing.T) {
	type policy struct {
		usage                    string
		role                     Role
		mutating, confirm, sched bool
		lock                     Lock
	}
	wantSpecs := map[string]policy{
		"mtp steps":        {"mtp steps N [SERVICE] [--dry-run]", Operator, true, false, true, LockService},
		"mtp off":          {"mtp off [SERVICE] [--dry-run]", Operator, true, false, false, LockService},
		"mtp tune":         {"mtp tune [SERVICE] [per-load] [RANGE] [at N|LIST] [compare] [--dry-run]", Operator, true, false, true, LockService},
		"mtp per-load":     {"mtp per-load [SERVICE] TABLE [skip-zero-extend] [--dry-run]", Operator, true, true, false, LockService},
		"mtp show":         {"mtp show [SERVICE]", Viewer, false, false, false, LockNone},
		"mtp undo":         {"mtp undo [SERVICE] [--dry-run]", Operator, true, true, false, LockService},
		"gpu health":       {"gpu health [SERVICE|HOST]", Viewer, false, false, false, LockNone},
		"engine set":       {"engine set FLAG VALUE [SERVICE] [--dry-run]", Operator, true, true, false, LockService},
		"engine show":      {"engine show [SERVICE]", Viewer, false, false, false, LockNone},
		"gpu status":       {"gpu status [HOST]", Viewer, false, false, false, LockNone},
		"gpu recover":      {"gpu recover [HOST|SERVICE] [--no-start] [--force] [--dry-run]", Operator, true, true, true, LockService},
		"gpu reset":        {"gpu reset GPU... [NODE] [--dry-run]", Admin, true, true, false, LockNone},
		"svc start":        {"svc start [SERVICE] [--dry-run]", Operator, true, false, true, LockService},
		"svc stop":         {"svc stop [SERVICE] [--dry-run]", Operator, true, true, true, LockService},
		"svc restart":      {"svc restart [SERVICE] [--dry-run]", Operator, true, false, true, LockService},
		"svc status":       {"svc status [SERVICE]", Viewer, false, false, false, LockNone},
		"svc logs":         {"svc logs [SERVICE] [lines=N]", Viewer, false, false, false, LockNone},
		"bench":            {"bench [SERVICE] [prompts=N] [concurrency=N] [in=N] [out=N] [--dry-run]", Operator, true, false, true, LockService},
		"sweep":            {"sweep [SERVICE] steps LIST [topk LIST] [draft LIST] [at LIST] [--apply-best] [--dry-run]", Operator, true, false, true, LockService},
		"schedule add":     {`schedule add [--dry-run] [--to TARGETS] "CRON" COMMAND...`, Admin, true, false, false, LockNone},
		"schedule list":    {"schedule list", Viewer, false, false, false, LockNone},
		"schedule rm":      {"schedule rm ID [--dry-run]", Admin, true, false, false, LockNone},
		"schedule pause":   {"schedule pause ID [--dry-run]", Admin, true, false, false, LockNone},
		"schedule resume":  {"schedule resume ID [--dry-run]", Admin, true, false, false, LockNone},
		"watchdog silence": {"watchdog silence [SERVICE] DURATION [--dry-run]", Operator, true, false, false, LockNone},
		"ack":              {"ack INCIDENT", Operator, false, false, false, LockNone},
		"jobs":             {"jobs [all]", Viewer, false, false, false, LockNone},
		"job":              {"job JOB", Viewer, false, false, false, LockNone},
		"cancel":           {"cancel JOB", Operator, false, false, false, LockNone},
		"history":          {"history [SERVICE] [n=N]", Viewer, false, false, false, LockNone},
		"fleet":            {"fleet [SERVICE]", Viewer, false, false, false, LockNone},
		"help":             {"help [COMMAND]", Viewer, false, false, false, LockNone},
	}
	specs := Specs()
	if len(specs) != len(wantSpecs) {
		t.Fatalf("%d specs, want %d", len(specs), len(wantSpecs))
	}
	for _, s := range specs {
		w, ok := wantSpecs[s.Path]
		if !ok {
			t.Errorf("unexpected spec %q", s.Path)
			continue
		}
		got := policy{s.Usage, s.Role, s.Mutating, s.Confirm, s.Schedulable, s.Lock}
		if got != w {
			t.Errorf("%s:\n got %+v\nwant %+v", s.Path, got, w)
		}
		if s.Summary == "" || len(s.Examples) == 0 {
			t.Errorf("%s: needs a summary and examples", s.Path)
		}
		if Lookup(s.Path) != s {
			t.Errorf("Lookup(%q) is not the registry's spec", s.Path)
		}
		// Read-only commands never lock; commands that lock mutate.
		if !s.Mutating && s.Lock != LockNone {
			t.Errorf("%s: read-only but locks %s", s.Path, s.Lock)
		}
	}
	// Specs returns a copy of the list: changing it leaves the registry intact.
	specs[0] = nil
	if Specs()[0] == nil {
		t.Fatal("Specs() exposes the registry slice")
	}
}

// TestExamples checks that help never shows an example that does not parse.
func TestExamples(t *testing.T) {
	for _, s := range Specs() {
		for _, ex := range s.Examples {
			c, err := Parse(ex, optsOne)
			if err != nil {
				t.Errorf("%s example %q: %v", s.Path, ex, err)
				continue
			}
			if c.Spec() != s {
				t.Errorf("example %q parsed as %s, want %s", ex, c.Spec().Path, s.Path)
			}
		}
	}
}

// TestDryRunRule: every mutating command accepts --dry-run and then mutates,
// confirms and locks nothing; every read-only command rejects it.
func TestDryRunRule(t *testing.T) {
	for _, s := range Specs() {
		ex := s.Examples[0]
		if s.Path == "schedule add" {
			ex = strings.Replace(ex, "schedule add", "schedule add --dry-run", 1)
		} else if !strings.Contains(ex, "--dry-run") {
			ex += " --dry-run"
		}
		c, err := Parse(ex, optsOne)
		if !s.Mutating {
			var ue *UsageError
			if !errors.As(err, &ue) || ue.Problem != s.Path+" is read-only: it does not take --dry-run" {
				t.Errorf("%q: got %v, want the read-only usage error", ex, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", ex, err)
			continue
		}
		if !IsDryRun(c) || Mutates(c) || NeedsConfirm(c) || LockedService(c) != "" {
			t.Errorf("%q: DryRun=%v Mutates=%v NeedsConfirm=%v LockedService=%q", ex, IsDryRun(c), Mutates(c), NeedsConfirm(c), LockedService(c))
		}
		if RoleOf(c) != s.Role {
			t.Errorf("%q: a dry run needs role %s, want %s (the spec's)", ex, RoleOf(c), s.Role)
		}
	}
}

func TestCommandPolicy(t *testing.T) {
	tests := []struct {
		in            string
		role          Role
		mutates       bool
		confirm       bool
		lockedService string
	}{
		{"mtp steps 10", Operator, true, false, "qwen"},
		{"mtp show", Viewer, false, false, ""},
		{"gpu status", Viewer, false, false, ""},
		{"gpu recover", Operator, true, true, "qwen"},
		{"gpu recover --force", Admin, true, true, "qwen"},
		{"gpu recover --force --dry-run", Admin, false, false, ""},
		{"svc start", Operator, true, false, "qwen"},
		{"svc stop", Operator, true, true, "qwen"},
		{"svc restart", Operator, true, false, "qwen"},
		{"svc status", Viewer, false, false, ""},
		{"svc logs", Viewer, false, false, ""},
		{"bench", Operator, true, false, "qwen"},
		{"sweep steps 1..3", Operator, true, false, "qwen"},
		{`schedule add "@daily" gpu recover --force`, Admin, true, true, ""},
		{`schedule add --dry-run "@daily" gpu recover`, Admin, false, false, ""},
		{`schedule add "@daily" svc restart`, Admin, true, false, ""},
		{"schedule list", Viewer, false, false, ""},
		{"schedule rm 1", Admin, true, false, ""},
		{"jobs", Viewer, false, false, ""},
		{"cancel 1", Operator, false, false, ""},
		{"job 1", Viewer, false, false, ""},
		{"mtp undo", Operator, true, true, "qwen"},
		{"mtp undo --dry-run", Operator, false, false, ""},
		{"history", Viewer, false, false, ""},
		{"help", Viewer, false, false, ""},
	}
	for _, tt := range tests {
		c, err := Parse(tt.in, optsOne)
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if RoleOf(c) != tt.role || Mutates(c) != tt.mutates || NeedsConfirm(c) != tt.confirm || LockedService(c) != tt.lockedService {
			t.Errorf("%q: role %s mutates %v confirm %v lock %q; want %s %v %v %q", tt.in,
				RoleOf(c), Mutates(c), NeedsConfirm(c), LockedService(c), tt.role, tt.mutates, tt.confirm, tt.lockedService)
		}
	}
	// A scheduled command's role can raise the schedule's (never lower it).
	c := &ScheduleAdd{Sub: &GPURecover{Force: true}}
	if RoleOf(c) != Admin {
		t.Errorf("schedule of gpu recover --force: role %s", RoleOf(c))
	}
}

func TestRole(t *testing.T) {
	for _, r := range []Role{Viewer, Operator, Admin} {
		got, err := ParseRole(strings.ToUpper(r.String()))
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %v, %v", r.String(), got, err)
		}
	}
	if _, err := ParseRole("root"); err == nil {
		t.Error("ParseRole(root) accepted")
	}
	if Role(0).String() != "Role(0)" || LockService.String() != "service" || LockNone.String() != "none" {
		t.Error("String of zero role or locks")
	}
	if !(Viewer < Operator && Operator < Admin) {
		t.Error("roles are not ordered")
	}
}

func TestOptionsValidate(t *testing.T) {
	good := []Options{optsOne, optsMulti, optsNone, optsBig, optsDefault}
	for _, o := range good {
		if err := o.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", o, err)
		}
	}
	bad := []Options{
		{MaxSteps: -1},
		{Services: []ServiceRef{{Name: "Qwen", Host: "gpu1"}}},
		{Services: []ServiceRef{{Name: "qwen", Host: ""}}},
		{Services: []ServiceRef{{Name: "qwen", Host: "gpu1"}, {Name: "qwen", Host: "gpu2"}}},
		{Services: []ServiceRef{{Name: "a;b", Host: "gpu1"}}},
		{Hosts: []string{"-gpu"}},
		{Hosts: []string{strings.Repeat("h", 65)}},
		{Services: optsMulti.Services, DefaultService: "qwne"},
		{DefaultService: "qwen"},
	}
	for _, o := range bad {
		if err := o.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", o)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, s := range []string{"a", "qwen", "0", "qwen3.5-122b_a10b", strings.Repeat("x", 64)} {
		if !ValidName(s) {
			t.Errorf("ValidName(%q) = false", s)
		}
	}
	for _, s := range []string{"", "-a", ".a", "_a", "Qwen", "a b", "a;b", "a/b", "a$", strings.Repeat("x", 65), "é"} {
		if ValidName(s) {
			t.Errorf("ValidName(%q) = true", s)
		}
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"mtp steps 10", "mtp steps 10"},
		{"  /mtp steps 10  ", "mtp steps 10"},
		{"!mtp", "mtp"},
		{"/ mtp", "mtp"},
		{"//mtp", "/mtp"},
		{"\u2014dry-run", "--dry-run"},
		{"\u2013dry-run", "--dry-run"},
		{"-\u2014dry-run", "--dry-run"},
		{"\u2014\u2014dry-run", "--dry-run"},
		{"--\u2014x", "--x"},
		{"1\u20135", "1-5"},
		{"no\u2011start", "no-start"},
		{"\u201c0 3 * * *\u201d", `"0 3 * * *"`},
		{"\u2018@daily\u2019", "'@daily'"},
		{"a\u00a0b\u2009c\u3000d\te", "a b c d e"},
		{"a\u200bb\u200c\u200d\u2060\ufeffc\u00ad", "abc"},
		{"1\u20265", "1..5"},
	}
	for _, tt := range tests {
		if got := normalize(tt.in); got != tt.want {
			t.Errorf("normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestValidateCron(t *testing.T) {
	good := map[string]string{
		"0 3 * * *":              "0 3 * * *",
		"  0   3 * *   MON-FRI ": "0 3 * * MON-FRI",
		"@DAILY":                 "@daily",
		"@every 90m":             "@every 90m",
		"TZ=UTC 0 3 * * *":       "CRON_TZ=UTC 0 3 * * *",
		"CRON_TZ=America/Argentina/Buenos_Aires @hourly": "CRON_TZ=America/Argentina/Buenos_Aires @hourly",
		"CRON_TZ=Etc/GMT+5 */5 * * * *":                  "CRON_TZ=Etc/GMT+5 */5 * * * *",
		"*/5 * * * * *":                                  "",
		"0 0 29 2 *":                                     "0 0 29 2 *",
		"0 12 ? * 1":                                     "0 12 ? * 1",
	}
	for in, want := range good {
		got, err := ValidateCron(in)
		if want == "" { // 6 fields: rejected
			if err == nil {
				t.Errorf("ValidateCron(%q) accepted", in)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("ValidateCron(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "   ", "CRON_TZ=", "TZ=", "CRON_TZ=UTC", "61 * * * *", "* * * *", "@every", "@every 1x",
		"@every 59s", "0 3 * * * \x00", "0 3 * * *\n0 4 * * *", "CRON_TZ=../../etc/passwd 0 3 * * *", "@reboot"} {
		if got, err := ValidateCron(in); err == nil {
			t.Errorf("ValidateCron(%q) = %q, want an error", in, got)
		}
	}
	// The cron parser panics on a zone prefix without a space; that is recovered.
	if _, err := parseCronSafe("CRON_TZ=UTC"); err == nil {
		t.Error("parseCronSafe(CRON_TZ=UTC) accepted")
	}
}

func TestUsageErrorText(t *testing.T) {
	e := &UsageError{Problem: "steps must be between 1 and 16, got 40", Usage: "usage: mtp steps N [SERVICE] [--dry-run]", Suggestion: "did you mean `mtp steps 4`?"}
	want := "steps must be between 1 and 16, got 40\ndid you mean `mtp steps 4`?\nusage: mtp steps N [SERVICE] [--dry-run]"
	if e.Error() != want {
		t.Errorf("Error() = %q", e.Error())
	}
	e.Suggestion = ""
	if e.Error() != "steps must be between 1 and 16, got 40\nusage: mtp steps N [SERVICE] [--dry-run]" {
		t.Errorf("Error() without suggestion = %q", e.Error())
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"steps", "steps", 0}, {"stpes", "steps", 1}, {"promts", "prompts", 1}, {"kitten", "sitting", 3}, {"", "abc", 3}}
	for _, tt := range tests {
		if d := editDistance(tt.a, tt.b); d != tt.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, d, tt.d)
		}
	}
	if got := closest("xyz", []string{"mtp", "gpu"}); got != "" {
		t.Errorf("closest(xyz) = %q, want none", got)
	}
	if got := closest("conc", []string{"prompts", "concurrency"}); got != "concurrency" {
		t.Errorf("closest(conc) = %q, want a prefix match", got)
	}
}

// TestParseConcurrent parses from many goroutines (run with -race).
func TestParseConcurrent(t *testing.T) {
	done := make(chan Command, 8)
	for range 8 {
		go func() {
			var last Command
			for _, in := range benchMix {
				if c, err := Parse(in, optsOne); err == nil {
					last = c
				}
			}
			done <- last
		}()
	}
	var first Command
	for range 8 {
		c := <-done
		if first == nil {
			first = c
		} else if !reflect.DeepEqual(c, first) {
			t.Fatal("concurrent parses disagree")
		}
	}
}
