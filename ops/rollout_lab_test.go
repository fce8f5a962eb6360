package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// These tests run rollouts over replicas of one service on the lab: two
// nodes with two SGLang replicas each, behind the lab's router, which
// balances requests across its workers for real and counts the requests
// that fail. A load generator sends requests to the router throughout, and
// a sampler reads the router's worker list every few milliseconds.

// fleetRig is a replicated service "qwen" on the lab.
type fleetRig struct {
	labs   []*lab.Lab
	router *lab.Router
	rb     *ops.Runbook
	reps   []lab.ServiceInfo // the replicas' lab services, by replica name
	names  []string          // qwen@n1-ct1, ...
}

// newFleetRig starts nodes labs of perNode services each, makes each
// service a replica of qwen behind one lab router, and returns the rig.
func newFleetRig(t testing.TB, nodes, perNode int, tune func(*ops.Config)) *fleetRig {
	t.Helper()
	dir := t.TempDir()
	f := &fleetRig{}
	var topo lab.Topology
	for i := 0; i < nodes; i++ {
		l := labtest.Start(t, lab.Options{TimeScale: 1000, Node: fmt.Sprintf("n%d", i+1), Services: perNode, Dir: dir})
		f.labs = append(f.labs, l)
		lt := l.Topology()
		topo.ClientKeyPEM = lt.ClientKeyPEM
		topo.Hosts = append(topo.Hosts, lt.Hosts...)
		topo.KnownHosts = append(topo.KnownHosts, lt.KnownHosts...)
		topo.Services = append(topo.Services, lt.Services...)
	}
	ctx := testkit.Context(t, 60*time.Second)
	for _, l := range f.labs {
		for _, s := range l.Topology().Services {
			if err := l.WaitReady(ctx, s.Name); err != nil {
				t.Fatalf("lab service %s: %v", s.Name, err)
			}
		}
	}
	var urls []string
	for _, s := range topo.Services {
		urls = append(urls, s.URL)
	}
	rt, err := lab.StartRouter(lab.RouterOptions{Workers: urls})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	f.router = rt
	cfg := labtest.OpsConfig(t, topo, 20*time.Second)
	cfg.Bench = ops.BenchDefaults{Prompts: 6, Concurrency: 2, InputLen: 32, OutputLen: 48}
	cfg.ReapGrace, cfg.Poll, cfg.SettleTime = 300*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	cfg.StopTimeout, cfg.ClearTimeout = 20*time.Second, 20*time.Second
	cfg.MaxSteps = 16
	cfg.Rollout = ops.RolloutConfig{MaxUnavailable: 1, UnavailableWait: 60 * time.Second, DrainTimeout: 20 * time.Second}
	services := map[string]ops.ServiceConfig{}
	for _, s := range topo.Services {
		sc := cfg.Services[s.Name]
		sc.Replica = &ops.ReplicaOf{Group: "qwen", Name: s.Host, Router: &ops.RouterConfig{URL: rt.URL(), Kind: "sglang", Worker: s.URL}}
		name := ops.ReplicaName("qwen", s.Host)
		services[name] = sc
		f.reps = append(f.reps, s)
		f.names = append(f.names, name)
	}
	cfg.Services = services
	if tune != nil {
		tune(&cfg)
	}
	rb, err := ops.New(cfg)
	if err != nil {
		t.Fatalf("ops.New: %v", err)
	}
	t.Cleanup(func() { rb.Close() })
	f.rb = rb
	return f
}

// unitText is the unit file of replica i as its host has it.
func (f *fleetRig) unitText(t testing.TB, i int) string {
	t.Helper()
	s := f.reps[i]
	for _, l := range f.labs {
		if l.Topology().Services[0].ProxmoxNode == s.ProxmoxNode {
			b, err := l.Host(s.Host).ReadFile("/etc/systemd/system/" + s.Unit)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatalf("no lab runs %s", s.Host)
	return ""
}

func (f *fleetRig) units(t testing.TB) []string {
	out := make([]string, len(f.reps))
	for i := range f.reps {
		out[i] = f.unitText(t, i)
	}
	return out
}

// traffic is a load generator sending requests to the router, and a
// sampler of the router's worker list, from start until stop.
type traffic struct {
	ok, failed atomic.Int64
	maxOut     atomic.Int64
	firstErr   atomic.Value
	stopc      chan struct{}
	wg         sync.WaitGroup
}

// startTraffic sends streams concurrent requests to f's router in a loop
// and samples how many replicas are out of it every 2 ms.
func (f *fleetRig) startTraffic(t testing.TB, streams int) *traffic {
	t.Helper()
	tr := &traffic{stopc: make(chan struct{})}
	hc := &http.Client{Timeout: 30 * time.Second}
	model := f.model(t, hc)
	for i := 0; i < streams; i++ {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for {
				select {
				case <-tr.stopc:
					return
				default:
				}
				if err := complete(hc, f.router.URL(), model); err != nil {
					tr.failed.Add(1)
					tr.firstErr.CompareAndSwap(nil, err.Error())
				} else {
					tr.ok.Add(1)
				}
			}
		}()
	}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tr.stopc:
				return
			case <-tick.C:
			}
			out := int64(len(f.reps) - len(f.router.Workers()))
			for {
				m := tr.maxOut.Load()
				if out <= m || tr.maxOut.CompareAndSwap(m, out) {
					break
				}
			}
		}
	}()
	t.Cleanup(tr.stop)
	// Traffic flows before the test acts.
	testkit.WaitFor(t, 10*time.Second, "the first requests through the router", func() bool { return tr.ok.Load() >= int64(streams) })
	return tr
}

func (tr *traffic) stop() {
	select {
	case <-tr.stopc:
	default:
		close(tr.stopc)
	}
	tr.wg.Wait()
}

func (tr *traffic) String() string {
	s := fmt.Sprintf("%d requests ok, %d failed, at most %d replicas out of the router at once", tr.ok.Load(), tr.failed.Load(), tr.maxOut.Load())
	if e, _ := tr.firstErr.Load().(string); e != "" {
		s += "; first failure: " + e
	}
	return s
}

func (f *fleetRig) model(t testing.TB, hc *http.Client) string {
	t.Helper()
	resp, err := hc.Get(f.router.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) == 0 {
		t.Fatalf("models through the router: %v %+v", err, m)
	}
	return m.Data[0].ID
}

// complete sends one short completion to base; an error is a failed request.
func complete(hc *http.Client, base, model string) error {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": "hello there", "max_tokens": 16})
	resp, err := hc.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Usage.CompletionTokens < 1 {
		return fmt.Errorf("not a completion: %.200s", b)
	}
	return nil
}

// A rollout of mtp steps 10 over four replicas behind the router, with
// traffic throughout: no request to the router fails, never more than one
// replica is out of it, every replica runs steps 10 at the end and is back
// in the router; then mtp undo of the group, read from a store as the bot
// reads it, puts every replica back on its previous unit, byte for byte.
func TestRolloutStepsOverReplicasBehindRouter(t *testing.T) {
	testrun.Long(t)
	ctx := testkit.Context(t, 4*time.Minute)
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := newFleetRig(t, 2, 2, func(c *ops.Config) {
		c.Changes = storeChangeLog{st}
		// The gate's own behaviour is TestRolloutCanaryFailsGate's; here the
		// CPU the lab shares with other tests makes tok/s noisy.
		c.Rollout.MinTokSRatio, c.Rollout.MaxTTFTP95Ratio = 0.3, 5
	})
	before := f.units(t)
	tr := f.startTraffic(t, 4)
	ev := &events{}
	res, err := f.rb.Rollout(ctx, "qwen", ops.StepsChange(10), false, ev)
	tr.stop()
	t.Logf("rollout of mtp steps 10 over %d replicas: %s", len(f.reps), tr)
	if err != nil {
		t.Fatalf("rollout: %v\n%s", err, ev.text())
	}
	if tr.failed.Load() != 0 || f.router.Stats().Failures != 0 {
		t.Errorf("requests failed during the rollout: %s; router stats %+v\n%s", tr, f.router.Stats(), ev.text())
	}
	if tr.maxOut.Load() > 1 {
		t.Errorf("more than one replica out of the router at once: %s", tr)
	}
	if len(f.router.Workers()) != len(f.reps) {
		t.Errorf("router lists %v after the rollout, want all %d replicas", f.router.Workers(), len(f.reps))
	}
	for i, u := range f.units(t) {
		if !strings.Contains(u, "--speculative-num-steps 10") {
			t.Errorf("%s unit after the rollout:\n%s", f.names[i], u)
		}
	}
	if g := res.Rollout.Gate; g == nil || !g.Pass {
		t.Errorf("gate: %+v", res.Rollout.Gate)
	} else {
		t.Logf("gate: %s", g.Line())
	}
	for _, step := range []string{f.names[0] + ": drain", f.names[0] + ": rejoin", "gate"} {
		if !strings.Contains(ev.text(), step+" done") {
			t.Errorf("no %q step done in the thread:\n%s", step, ev.text())
		}
	}
	record(t, st, "mtp steps 10 qwen", "qwen", res)

	// mtp undo of the group: every replica back on its previous unit.
	tr = f.startTraffic(t, 4)
	ev = &events{}
	ures, err := f.rb.MTPUndo(ctx, "qwen", false, ev)
	tr.stop()
	t.Logf("mtp undo of the rollout: %s", tr)
	if err != nil {
		t.Fatalf("mtp undo qwen: %v\n%s", err, ev.text())
	}
	if tr.failed.Load() != 0 || tr.maxOut.Load() > 1 {
		t.Errorf("undo: %s", tr)
	}
	for i, u := range f.units(t) {
		if u != before[i] {
			t.Errorf("%s after mtp undo is not its unit before the rollout:\n%s", f.names[i], u)
		}
	}
	if n := len(ures.Rollout.Replicas); n != len(f.reps) {
		t.Errorf("undo acted on %d replicas, want %d", n, len(f.reps))
	}
}

// A canary whose new setting is slower (the lab decodes steps 10 four
// times slower) fails the gate: the thread and the error say which gate
// failed by how much, the canary is put back on its previous unit byte for
// byte, no other replica is touched, and no request to the router fails.
func TestRolloutCanaryFailsGate(t *testing.T) {
	testrun.Long(t)
	ctx := testkit.Context(t, 3*time.Minute)
	f := newFleetRig(t, 2, 2, nil)
	for _, l := range f.labs {
		l.SlowSteps(10, 4)
	}
	before := f.units(t)
	tr := f.startTraffic(t, 4)
	ev := &events{}
	res, err := f.rb.Rollout(ctx, "qwen", ops.StepsChange(10), false, ev)
	tr.stop()
	t.Logf("failed canary: %s", tr)
	if err == nil {
		t.Fatalf("the rollout passed a canary 4x slower:\n%s", ev.text())
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "failed the gate: tok/s 0.") || !strings.Contains(err.Error(), "gate 0.97x") ||
		!strings.Contains(err.Error(), "every changed replica was put back") {
		t.Errorf("error does not say which gate failed by how much and what was put back: %v", err)
	}
	if g := res.Rollout.Gate; g == nil || g.Pass || !(g.TokSRatio < 0.97) {
		t.Errorf("gate: %+v", res.Rollout.Gate)
	}
	for i, u := range f.units(t) {
		if u != before[i] {
			t.Errorf("%s is not on its previous unit:\n%s", f.names[i], u)
		}
	}
	if len(res.Rollout.Replicas) != 1 || !res.Rollout.Replicas[0].RolledBack {
		t.Errorf("replicas the rollout acted on: %+v", res.Rollout.Replicas)
	}
	if tr.failed.Load() != 0 || tr.maxOut.Load() > 1 {
		t.Errorf("traffic: %s", tr)
	}
	if len(f.router.Workers()) != len(f.reps) {
		t.Errorf("router lists %v, want all %d replicas", f.router.Workers(), len(f.reps))
	}
}

// Two jobs restart two replicas on different nodes at once
// (max_unavailable 1): the second to drain waits until the first is back
// in the router; both end serving and in the router, never two out.
func TestDrainMaxUnavailableAcrossJobs(t *testing.T) {
	testrun.Long(t)
	ctx := testkit.Context(t, 2*time.Minute)
	f := newFleetRig(t, 2, 1, nil)
	tr := f.startTraffic(t, 4)
	var wg sync.WaitGroup
	evs := make([]*events, len(f.names))
	errs := make([]error, len(f.names))
	for i, name := range f.names {
		evs[i] = &events{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.rb.ServiceAction(ctx, name, "restart", false, evs[i])
		}()
	}
	wg.Wait()
	tr.stop()
	t.Logf("two restarts at once: %s", tr)
	waited := false
	for i := range f.names {
		if errs[i] != nil {
			t.Errorf("%s restart: %v\n%s", f.names[i], errs[i], evs[i].text())
		}
		waited = waited || strings.Contains(evs[i].text(), "out of the router already (rollout.max_unavailable 1)")
	}
	if !waited {
		t.Errorf("neither drain waited for the other:\n%s\n%s", evs[0].text(), evs[1].text())
	}
	if tr.maxOut.Load() > 1 || tr.failed.Load() != 0 {
		t.Errorf("traffic: %s", tr)
	}
	if len(f.router.Workers()) != len(f.reps) {
		t.Errorf("router lists %v, want both replicas", f.router.Workers())
	}
}

// record keeps res as a succeeded job of service in st.
func record(t testing.TB, st *store.Store, cmd, service string, res *ops.Result) {
	t.Helper()
	ctx := context.Background()
	j, err := st.CreateJob(ctx, store.Job{Command: cmd, Service: service, Status: store.Queued})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err == nil {
		err = st.StartJob(ctx, j.ID)
	}
	if err == nil {
		err = st.FinishJob(ctx, j.ID, store.Succeeded, "", b)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRolloutFourReplicas rolls mtp steps out over four replicas
// behind the lab's router (steps 10, then 3, alternately) with traffic
// throughout, and reports the figures: requests to the router that
// failed during the rollouts, and the most replicas out of the router at
// once. Run with -bench RolloutFourReplicas -benchtime 2x.
func BenchmarkRolloutFourReplicas(b *testing.B) {
	f := newFleetRig(b, 2, 2, func(c *ops.Config) { c.Rollout.MinTokSRatio, c.Rollout.MaxTTFTP95Ratio = 0.3, 5 })
	ctx := testkit.Context(b, 10*time.Minute)
	tr := f.startTraffic(b, 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		steps := 10
		if i%2 == 1 {
			steps = 3
		}
		ev := &events{}
		if _, err := f.rb.Rollout(ctx, "qwen", ops.StepsChange(steps), false, ev); err != nil {
			b.Fatalf("rollout: %v\n%s", err, ev.text())
		}
	}
	b.StopTimer()
	tr.stop()
	b.ReportMetric(float64(tr.failed.Load()), "failed-requests")
	b.ReportMetric(float64(tr.maxOut.Load()), "max-out")
	b.ReportMetric(float64(tr.ok.Load())/float64(b.N), "ok-requests/op")
	b.Logf("%d rollouts over 4 replicas: %s", b.N, tr)
}

// A dry run of a rollout changes nothing and says, for each replica, what
// its pipeline would do: the drain out of the router and the rejoin named,
// no benchmark of its own (the gate's benchmark is the rollout's).
func TestRolloutDryRunNamesTheDrain(t *testing.T) {
	testrun.Long(t)
	ctx := testkit.Context(t, 2*time.Minute)
	f := newFleetRig(t, 1, 2, nil)
	before := f.units(t)
	res, err := f.rb.Rollout(ctx, "qwen", ops.StepsChange(4), true, &events{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Summary, "dry run:") {
		t.Errorf("summary %q", res.Summary)
	}
	var would []string
	details := res.Details
	for _, r := range res.Replicas {
		details = append(details, r.Details...)
	}
	for _, d := range details {
		if strings.HasPrefix(d, "would: ") {
			would = append(would, d)
		}
	}
	if len(would) != 2 {
		t.Fatalf("want one would-line per replica, got %q (%+v)", would, res)
	}
	for _, w := range would {
		if !strings.Contains(w, "out of router http://") || !strings.Contains(w, "put it back in the router") || strings.HasSuffix(w, ", benchmark") {
			t.Errorf("would-line: %s", w)
		}
	}
	if after := f.units(t); !slices.Equal(before, after) {
		t.Error("a dry run changed a unit")
	}
}
