package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testrun"
)

// The README's walkthrough of the watchdog on the lab: `opsbot serve --lab
// --lab-faults restart-loop=DUR` with a config that gives the lab's qwen
// auto_recover. The fault restarts qwen behind opsbot's back, leaving its
// workers on the GPUs, so qwen loops outside any job; the watchdog alerts
// on it, auto_recover runs `gpu recover qwen` by itself, and once qwen
// serves again the alert closes.
func TestServeLabWatchdogAutoRecoversLoopMadeOutsideAJob(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	cfg := writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"), `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
auth:
  default_role: none
  users: {"console:tester": operator}
watchdog: {interval: 1s, to: "console:oncall"}
services:
  qwen: {auto_recover: true}
`)
	p := startServe(t, "extra", nil, "serve", "--config", cfg, "--lab", "--lab-faults", "restart-loop=30s")
	base := serveURL(t, p)
	posts := func() string {
		_, body := httpGet(t, base+"/test/posts")
		var ps []string
		if err := json.Unmarshal([]byte(body), &ps); err != nil {
			t.Fatalf("/test/posts: %v: %s", err, body)
		}
		return strings.Join(ps, "\n---\n")
	}
	pollServe(t, p, 2*time.Minute, "the watchdog's alert on the loop", func() bool {
		return strings.Contains(posts(), "incident #1: qwen is in a restart loop")
	})
	pollServe(t, p, 2*time.Minute, "auto_recover to start gpu recover", func() bool {
		return strings.Contains(posts(), "auto_recover: started job #")
	})
	pollServe(t, p, 3*time.Minute, "the alert to close once qwen serves", func() bool {
		return strings.Contains(posts(), "incident #1 closed: qwen serves again")
	})
	if r := command(t, base, "tester", "jobs all"); !strings.Contains(r.Text, "`gpu recover qwen` succeeded") {
		t.Fatalf("jobs all does not show the watchdog's recovery:\n%s", r.Text)
	}
	if r := command(t, base, "tester", "svc status qwen"); r.Outcome != "queued" {
		t.Fatalf("svc status: %+v", r)
	}
	if strings.Contains(posts(), "incident #2") {
		t.Fatalf("a second incident:\n%s", posts())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}
