package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// labSchedulesConfig is a chat-only config for --lab whose schedule names
// the lab's service: the file alone does not load (no services), the file
// on top of the lab's config does.
const labSchedulesConfig = `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
auth:
  default_role: none
  users: {"console:tester": admin}
schedules:
  - {cron: "0 3 * * *", command: "bench qwen", as: "console:tester", to: "console:ops"}
`

// `opsbot serve --lab --config FILE` with a schedule naming the lab's
// service runs with FILE's listener and schedules: /readyz answers, and
// `schedule list` shows the config's schedule.
func TestServeLabConfigWithSchedules(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"), labSchedulesConfig)
	p := startServe(t, "extra", nil, "serve", "--config", cfg, "--lab")
	base := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	r := command(t, base, "tester", "schedule list")
	if !strings.Contains(r.Text, "bench qwen") {
		t.Fatalf("schedule list does not show the config's schedule: %+v", r)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}

// A config that does not load stops `serve` with its problem, with or
// without --lab, and `config check --lab` reports the same; `config check
// --lab` passes the config that loads only on top of the lab's, which
// `config check` alone refuses for the service it does not know.
func TestConfigThatDoesNotLoadStopsServe(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the labs' own directories
	dir := t.TempDir()
	good := writeFile(t, filepath.Join(dir, "good.yaml"), labSchedulesConfig)
	bad := writeFile(t, filepath.Join(dir, "bad.yaml"), strings.Replace(labSchedulesConfig, "bench qwen", "bench nope", 1))
	const want = `schedules[0].command: unknown service "nope"`
	for _, args := range [][]string{
		{"serve", "--config", bad, "--lab"},
		{"serve", "--config", bad},
		{"config", "check", "--config", bad, "--lab"},
	} {
		t.Run(strings.Join(args[:len(args)-2], " ")+" "+args[len(args)-1], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, errb bytes.Buffer
			code := run(ctx, args, strings.NewReader(""), &out, &errb)
			if code != 1 || !strings.Contains(errb.String(), want) {
				t.Fatalf("%v: exit %d, want 1 naming %q\nstdout:\n%s\nstderr:\n%s", args, code, want, out.String(), errb.String())
			}
			if strings.Contains(errb.String(), "opsbot serving") {
				t.Fatalf("%v served:\n%s", args, errb.String())
			}
		})
	}
	code, out, errOut := configCheck(t, "config", "check", "--config", good, "--lab")
	if code != 0 || !strings.Contains(out, "valid") || !strings.Contains(out, "bench qwen") {
		t.Fatalf("config check --lab on a config that loads over the lab: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := configCheck(t, "config", "check", "--config", good); code != 1 || !strings.Contains(errOut, `unknown service "qwen"`) {
		t.Fatalf("config check without --lab: exit %d\n%s", code, errOut)
	}
}

// While the lab's engines load, /readyz says so: it waits for the lab, not
// the store. slow-load=1h keeps them loading for the whole test.
func TestServeReadyzSaysItBootsTheLab(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"), labSchedulesConfig)
	p := startServe(t, "extra", nil, "serve", "--config", cfg, "--lab", "--lab-faults", "slow-load=1h")
	base := serveURL(t, p)
	var body string
	pollServe(t, p, time.Minute, "/readyz naming the lab", func() bool {
		var code int
		code, body = httpGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "starting: booting the lab")
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 2*time.Minute)
}

// `opsbot run --lab` parses every command before it waits for the lab's
// engines, and a command that needs no host never waits for them: with
// engines that load for an hour (slow-load=1h), a typo is refused (and says
// that nothing ran) and `jobs`, `history` and `help` answer.
func TestRunParsesBeforeTheLabServes(t *testing.T) {
	t.Parallel()
	code, out, errs := runArgs(t, "run", "--lab", "--lab-faults", "slow-load=1h", "gpu status", "mtp stepz 3")
	if code != 2 || out != "" || !strings.Contains(errs, `unknown command "mtp stepz"`) ||
		!strings.Contains(errs, "nothing was run: each of the 2 commands is checked before any runs") {
		t.Errorf("a typo in a batch: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	code, out, errs = runArgs(t, "run", "--lab", "--lab-faults", "slow-load=1h", "jobs", "history", "help jobs")
	if code != 0 || !strings.Contains(out, "no job is queued or running") || !strings.Contains(out, "no benchmark results for qwen yet") {
		t.Errorf("host-free commands: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}
