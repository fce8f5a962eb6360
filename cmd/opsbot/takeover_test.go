package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// TestKilledMidRolloutIsRolledBackAtNextStart: `opsbot serve` rolls `mtp
// steps 10 qwen` out over the lab's two replicas behind its router (the
// gate loosened so the rollout proceeds) and is killed with SIGKILL as soon
// as the canary's unit holds the new text (the canary drained from the
// router, its engine not restarted yet), or, later, as soon as the second
// replica's unit does (the canary changed, gated and back in the router). The lab runs in this test's
// process, so it outlives the killed opsbot as real hosts would. A new
// `opsbot serve` on the same store and lab records the rollout interrupted
// once the dead process's leases expire, tells its room so with what it does
// about it, and rolls it back by itself: a succeeded `mtp undo qwen` job of
// user opsbot, after which every replica's unit is its text before the
// rollout byte for byte, each replica serves, and both are in the router's
// worker list.
func TestKilledMidRolloutIsRolledBackAtNextStart(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	t.Run("canary written", func(t *testing.T) { t.Parallel(); killedMidRollout(t, 1) })
	t.Run("second replica written", func(t *testing.T) { t.Parallel(); killedMidRollout(t, 2) })
}

// killedMidRollout runs TestKilledMidRolloutIsRolledBackAtNextStart with
// the kill once written replicas' units hold the new text.
func killedMidRollout(t *testing.T, written int) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, lab.Options{Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	cfg, err := l.WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	const leaseTTL = 2 * time.Second
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The gate's own judgement is ops's tests'; here the rollout must go on.
	_, err = fmt.Fprintf(f, "http: {listen: \"127.0.0.1:0\"}\nlimits: {lease_ttl: %s}\nrollout:\n  gate: {min_tok_s_ratio: 0.5, max_ttft_p95_ratio: 5}\n", leaseTTL)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	const unitDir = "/etc/systemd/system/"
	topo := l.Topology()
	before := map[string][]byte{}
	for _, s := range topo.Services {
		if err := l.WaitReady(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
		b, err := l.Host(s.Host).ReadFile(unitDir + s.Unit)
		if err != nil {
			t.Fatal(err)
		}
		before[s.Name] = b
	}
	changed := func() []string { // the replicas whose unit is no longer its text before
		var names []string
		for _, s := range topo.Services {
			if b, err := l.Host(s.Host).ReadFile(unitDir + s.Unit); err == nil && string(b) != string(before[s.Name]) {
				names = append(names, s.Name)
			}
		}
		return names
	}

	p1 := startServe(t, "extra", nil, "serve", "--config", cfg)
	base1 := serveURL(t, p1)
	pollServe(t, p1, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, base1+"/readyz"); return code == 200 })
	r := command(t, base1, "tester", "mtp steps 10 qwen")
	if r.JobID == 0 {
		t.Fatalf("mtp steps 10 qwen started no job: %+v", r)
	}
	rollout := r.JobID
	var names []string
	pollServe(t, p1, 2*time.Minute, fmt.Sprintf("%d replicas' units written", written), func() bool {
		names = changed()
		return len(names) >= written
	})
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	workersAtKill := l.Router().Workers()
	<-p1.done
	var ee *exec.ExitError
	if !errors.As(p1.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("first opsbot ended with %v, want killed by SIGKILL:\n%s", p1.err, p1.out.String())
	}
	killed := time.Now()
	t.Logf("killed with %s written; the router's workers then: %q", strings.Join(names, ", "), workersAtKill)

	p2 := startServe(t, "extra", nil, "serve", "--config", cfg)
	base := serveURL(t, p2)
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var undo store.Job
	pollServe(t, p2, 2*time.Minute, "the rollback of the interrupted rollout to succeed", func() bool {
		js, err := st.ListJobs(ctx, store.JobFilter{Limit: 20})
		if err != nil {
			t.Fatalf("list jobs: %v", err)
		}
		for _, j := range js {
			if j.ID > rollout && j.Command == "mtp undo qwen" {
				undo = j
				if j.Status.Final() && j.Status != store.Succeeded {
					t.Fatalf("the rollback #%d ended %s: %s\n%s", j.ID, j.Status, j.Error, p2.out.String())
				}
				return j.Status == store.Succeeded
			}
		}
		return false
	})
	t.Logf("rollback #%d succeeded %.1f s after the kill (lease_ttl %s)", undo.ID, time.Since(killed).Seconds(), leaseTTL)
	if undo.User != bot.TakeoverUser {
		t.Errorf("the rollback #%d is by %q, want %s", undo.ID, undo.User, bot.TakeoverUser)
	}
	audit, err := st.Audit(ctx, store.AuditFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	wantDecision := fmt.Sprintf("takeover of interrupted rollout #%d: rolled back", rollout)
	if !slices.ContainsFunc(audit, func(a store.AuditEntry) bool {
		return a.JobID == undo.ID && a.Decision == wantDecision && a.User == bot.TakeoverUser
	}) {
		t.Errorf("no audit row of #%d by %s with decision %q: %+v", undo.ID, bot.TakeoverUser, wantDecision, audit)
	}
	j, err := st.Job(ctx, rollout)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != store.Interrupted {
		t.Errorf("the rollout #%d is %s, want interrupted", rollout, j.Status)
	}

	for _, s := range topo.Services {
		after, err := l.Host(s.Host).ReadFile(unitDir + s.Unit)
		if err != nil {
			t.Fatal(err)
		}
		if string(after) != string(before[s.Name]) {
			t.Errorf("%s's unit after the rollback is not its text before the rollout:\n%s", s.Name, after)
		}
		code, body := 0, ""
		testkit.Poll(30*time.Second, func() bool {
			code, body = httpGet(t, s.URL+"/health")
			return code == 200
		})
		if code != 200 {
			t.Errorf("%s does not serve after the rollback: /health %d %s", s.Name, code, body)
		}
	}
	urls := func() []string {
		var u []string
		for _, s := range topo.Services {
			u = append(u, s.URL)
		}
		return u
	}()
	workers := l.Router().Workers()
	for _, u := range urls {
		if !slices.Contains(workers, u) {
			t.Errorf("the router's workers after the rollback are %q, want every replica (%q)", workers, urls)
			break
		}
	}

	_, body := httpGet(t, base+"/test/posts")
	var posts []string
	if err := json.Unmarshal([]byte(body), &posts); err != nil {
		t.Fatalf("/test/posts: %v: %s", err, body)
	}
	var notice string
	for _, p := range posts {
		if strings.Contains(p, fmt.Sprintf("#%d `mtp steps 10 qwen` was interrupted", rollout)) {
			notice = p
		}
	}
	for _, want := range []string{
		"The rollout was interrupted after changing " + strings.Join(names, " (steps 3 -> 10), ") + " (steps 3 -> 10)",
		fmt.Sprintf("rolling back: #%d (`mtp undo qwen`)", undo.ID),
	} {
		if !strings.Contains(notice, want) {
			t.Errorf("the room's notice of the interrupted rollout lacks %q:\n%s\nposts:\n%s", want, notice, strings.Join(posts, "\n---\n"))
		}
	}
	t.Logf("notice: %s", notice)

	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t, time.Minute); code != 0 {
		t.Fatalf("second opsbot after SIGTERM: exit %d\n%s", code, p2.out.String())
	}
}
