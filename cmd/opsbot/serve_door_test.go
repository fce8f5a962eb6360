package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/store"
)

// TestServeSlackKilledMidJobThenRestarted: kill -9 of `opsbot serve` while a
// `/mtp steps 10` from Slack waits for the engine. At the next start, the
// job's root message in Slack is edited from the store to interrupted
// (what to check next included) within 10 s; the same signed delivery
// replayed to the new process is answered 409 and runs nothing (the door's
// claim is in the store, not in the dead process's memory); a command from
// a channel off slack.channels is refused privately and audited, as Matrix's
// are.
func TestServeSlackKilledMidJobThenRestarted(t *testing.T) {
	t.Parallel()
	api := newSlackServer(t)
	_, cfg, openStore := sigtermLab(t, 3*time.Second)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.WriteString(f, slackSection(api))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	p, base := readySlackServe(t, cfg)
	d := signedSlash(e2eSigningSecret, time.Now(), "/mtp", "steps 10")
	if code, body := d.post(t, base); code != http.StatusOK || !strings.Contains(body, "#1 queued") {
		t.Fatalf("signed /mtp steps 10: %d %s", code, body)
	}
	pollServe(t, p, time.Minute, "the job waiting for the engine, in Slack", func() bool {
		j, ok := api.job(e2eChannel)
		return ok && strings.Contains(j.last(t), "wait until ready")
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)

	t0 := time.Now()
	p2, base2 := readySlackServe(t, cfg)
	pollServe(t, p2, 10*time.Second, "the root message edited to interrupted", func() bool {
		j, ok := api.job(e2eChannel)
		return ok && strings.Contains(j.last(t), "#1 `mtp steps 10") && strings.Contains(j.last(t), "interrupted")
	})
	j, _ := api.job(e2eChannel)
	if last := j.last(t); !strings.Contains(last, "svc status") {
		t.Errorf("the interrupted root says no next step: %q", last)
	}
	t.Logf("root edited to interrupted %s after the restart began: %s", time.Since(t0).Round(time.Millisecond), j.last(t))

	if code, body := d.post(t, base2); code != http.StatusConflict {
		t.Errorf("the same delivery replayed to the restarted process: %d %s, want 409", code, body)
	}
	other := signedSlashIn(e2eSigningSecret, time.Now(), "C0ELSEWHERE", "/mtp", "steps 4")
	code, body := other.post(t, base2)
	if code != http.StatusOK || !strings.Contains(body, "no commands in this channel") || !strings.Contains(body, "ephemeral") {
		t.Errorf("a command off slack.channels: %d %s; want a private refusal", code, body)
	}

	st := openStore()
	defer st.Close()
	ctx := context.Background()
	jobs, err := st.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Status != store.Interrupted {
		t.Errorf("jobs %+v; want only #1, interrupted", jobs)
	}
	audit, err := st.Audit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var replayed, offList int
	for _, a := range audit {
		switch {
		case a.Decision == bot.DecisionReplayed:
			replayed++
		case a.Decision == store.DecisionRefused && a.Room == "C0ELSEWHERE" && strings.Contains(a.Detail, "slack.channels"):
			offList++
		}
	}
	if replayed != 1 || offList != 1 {
		t.Errorf("audit: %d replay rows and %d channel refusals, want 1 and 1: %+v", replayed, offList, audit)
	}
}

// TestServeCleanStopReleasesLeases: SIGTERM to `opsbot serve`: it stops
// taking work, stops the scheduler and the watchdog, lets jobs end, then
// releases every lease and closes the store, in that order. It exits 0, logs
// no ERROR line, and leaves no lease behind (a standby need not wait for
// their expiry).
func TestServeCleanStopReleasesLeases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, filepath.Join(dir, "opsbot.yaml"), "store: {path: opsbot.db}\nhttp: {listen: \"127.0.0.1:0\"}\n")
	p := startServe(t, "", nil, "serve", "--config", cfg, "--lab")
	base := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	held := func() []string {
		ls, err := st.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, l := range ls {
			keys = append(keys, l.Key)
		}
		return keys
	}
	pollServe(t, p, 30*time.Second, "the scheduler and watchdog leases held", func() bool { return len(held()) == 2 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("a clean stop logged an error: %s", line)
		}
	}
	if keys := held(); len(keys) != 0 {
		t.Errorf("leases left after a clean stop: %v", keys)
	}
}
