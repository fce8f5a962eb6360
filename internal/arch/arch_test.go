// Package arch holds no code: its tests keep the arrows between opsbot's
// packages pointing the way ARCHITECTURE.md draws them, the binary free
// of cgo, and commands bound to their behaviour by spec, never by path.
package arch

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/opsbot/opsbot"

// pkg is one of our packages and the packages of ours it imports.
type pkg struct {
	path  string          // relative to the module: "ops/remote", "" for the root
	code  map[string]bool // by its non-test files
	tests map[string]bool // by its test files only
}

// loadPackages reads the imports of every package of the module, as the go
// tool sees them for this platform, without building anything.
func loadPackages(t *testing.T, root string) []pkg {
	t.Helper()
	var out []pkg
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		bp, err := build.Default.ImportDir(p, build.ImportComment)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		ours := func(imps []string) map[string]bool {
			m := map[string]bool{}
			for _, imp := range imps {
				if imp == module || strings.HasPrefix(imp, module+"/") {
					m[strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")] = true
				}
			}
			return m
		}
		q := pkg{path: filepath.ToSlash(rel), code: ours(bp.Imports), tests: ours(append(bp.TestImports, bp.XTestImports...))}
		for imp := range q.code {
			delete(q.tests, imp)
		}
		out = append(out, q)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// under reports whether p is the package dir or one below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// adapter reports whether p is a chat adapter: a package below bot/.
func adapter(p string) bool { return strings.HasPrefix(p, "bot/") }

// defaultOwners are the packages whose constants are defaults of config's
// keys: the benchmark knobs (ops), the SSH pool's timeouts (ops/remote),
// the clear threshold (ops/gpu), the ready timeout (ops/engine), the engine
// and the steps limit (ops/unit), the router's kind (ops/router), the
// PostgreSQL connection cap (store).
var defaultOwners = map[string]bool{"ops": true, "ops/remote": true, "ops/gpu": true, "ops/engine": true, "ops/unit": true,
	"ops/router": true, "store": true}

// testDoubles are the test-support packages that speak our types: the
// recording chat (chatrec), backends made of a function (jobtest) and the
// Apps built for a test (apptest). Like internal/testkit they are for test
// files only; one may build on another (apptest's Apps post to a
// chatrec.Recorder), and apptest wires the lab as tests do.
var testDoubles = map[string]bool{"internal/chatrec": true, "internal/jobtest": true, "internal/apptest": true}

// rules are the arrows of ARCHITECTURE.md, each a check of one import.
// test is true for an import by test files only.
var rules = []struct {
	name  string
	allow func(from, to string, test bool) bool
}{
	// A job command says what it runs: one method of ops.Runbook. The steps
	// limit's home is ops/unit, whose edits enforce it.
	{"commands imports of ours only ops and ops/unit", func(from, to string, _ bool) bool {
		return !under(from, "commands") || under(to, "commands") || to == "ops" || to == "ops/unit"
	}},
	// ops receives values: its config, its hold, its command's arguments.
	// (Its external tests drive whole commands, as the runtime does.)
	{"ops's code never imports commands", func(from, to string, test bool) bool {
		return test || !under(from, "ops") || !under(to, "commands")
	}},
	// config validates commands with the command language, and takes each
	// default from the package that owns its behaviour (defaultOwners): its
	// only arrows.
	{"config imports of ours only commands and the owners of its defaults", func(from, to string, _ bool) bool {
		return !under(from, "config") || under(to, "config") || under(to, "commands") || defaultOwners[to]
	}},
	// ops receives every value it runs with (ops.Config); a default it and
	// config share lives in ops/*, which config imports.
	{"ops never imports config", func(from, to string, _ bool) bool {
		return !under(from, "ops") || !under(to, "config")
	}},
	// A role decision needs a command's policy and the config, never the
	// store, a chat or a host (ARCHITECTURE.md, Arrows).
	{"auth's code imports of ours only commands and config", func(from, to string, test bool) bool {
		return test || !under(from, "auth") || under(to, "auth") || under(to, "commands") || under(to, "config")
	}},
	{"commands, ops, store and config never import bot", func(from, to string, _ bool) bool {
		low := under(from, "commands") || under(from, "ops") || under(from, "store") || under(from, "config")
		return !low || !under(to, "bot")
	}},
	{"nothing imports an adapter except cmd", func(from, to string, _ bool) bool {
		return !adapter(to) || under(from, "cmd") || under(from, to)
	}},
	// Adapters only translate: every decision is the door's (bot), and what
	// they show of jobs and results comes through bot's types. What an
	// adapter keeps in the store (Matrix: its login, sync position and
	// device keys) it reaches through small interfaces of its own, which
	// cmd fills with the store and the runtime's locker.
	{"an adapter imports of ours only bot, chat and config", func(from, to string, test bool) bool {
		return test || !adapter(from) || under(to, from) || to == "bot" || to == "chat" || to == "config"
	}},
	// chat is the vocabulary between opsbot and a platform: it stands
	// under everything that speaks it.
	{"chat imports nothing of ours", func(from, to string, _ bool) bool {
		return !under(from, "chat") || under(to, "chat")
	}},
	// report only draws what chat shows of jobs and results: it stands
	// under the door and the job runtime, beside the store it reads
	// history from. (config: the regression policy's defaults.)
	{"report imports of ours only chat, ops, store, commands and config", func(from, to string, test bool) bool {
		return test || !under(from, "report") || under(to, "report") ||
			to == "chat" || to == "ops" || to == "store" || to == "commands" || to == "config"
	}},
	// leases holds things across opsbot processes on one store (the
	// runtime's locker, the leaders' loop): it stands on the store, ops's
	// hold and config's default TTL, under the job runtime that starts its
	// heartbeat and the leaders that run in it.
	{"leases's code imports of ours only store, ops, ops/remote and config", func(from, to string, test bool) bool {
		return test || !under(from, "leases") || under(to, "leases") ||
			to == "store" || to == "ops" || to == "ops/remote" || to == "config"
	}},
	{"nothing below leases imports it (commands, ops, store, config, chat, report, auth, lab)", func(from, to string, _ bool) bool {
		low := under(from, "commands") || under(from, "ops") || under(from, "store") || under(from, "config") ||
			under(from, "chat") || under(from, "report") || under(from, "auth") || under(from, "lab")
		return !low || !under(to, "leases")
	}},
	// The job runtime runs what the door submits: it never reaches up to
	// the door, nor to what drives the door (the scheduler, the watchdog,
	// the assembled app).
	{"jobs never imports bot, schedule, watchdog or app", func(from, to string, _ bool) bool {
		return !under(from, "jobs") || !(under(to, "bot") || under(to, "schedule") || under(to, "watchdog") || under(to, "app"))
	}},
	// The scheduler, the watchdog and the app come in through the door.
	{"bot never imports schedule, watchdog or app", func(from, to string, _ bool) bool {
		return !under(from, "bot") || !(under(to, "schedule") || under(to, "watchdog") || under(to, "app"))
	}},
	// app assembles the scheduler and the watchdog on the door: they never
	// reach up to their own wiring.
	{"schedule and watchdog never import app", func(from, to string, _ bool) bool {
		return !(under(from, "schedule") || under(from, "watchdog")) || !under(to, "app")
	}},
	{"lab imports nothing of ours except lab's own packages", func(from, to string, test bool) bool {
		return test || !under(from, "lab") || under(to, "lab")
	}},
	{"store knows neither bot nor ops's parts (only ops's result types)", func(from, to string, _ bool) bool {
		return !under(from, "store") || !(under(to, "bot") || strings.HasPrefix(to, "ops/"))
	}},
	{"only internal/labtest, cmd, tests and test doubles wire the lab to the rest", func(from, to string, test bool) bool {
		return test || !under(to, "lab") || under(from, "lab") || under(from, "internal/labtest") || under(from, "cmd") || testDoubles[from]
	}},
	{"ops/bench imports of ops only ops/engine", func(from, to string, _ bool) bool {
		return !under(from, "ops/bench") || !under(to, "ops") || under(to, "ops/bench") || under(to, "ops/engine")
	}},
	// internal/testkit defines the -update flag and imports testing, as do
	// the test doubles: none must ever reach a binary. A double may import
	// another double, never testkit.
	{"only tests import internal/testkit and the test doubles", func(from, to string, test bool) bool {
		return test || !(under(to, "internal/testkit") || testDoubles[to]) || (testDoubles[from] && testDoubles[to])
	}},
	// bot's own package-internal tests use the recording chat and the
	// function backends: these must never import bot (an import cycle),
	// so they stand on the vocabulary and the job runtime only.
	{"internal/chatrec imports of ours only chat", func(from, to string, _ bool) bool {
		return from != "internal/chatrec" || to == "chat"
	}},
	{"internal/jobtest imports of ours only commands, ops and jobs", func(from, to string, _ bool) bool {
		return from != "internal/jobtest" || to == "commands" || to == "ops" || to == "jobs"
	}},
}

// violations lists every import of pkgs that a rule forbids.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		check := func(imps map[string]bool, test bool) {
			for to := range imps {
				for _, r := range rules {
					if !r.allow(p.path, to, test) {
						kind := "imports"
						if test {
							kind = "imports in tests"
						}
						out = append(out, p.path+" "+kind+" "+to+": "+r.name)
					}
				}
			}
		}
		check(p.code, false)
		check(p.tests, true)
	}
	sort.Strings(out)
	return out
}

func TestImportDirections(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	pkgs := loadPackages(t, root)
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages: the walk is broken", len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestRulesCatchViolations feeds the rules the imports ARCHITECTURE.md forbids,
// so that a rule that stopped matching fails here.
func TestRulesCatchViolations(t *testing.T) {
	bad := []pkg{
		{path: "commands", code: map[string]bool{"config": true}},
		{path: "config", code: map[string]bool{"ops/systemd": true}},
		{path: "ops", code: map[string]bool{"bot": true, "config": true, "commands": true}},
		{path: "ops/remote", code: map[string]bool{"config": true}},
		{path: "ops/gpu", code: map[string]bool{"lab": true}},
		{path: "store", code: map[string]bool{"bot": true, "ops/remote": true}},
		{path: "bot", code: map[string]bool{"bot/console": true}},
		{path: "auth", code: map[string]bool{"store": true, "bot": true}},
		{path: "lab", code: map[string]bool{"ops/unit": true}},
		{path: "ops/bench", code: map[string]bool{"ops/remote": true}},
		{path: "bot/console", code: map[string]bool{"ops": true, "commands": true}},
		{path: "bot/slack", code: map[string]bool{"store": true}},
		{path: "internal/chattest", code: map[string]bool{"internal/testkit": true}},
		{path: "bot/matrix", code: map[string]bool{"store": true}},
		{path: "chat", code: map[string]bool{"bot": true}},
		{path: "report", code: map[string]bool{"bot": true}},
		{path: "jobs", code: map[string]bool{"bot": true}, tests: map[string]bool{"app": true}},
		{path: "bot", code: map[string]bool{"schedule": true}},
		{path: "schedule", code: map[string]bool{"app": true}},
		{path: "watchdog", tests: map[string]bool{"app": true}},
		{path: "jobs", code: map[string]bool{"internal/jobtest": true}},
		{path: "cmd/opsbot", code: map[string]bool{"internal/apptest": true, "internal/chatrec": true}},
		{path: "internal/apptest", code: map[string]bool{"internal/testkit": true}},
		{path: "internal/chatrec", code: map[string]bool{"bot": true}},
		{path: "internal/jobtest", code: map[string]bool{"bot": true, "store": true}},
		{path: "leases", code: map[string]bool{"jobs": true, "bot": true}},
		{path: "store", code: map[string]bool{"leases": true}},
		{path: "ops", tests: map[string]bool{"leases": true}},
	}
	got := violations(bad)
	want := []string{
		"auth imports bot: auth's code imports of ours only commands and config",
		"auth imports store: auth's code imports of ours only commands and config",
		"bot imports bot/console: nothing imports an adapter except cmd",
		"bot imports schedule: bot never imports schedule, watchdog or app",
		"bot/console imports commands: an adapter imports of ours only bot, chat and config",
		"bot/console imports ops: an adapter imports of ours only bot, chat and config",
		"bot/matrix imports store: an adapter imports of ours only bot, chat and config",
		"bot/slack imports store: an adapter imports of ours only bot, chat and config",
		"chat imports bot: chat imports nothing of ours",
		"cmd/opsbot imports internal/apptest: only tests import internal/testkit and the test doubles",
		"cmd/opsbot imports internal/chatrec: only tests import internal/testkit and the test doubles",
		"commands imports config: commands imports of ours only ops and ops/unit",
		"config imports ops/systemd: config imports of ours only commands and the owners of its defaults",
		"internal/apptest imports internal/testkit: only tests import internal/testkit and the test doubles",
		"internal/chatrec imports bot: internal/chatrec imports of ours only chat",
		"internal/chattest imports internal/testkit: only tests import internal/testkit and the test doubles",
		"internal/jobtest imports bot: internal/jobtest imports of ours only commands, ops and jobs",
		"internal/jobtest imports store: internal/jobtest imports of ours only commands, ops and jobs",
		"jobs imports bot: jobs never imports bot, schedule, watchdog or app",
		"jobs imports in tests app: jobs never imports bot, schedule, watchdog or app",
		"jobs imports internal/jobtest: only tests import internal/testkit and the test doubles",
		"lab imports ops/unit: lab imports nothing of ours except lab's own packages",
		"leases imports bot: leases's code imports of ours only store, ops, ops/remote and config",
		"leases imports jobs: leases's code imports of ours only store, ops, ops/remote and config",
		"ops imports bot: commands, ops, store and config never import bot",
		"ops imports commands: ops's code never imports commands",
		"ops imports config: ops never imports config",
		"ops imports in tests leases: nothing below leases imports it (commands, ops, store, config, chat, report, auth, lab)",
		"ops/bench imports ops/remote: ops/bench imports of ops only ops/engine",
		"ops/gpu imports lab: only internal/labtest, cmd, tests and test doubles wire the lab to the rest",
		"ops/remote imports config: ops never imports config",
		"report imports bot: report imports of ours only chat, ops, store, commands and config",
		"schedule imports app: schedule and watchdog never import app",
		"store imports bot: commands, ops, store and config never import bot",
		"store imports bot: store knows neither bot nor ops's parts (only ops's result types)",
		"store imports leases: nothing below leases imports it (commands, ops, store, config, chat, report, auth, lab)",
		"store imports ops/remote: store knows neither bot nor ops's parts (only ops's result types)",
		"watchdog imports in tests app: schedule and watchdog never import app",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	good := []pkg{
		{path: "cmd/opsbot", code: map[string]bool{"bot/console": true, "lab": true, "ops": true}},
		{path: "ops", code: map[string]bool{"ops/remote": true}},
		{path: "ops", tests: map[string]bool{"commands": true}},
		{path: "commands", code: map[string]bool{"ops": true, "ops/unit": true}},
		{path: "config", code: map[string]bool{"commands": true, "ops": true, "ops/remote": true, "ops/gpu": true, "ops/engine": true, "ops/unit": true, "store": true}},
		{path: "ops/bench", code: map[string]bool{"ops/engine": true}},
		{path: "lab", code: map[string]bool{"lab/engine": true}},
		{path: "ops", tests: map[string]bool{"lab": true, "internal/labtest": true}},
		{path: "lab", tests: map[string]bool{"internal/testkit": true}},
		{path: "internal/labtest", code: map[string]bool{"lab": true, "ops/remote": true}},
		{path: "bot/slack", code: map[string]bool{"bot": true, "chat": true, "config": true}},
		{path: "report", code: map[string]bool{"chat": true, "ops": true, "store": true, "config": true}},
		{path: "jobs", code: map[string]bool{"chat": true, "report": true, "ops": true, "store": true, "leases": true}},
		{path: "leases", code: map[string]bool{"store": true, "ops": true, "ops/remote": true, "config": true}},
		{path: "bot", code: map[string]bool{"jobs": true, "chat": true, "report": true}},
		{path: "schedule", code: map[string]bool{"bot": true, "jobs": true, "report": true, "leases": true}},
		{path: "app", code: map[string]bool{"bot": true, "schedule": true, "watchdog": true}},
		{path: "watchdog", code: map[string]bool{"bot": true, "jobs": true, "report": true, "leases": true}},
		{path: "bot", code: map[string]bool{"leases": true}},
		{path: "bot/matrix", tests: map[string]bool{"leases": true}},
		{path: "bot", tests: map[string]bool{"internal/chatrec": true, "internal/jobtest": true, "internal/testkit": true}},
		{path: "schedule", tests: map[string]bool{"internal/apptest": true, "internal/chatrec": true, "internal/jobtest": true}},
		{path: "internal/apptest", code: map[string]bool{"bot": true, "lab": true, "internal/labtest": true, "internal/chatrec": true}},
		{path: "internal/chatrec", code: map[string]bool{"chat": true}},
		{path: "internal/jobtest", code: map[string]bool{"commands": true, "ops": true, "jobs": true}},
	}
	if v := violations(good); len(v) > 0 {
		t.Errorf("allowed imports refused:\n%s", strings.Join(v, "\n"))
	}
}
