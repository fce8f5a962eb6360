package ops

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/enginetest"
	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/ops/remote"
)

// TestEngineRedirectNotFollowed is the probe of an engine's port taken over: a server there
// answers every request "302 Location: http://127.0.0.1:OTHER/latest/meta-data/iam", where
// another server holds a secret. Through a via_ssh tunnel of a real OpenSSH sshd, and directly,
// every use a service's runbook makes of the engine (the reach check, readiness, /server_info,
// /metrics, /flush_cache, the benchmark's model lookup, requests and acceptance) is an error
// naming the 302 and the Location, the other port gets no request, its secret is quoted
// nowhere, and sshd was asked for channels to the engine's port only: the tunnel itself refuses
// the other address.
func TestEngineRedirectNotFollowed(t *testing.T) {
	for _, viaSSH := range []bool{true, false} {
		name := map[bool]string{true: "via_ssh", false: "direct"}[viaSSH]
		t.Run(name, func(t *testing.T) {
			ctx := testkit.Context(t, 60*time.Second)
			s := sshdtest.StartWith(t, sshdtest.Options{DebugLog: true})
			r := enginetest.StartRedirect(t)
			rb := sshdRunbook(t, s, ServiceConfig{Host: "gpu1", Unit: "sglang-qwen.service", URL: r.Engine.URL, ViaSSH: viaSSH, Engine: "sglang"})
			tg, err := rb.target("qwen")
			if err != nil {
				t.Fatal(err)
			}
			if err := rb.checkReach(ctx, tg); err != nil {
				t.Fatalf("reach check: %v", err)
			}
			for what, err := range engineUses(ctx, tg) {
				if err == nil {
					t.Errorf("%s: no error from a redirecting server", what)
					continue
				}
				r.CheckRefused(t, name+": "+what, err.Error())
			}
			if !viaSSH {
				if n := len(s.ForwardTargets()); n != 0 || tg.dial != nil {
					t.Errorf("direct: %d channels through sshd, dial %v", n, tg.dial != nil)
				}
				return
			}
			if _, err := tg.dial(ctx, "tcp", r.TargetAddr()); !errors.Is(err, remote.ErrNotTarget) {
				t.Errorf("the tunnel dialled %s: %v, want ErrNotTarget", r.TargetAddr(), err)
			}
			// One channel per request (each answer closes its connection), and the reach check's.
			want := int(r.EngineHits()) + 1
			testkit.WaitFor(t, 10*time.Second, "sshd's log of every channel", func() bool { return len(s.ForwardTargets()) >= want })
			for _, got := range s.ForwardTargets() {
				if got != r.EngineAddr() {
					t.Errorf("sshd was asked for a channel to %s, want only %s (the engine's port): %v", got, r.EngineAddr(), s.ForwardTargets())
					break
				}
			}
		})
	}
}

// engineUses makes each use a job makes of its service's engine and returns its error by name.
func engineUses(ctx context.Context, tg *target) map[string]error {
	out := map[string]error{}
	_, out["probe"] = tg.eng.Probe(ctx)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	out["wait ready"] = tg.eng.WaitReady(wctx, 50*time.Millisecond, nil)
	cancel()
	_, out["server info"] = tg.eng.ServerInfo(ctx)
	_, out["metrics"] = tg.eng.Metrics(ctx)
	out["flush cache"] = tg.eng.FlushCache(ctx)
	o := bench.Options{URL: tg.cfg.URL, Dial: tg.dial, Prompts: 2, Concurrency: 2, InputLen: 8, OutputLen: 8, Timeout: 10 * time.Second}
	_, out["benchmark, model from /v1/models"] = bench.Run(ctx, o)
	o.Model, o.Acceptance = "m", bench.SGLangAcceptance(tg.eng, nil)
	res, err := bench.Run(ctx, o)
	if res != nil {
		err = errors.Join(err, errors.New(strings.Join(res.Errors, "\n")))
	}
	out["benchmark requests and acceptance"] = err
	return out
}

// sshdRunbook is a Runbook whose one host, gpu1, is s, with sc as its one service qwen.
func sshdRunbook(t *testing.T, s *sshdtest.Server, sc ServiceConfig) *Runbook {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(key, s.ClientKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	rb, err := New(Config{KeyFile: key, KnownHosts: s.KnownHostsFile, Hosts: map[string]HostConfig{"gpu1": {Addr: s.Addr, User: s.User}},
		Services: map[string]ServiceConfig{"qwen": sc}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.Close() })
	return rb
}
