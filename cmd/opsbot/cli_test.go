package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
)

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code = run(ctx, args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// `opsbot SUBCOMMAND --help` (and -h, and `opsbot help SUBCOMMAND`) exits 0
// and says on stdout what the subcommand does, with examples; run's help
// adds how to quote a chat command.
func TestSubcommandHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"run", "demo", "lab", "bench", "config", "serve", "store", "health", "version"} {
		for _, args := range [][]string{{sub, "--help"}, {sub, "-h"}, {"help", sub}} {
			code, out, errs := runArgs(t, args...)
			if code != 0 {
				t.Errorf("%q: exit %d, want 0; stderr %s", args, code, errs)
			}
			for _, want := range []string{"usage: opsbot " + sub, "examples:\n  opsbot " + sub} {
				if !strings.Contains(out, want) {
					t.Errorf("%q: help lacks %q:\n%s", args, want, out)
				}
			}
		}
	}
	_, out, _ := runArgs(t, "run", "--help")
	if !strings.Contains(out, "Quote each chat command as one argument: opsbot run --lab 'mtp steps 10'") {
		t.Errorf("run --help says nothing about quoting:\n%s", out)
	}
	if code, _, errs := runArgs(t, "run", "--no-such-flag", "help"); code != 2 || !strings.Contains(errs, "usage: opsbot run") {
		t.Errorf("a bad flag: exit %d, want 2 with the usage on stderr:\n%s", code, errs)
	}
}

// `opsbot run 'help'` and `help COMMAND` need no hosts: no --lab, no --config.
func TestRunHelpNeedsNoHosts(t *testing.T) {
	t.Parallel()
	code, out, errs := runArgs(t, "run", "help", "help svc logs")
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr %s", code, errs)
	}
	for _, want := range []string{"mtp steps N [SERVICE] [--dry-run]", "svc logs [SERVICE] [lines=N]", "Show the last journal lines"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runArgs(t, "run", "help", "gpu status"); code != 2 || !strings.Contains(errs, "--config FILE, or --lab") {
		t.Errorf("a command that needs hosts without --lab: exit %d, stderr %s", code, errs)
	}
}

// A command split into words by the shell is answered with how to quote it,
// exit 2, and nothing runs; so is a chat command's flag left outside its quotes.
func TestRunUnquotedCommandHint(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--lab", "mtp", "steps", "10"}, "quote each command: opsbot run --lab 'mtp steps 10'"},
		{[]string{"run", "--lab", "mtp steps 4", "--dry-run", "gpu", "status"}, "quote each command: opsbot run --lab 'mtp steps 4 --dry-run' 'gpu status'"},
	} {
		code, out, errs := runArgs(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
		if strings.Contains(out, "#1") {
			t.Errorf("%q: a job ran:\n%s", tc.args, out)
		}
	}
}

// A flag after the command text is understood; `svc logs` prints the
// journal's lines in the terminal, not only its header.
func TestRunFlagAfterCommandAndLogsShown(t *testing.T) {
	t.Parallel()
	code, out, errs := runArgs(t, "run", "svc logs lines=5", "--lab")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "last 5 journal lines of sglang-qwen.service") {
		t.Fatalf("no svc logs result:\n%s", out)
	}
	// The lab's engine logs this line when it serves: it is in the last five.
	if !strings.Contains(out, "    [") || !strings.Contains(out, "The server is fired up and ready to roll!") {
		t.Errorf("the journal lines are not printed:\n%s", out)
	}
	if strings.Contains(out, "```") {
		t.Errorf("Markdown fences in a terminal:\n%s", out)
	}
}

// `mtp undo` on the lab, through the store's job history: with nothing to
// undo it is refused saying so, making no job; after `mtp steps 4` it puts
// back the text that change replaced (verified and benchmarked); `job 1`
// shows that change in full, with its diff.
func TestRunUndoAndJobView(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, lines, errs := runJSON(t, "mtp undo", "mtp steps 4", "mtp undo", "job 1")
	if len(lines) != 4 {
		t.Fatalf("exit %d, %d lines, want 4\n%s", code, len(lines), errs)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1 (the first undo is refused)", code)
	}
	if l := lines[0]; l.Job != nil || l.Error == nil || !strings.Contains(*l.Error, "nothing to undo on qwen") {
		t.Errorf("undo with nothing to undo: %+v", l)
	}
	steps, undo := lines[1], lines[2]
	if steps.Job == nil || steps.Job.Status != "succeeded" || undo.Job == nil || undo.Job.Status != "succeeded" {
		t.Fatalf("mtp steps 4 then mtp undo: %+v / %+v", steps.Job, undo.Job)
	}
	if undo.Result.Unit == nil || undo.Result.Unit.After != steps.Result.Unit.Before || undo.Result.Unit.Before != steps.Result.Unit.After {
		t.Errorf("undo did not put back the text mtp steps 4 replaced: %+v", undo.Result.Unit)
	}
	if undo.Result.Bench == nil {
		t.Error("undo ran no benchmark")
	}
	view := lines[3].Reply
	for _, want := range []string{"#1 `mtp steps 4 qwen` — succeeded", "asked by console:", "▶ stop:", "the unit diff it applied", "+    --speculative-num-steps 4"} {
		if !strings.Contains(view, want) {
			t.Errorf("job 1 lacks %q:\n%s", want, view)
		}
	}
}

// Every flag a subcommand takes is in its usage line, as its --help lists
// them below it.
func TestUsageLinesListEveryFlag(t *testing.T) {
	t.Parallel()
	for _, sub := range [][]string{{"run"}, {"demo"}, {"lab"}, {"bench"}, {"config", "check"}, {"serve"}, {"store", "backup"}, {"health"}} {
		code, out, errs := runArgs(t, append(sub, "--help")...)
		if code != 0 {
			t.Fatalf("%v --help: exit %d; stderr %s", sub, code, errs)
		}
		usage, _, _ := strings.Cut(out, "\n\n") // it may wrap
		_, flags, ok := strings.Cut(out, "\nflags:\n")
		if !strings.HasPrefix(usage, "usage: opsbot "+sub[0]) || !ok {
			t.Fatalf("%v --help: no usage line or flags:\n%s", sub, out)
		}
		for _, line := range strings.Split(flags, "\n") {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			name := strings.FieldsFunc(strings.TrimPrefix(line, "  -"), func(r rune) bool { return r == ' ' || r == '\t' })[0]
			if !strings.Contains(usage+" ", "-"+name+" ") && !strings.Contains(usage, "-"+name+"]") && !strings.Contains(usage, "-"+name+"|") {
				t.Errorf("%v: the usage line leaves out -%s:\n%s", sub, name, usage)
			}
		}
	}
}

// `opsbot --help` lists every documented subcommand once, with the usage line
// of its own --help: the overview cannot fall behind a subcommand's flags.
func TestOverviewListsEverySubcommand(t *testing.T) {
	t.Parallel()
	if len(overviewOrder) != len(subcommands) {
		t.Errorf("overview lists %d subcommands, %d are documented", len(overviewOrder), len(subcommands))
	}
	text := overview()
	for name, doc := range subcommands {
		if line := "  " + strings.Join(strings.Fields(doc.usage), " ") + "\n"; strings.Count(text, line) != 1 {
			t.Errorf("overview lacks %s's usage line %q:\n%s", name, line, text)
		}
	}
}

// Every subcommand's --help lists each of its flags and subcommands once,
// with at most one default per flag; --lab-faults names every fault.
func TestSubcommandHelpListsEveryFlagOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"store", "--help"}, []string{"usage: opsbot store backup", "usage: opsbot store copy", "  -live\n"}},
		{[]string{"config", "check", "--help"}, []string{"usage: opsbot config check", "  -config FILE", "  -lab\n"}},
		{[]string{"bench", "--help"}, []string{"-prompts int"}},
		{[]string{"run", "--help"}, []string{"  -lab-faults LIST\n"}},
		{[]string{"demo", "--help"}, []string{"  -lab-faults LIST\n"}},
		{[]string{"serve", "--help"}, []string{"  -lab-faults LIST\n"}},
		{[]string{"lab", "--help"}, []string{"  -faults LIST\n"}},
	} {
		code, out, errs := runArgs(t, tc.args...)
		if code != 0 {
			t.Errorf("%q: exit %d: %s", tc.args, code, errs)
		}
		want := tc.want
		if strings.Contains(out, "faults LIST") {
			for _, d := range lab.FaultDocs {
				want = append(want, "  "+d[0]+": ")
			}
		}
		for _, w := range want {
			if strings.Count(out, w) != 1 {
				t.Errorf("%q: %q appears %d times, want once:\n%s", tc.args, w, strings.Count(out, w), out)
			}
		}
		// A flag's help is its "  -name" line and the indented lines under
		// it, up to the next flag or the examples.
		for _, f := range regexp.MustCompile(`(?m)^  -\S+.*\n(?:\t.*\n)*`).FindAllString(out, -1) {
			if n := strings.Count(f, "default"); n > 1 {
				t.Errorf("%q: a flag names %d defaults:\n%s", tc.args, n, f)
			}
		}
	}
}

// `help confirm` (and approve, y, yes) explains how a confirmation is
// answered, with or without hosts.
func TestRunHelpConfirm(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"confirm", "approve", "y", "yes"} {
		code, out, errs := runArgs(t, "run", "help "+topic)
		if code != 0 || !strings.Contains(out, "`confirm TOKEN`") || !strings.Contains(out, "--yes") {
			t.Errorf("help %s: exit %d\n%s\n%s", topic, code, out, errs)
		}
	}
}
