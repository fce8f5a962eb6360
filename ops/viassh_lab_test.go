package ops_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/ops/engine"
)

// viaSSHRig is a lab whose engines listen on their hosts' loopback only
// (nothing answers on a service's URL from here), and the ops config that
// reaches qwen with via_ssh.
type viaSSHRig struct {
	lab *lab.Lab
	cfg ops.Config
	svc lab.ServiceInfo
}

func newViaSSHRig(t *testing.T, engineName string) *viaSSHRig {
	t.Helper()
	opts := labOpts()
	opts.Engine, opts.LoopbackEngines = engineName, true
	l := labtest.Start(t, opts)
	topo := l.Topology()
	cfg := labtest.OpsConfig(t, topo, 20*time.Second)
	cfg.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 200}
	cfg.ReapGrace, cfg.Poll, cfg.SettleTime = 300*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	cfg.StopTimeout, cfg.ClearTimeout = 20*time.Second, 20*time.Second
	q := cfg.Services["qwen"]
	q.ViaSSH = true
	cfg.Services["qwen"] = q
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatalf("lab not ready: %v", err)
	}
	return &viaSSHRig{lab: l, cfg: cfg, svc: topo.Services[0]}
}

// runbook is a new Runbook on the rig (its own SSH pool and engine clients).
func (r *viaSSHRig) runbook(t *testing.T) *ops.Runbook {
	t.Helper()
	rb, err := ops.New(r.cfg)
	if err != nil {
		t.Fatalf("ops.New: %v", err)
	}
	t.Cleanup(func() { rb.Close() })
	return rb
}

// TestViaSSHJobThroughTheTunnel: with via_ssh, `mtp steps 5` on an engine
// that listens only on its host's loopback waits for readiness, verifies the
// settings (SGLang's /server_info; vLLM's /metrics), flushes the cache and
// benchmarks with acceptance over the window, all through direct-tcpip
// channels of the SSH connection to gpu1: the URL does not answer from here,
// so any direct use would have failed the job. `svc status` then sees it
// serve, and the benchmark outside jobs reaches it the same way.
func TestViaSSHJobThroughTheTunnel(t *testing.T) {
	for _, c := range []struct{ engine, source string }{
		{"sglang", bench.SourceSGLangFlush},
		{"vllm", bench.SourceVLLMDeltas},
	} {
		t.Run(c.engine, func(t *testing.T) {
			t.Parallel()
			r := newViaSSHRig(t, c.engine)
			ctx := testkit.Context(t, 60*time.Second)
			if ph, _ := engine.New(r.svc.URL).Probe(ctx); ph != engine.PhaseRefused {
				t.Fatalf("the engine answers on %s from here (%s): the test would not prove the tunnel", r.svc.URL, ph)
			}
			rb := r.runbook(t)
			ev := &events{}
			res, err := rb.MTPSteps(ctx, "qwen", 5, false, ev)
			if err != nil {
				t.Fatalf("mtp steps 5 via SSH: %v\n%s", err, ev.text())
			}
			if res.Spec == nil || res.Spec.Steps != 5 || res.Bench == nil || res.Bench.OutputTokS <= 0 || res.Bench.RequestsOK != 4 {
				t.Fatalf("result %+v, bench %+v: want steps 5 and 4 benchmark requests served", res.Spec, res.Bench)
			}
			if res.Bench.AcceptLen <= 1 || res.Bench.AcceptSource != c.source || !res.Bench.AcceptOverWindow {
				t.Errorf("acceptance %.2f from %q (over the window: %v), want > 1 from %q over the window",
					res.Bench.AcceptLen, res.Bench.AcceptSource, res.Bench.AcceptOverWindow, c.source)
			}
			if !strings.Contains(ev.text(), "wait until ready done") {
				t.Errorf("no readiness wait in the thread:\n%s", ev.text())
			}
			if n := r.lab.Host("gpu1").Forwarded(); n < 3 {
				// The engine client's kept-alive connection and the benchmark's two.
				t.Errorf("gpu1 forwarded %d channels, want at least 3", n)
			}
			st, err := rb.ServiceStatus(ctx, "qwen", ops.Discard)
			if err != nil || st.Service.Ready != "ready" {
				t.Fatalf("svc status via SSH: %v %+v", err, st.Service)
			}
			dial, err := rb.EngineDial("qwen")
			if err != nil || dial == nil {
				t.Fatalf("EngineDial(qwen) = %v, %v; want the SSH dial", dial, err)
			}
			out, err := bench.Run(ctx, bench.Options{URL: r.svc.URL, Dial: dial, Prompts: 2, Concurrency: 2, InputLen: 16, OutputLen: 32})
			if err != nil || out.RequestsOK != 2 {
				t.Fatalf("benchmark outside a job through EngineDial: %v %+v", err, out)
			}
		})
	}
}

// TestViaSSHForwardingRefused: when gpu1's SSH server refuses to forward
// (AllowTcpForwarding no), every job that needs the engine fails before it
// changes anything, saying why and what to set; the service keeps running as
// it was (same unit text, same main PID, no restart); `svc status` says the
// engine cannot be checked instead of calling it unhealthy.
func TestViaSSHForwardingRefused(t *testing.T) {
	t.Parallel()
	r := newViaSSHRig(t, "sglang")
	r.lab.RefuseForwarding(true)
	rb := r.runbook(t)
	ctx := testkit.Context(t, 60*time.Second)
	h := r.lab.Host("gpu1")
	unitPath := "/etc/systemd/system/" + r.svc.Unit
	before, err := h.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	st0 := h.Unit(r.svc.Unit)
	const fix = "set AllowTcpForwarding yes (or local) in its sshd_config"
	jobs := map[string]func() (*ops.Result, error){
		"mtp steps 5":     func() (*ops.Result, error) { return rb.MTPSteps(ctx, "qwen", 5, false, ops.Discard) },
		"mtp steps 5 dry": func() (*ops.Result, error) { return rb.MTPSteps(ctx, "qwen", 5, true, ops.Discard) },
		"svc restart":     func() (*ops.Result, error) { return rb.ServiceAction(ctx, "qwen", "restart", false, ops.Discard) },
		"svc start":       func() (*ops.Result, error) { return rb.ServiceAction(ctx, "qwen", "start", false, ops.Discard) },
		"gpu recover":     func() (*ops.Result, error) { return rb.GPURecover(ctx, "qwen", ops.RecoverOptions{}, ops.Discard) },
		"bench":           func() (*ops.Result, error) { return rb.Bench(ctx, "qwen", ops.BenchParams{}, false, ops.Discard) },
	}
	for name, job := range jobs {
		res, err := job()
		if err == nil || !strings.Contains(err.Error(), fix) || !strings.Contains(err.Error(), "the SSH server on gpu1 refused to forward to 127.0.0.1:") {
			t.Errorf("%s: err %v, want the refusal and %q", name, err, fix)
			continue
		}
		if l := res.Left; l != nil && (l.Changed || !l.Unreachable || !strings.Contains(l.Advice, "AllowTcpForwarding") || l.Next != "") {
			t.Errorf("%s: left %+v (%s), want unchanged, unreachable, with the advice", name, l, l.Sentence())
		}
	}
	if _, err := rb.ServiceStatus(ctx, "qwen", ops.Discard); err == nil || !strings.Contains(err.Error(), "active/running, but its engine cannot be checked") ||
		!strings.Contains(err.Error(), fix) {
		t.Errorf("svc status: %v, want the unit's state and the refusal", err)
	}
	after, err := h.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	st1 := h.Unit(r.svc.Unit)
	if string(after) != string(before) || st1.MainPID != st0.MainPID || st1.NRestarts != st0.NRestarts || !st1.Ready {
		t.Fatalf("refused jobs changed the service: %+v -> %+v (unit changed: %v)", st0, st1, string(after) != string(before))
	}
	if n := h.Forwarded(); n != 0 {
		t.Errorf("gpu1 forwarded %d channels while refusing", n)
	}
}

// BenchmarkBenchThroughTunnel runs the same benchmark load against the same
// lab engine directly and through the SSH connection to its host (via_ssh),
// and reports the benchmark client's figures for each: what the tunnel costs
// a measurement. Run with -benchtime=Nx (each iteration is a whole run):
//
//	go test -tags goolm ./ops -run '^$' -bench BenchThroughTunnel -benchtime 3x
func BenchmarkBenchThroughTunnel(b *testing.B) {
	l := labtest.Start(b, lab.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		b.Fatal(err)
	}
	topo := l.Topology()
	svc := topo.Services[0]
	cfg := labtest.OpsConfig(b, topo, time.Minute)
	q := cfg.Services["qwen"]
	q.ViaSSH = true
	cfg.Services["qwen"] = q
	rb, err := ops.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rb.Close() })
	tunnel, err := rb.EngineDial("qwen")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		dial engine.DialFunc
	}{{"direct", nil}, {"ssh", tunnel}} {
		b.Run(c.name, func(b *testing.B) {
			var sum bench.Result
			for i := 0; i < b.N; i++ {
				out, err := bench.Run(ctx, bench.Options{URL: svc.URL, Dial: c.dial, Prompts: 32, Concurrency: 8, InputLen: 256,
					OutputLen: 128, Seed: int64(i + 1)})
				if err != nil || out.RequestsFailed > 0 {
					b.Fatalf("benchmark %s: %v %+v", c.name, err, out)
				}
				sum.OutputTokS += out.OutputTokS
				sum.PerStreamTokS += out.PerStreamTokS
				sum.TTFT.Mean += out.TTFT.Mean
				sum.TTFT.P99 += out.TTFT.P99
				sum.ITL.Mean += out.ITL.Mean
				sum.E2E.Mean += out.E2E.Mean
			}
			n := float64(b.N)
			b.ReportMetric(sum.OutputTokS/n, "tok/s")
			b.ReportMetric(sum.PerStreamTokS/n, "tok/s/stream")
			b.ReportMetric(sum.TTFT.Mean/n, "ttft_ms")
			b.ReportMetric(sum.TTFT.P99/n, "ttft_p99_ms")
			b.ReportMetric(sum.ITL.Mean/n, "itl_ms")
			b.ReportMetric(sum.E2E.Mean/n, "e2e_ms")
		})
	}
}
