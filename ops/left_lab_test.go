package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// These tests read Result.Left: the state each way a job can end leaves the
// service in, on the lab over real SSH.

// cancelOn is a Reporter that cancels the job when a step starts.
type cancelOn struct {
	events
	step   string
	cancel context.CancelFunc
}

func (c *cancelOn) Report(ev ops.Event) {
	c.events.Report(ev)
	if ev.Step == c.step && ev.Status == ops.StepStarted {
		c.cancel()
	}
}

func wantLeft(t *testing.T, got *ops.ServiceLeft, want ops.ServiceLeft, thread string) {
	t.Helper()
	if got == nil {
		t.Fatalf("no Result.Left\n%s", thread)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("left %+v, want %+v\n%s", *got, want, thread)
	}
}

func newUnitText(before string, steps string, drafts string) string {
	return strings.Replace(strings.Replace(before, "--speculative-num-steps 3", "--speculative-num-steps "+steps, 1),
		"--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens "+drafts, 1)
}

// A cancel while the new unit's engine loads (slow-load) does not stop the
// start: the service is left starting on the new unit, and the next command
// says how to see it serve, or put steps 3 back.
func TestCancelDuringLoadLeavesNewUnitStarting(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(lab.Fault{Name: "slow-load", Duration: 30 * time.Minute}), nil)
	before := r.unitText(t)
	ctx, cancel := context.WithCancel(testkit.Context(t, 60*time.Second))
	defer cancel()
	rep := &cancelOn{step: "wait until ready", cancel: cancel}
	res, err := r.rb.MTPSteps(ctx, "qwen", 6, false, rep)
	if err == nil {
		t.Fatalf("cancelled job succeeded\n%s", rep.text())
	}
	if got := r.unitText(t); got != newUnitText(before, "6", "7") {
		t.Fatalf("unit is not the new text:\n%s", got)
	}
	wantLeft(t, res.Left, ops.ServiceLeft{Service: "qwen", Host: "gpu1", State: ops.LeftStarting, Unit: ops.UnitNew, Steps: 6, Changed: true,
		Started: true, NextStep: ops.NextStatus, UndoSteps: 3}, rep.text())
}

// A cancel during the write lets the write (and its daemon-reload) finish,
// then stops before the start: the new unit is in place, whole, not started.
func TestCancelDuringWriteLeavesNewUnitNotStarted(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), nil)
	before := r.unitText(t)
	ctx, cancel := context.WithCancel(testkit.Context(t, 60*time.Second))
	defer cancel()
	rep := &cancelOn{step: "write unit", cancel: cancel}
	res, err := r.rb.MTPSteps(ctx, "qwen", 6, false, rep)
	if err == nil {
		t.Fatalf("cancelled job succeeded\n%s", rep.text())
	}
	if got := r.unitText(t); got != newUnitText(before, "6", "7") {
		t.Fatalf("unit is not the whole new text:\n%s", got)
	}
	if st := r.lab.Host("gpu1").Unit(r.svc.Unit); st.ActiveState != "inactive" || st.NeedDaemonReload {
		t.Fatalf("unit %+v, want inactive (no start after the cancel)", st)
	}
	if strings.Contains(rep.text(), "start started") {
		t.Fatalf("a start was begun after the cancel:\n%s", rep.text())
	}
	wantLeft(t, res.Left, ops.ServiceLeft{Service: "qwen", Host: "gpu1", State: ops.LeftStopped, Unit: ops.UnitNew, Steps: 6, Changed: true,
		NextStep: ops.NextStart, UndoSteps: 3}, rep.text())
}

// Item 3's report: a vLLM unit under a config that says sglang. verify reads
// what vLLM offers (its per-position speculative counters on /metrics), not
// SGLang's /server_info, and the job succeeds on the new unit.
func TestVLLMStepsVerifiedFromMetrics(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../deploy/vllm-qwen.service")
	if err != nil {
		t.Fatal(err)
	}
	opts := labOpts()
	opts.UnitText = string(text)
	r := newRig(t, opts, nil)
	ev := &events{}
	res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 4, false, ev)
	if err != nil {
		t.Fatalf("mtp steps 4 on vLLM: %v\n%s", err, ev.text())
	}
	if res.Spec.LiveSteps != 4 || !strings.Contains(ev.text(), "verify done: engine runs vLLM num_speculative_tokens 4") {
		t.Fatalf("verify did not read 4 from the engine (live %d)\n%s", res.Spec.LiveSteps, ev.text())
	}
	wantLeft(t, res.Left, ops.ServiceLeft{Service: "qwen", Host: "gpu1", State: ops.LeftServing, Unit: ops.UnitNew, Steps: 4, Changed: true,
		UndoSteps: 3}, ev.text())
}

// engineProxy serves the lab engine at target through a real HTTP server on
// loopback, passing every request on; rewrite may change a response. It
// stands in for an engine that misbehaves in ways the lab does not simulate
// (ignores its flags, fails every generation).
func engineProxy(t *testing.T, target string, rewrite func(path string, body []byte) (int, []byte, bool)) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.ModifyResponse = func(resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if code, nb, ok := rewrite(resp.Request.URL.Path, b); ok {
			resp.StatusCode, b = code, nb
			resp.Header.Del("Content-Length")
			resp.ContentLength = int64(len(b))
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// An engine that serves but ignores the new steps (it reports steps 3) fails
// verify: the previous unit is restored and started, and the error says so.
func TestVerifyMismatchRollsBack(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), func(c *ops.Config) {
		s := c.Services["qwen"]
		s.URL = engineProxy(t, s.URL, func(path string, b []byte) (int, []byte, bool) {
			if path != "/server_info" && path != "/get_server_info" {
				return 0, nil, false
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				return 0, nil, false
			}
			m["speculative_num_steps"], m["speculative_num_draft_tokens"] = 3, 4
			nb, _ := json.Marshal(m)
			return http.StatusOK, nb, true
		})
		c.Services["qwen"] = s
	})
	before := r.unitText(t)
	ev := &events{}
	res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 6, false, ev)
	if err == nil {
		t.Fatalf("succeeded although the engine runs steps 3\n%s", ev.text())
	}
	if !strings.Contains(err.Error(), "does not run the new settings") || !strings.Contains(err.Error(), "restored the previous unit (steps 3) and it serves again") {
		t.Fatalf("error does not say why and what runs: %v", err)
	}
	if got := r.unitText(t); got != before {
		t.Fatalf("unit not restored:\n%s", got)
	}
	if !res.HasIncident(ops.IncidentRolledBack) || !res.HasIncident(ops.IncidentSettingsDiffer) {
		t.Fatalf("incidents %v", res.Incidents)
	}
	wantLeft(t, res.Left, ops.ServiceLeft{Service: "qwen", Host: "gpu1", State: ops.LeftServing, Unit: ops.UnitOld, Steps: 3, Changed: true,
		RolledBack: true}, ev.text())
}

// An engine that serves the new settings but fails every generation fails
// the benchmark only: the new unit stays, and the error says so.
func TestBenchFailureKeepsNewUnit(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), func(c *ops.Config) {
		s := c.Services["qwen"]
		s.URL = engineProxy(t, s.URL, func(path string, b []byte) (int, []byte, bool) {
			if strings.HasPrefix(path, "/v1/") && strings.HasSuffix(path, "completions") {
				return http.StatusInternalServerError, []byte(`{"object":"error","message":"CUDA error"}`), true
			}
			return 0, nil, false
		})
		c.Services["qwen"] = s
	})
	before := r.unitText(t)
	ev := &events{}
	res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 6, false, ev)
	if err == nil {
		t.Fatalf("succeeded although every request failed\n%s", ev.text())
	}
	if !strings.Contains(err.Error(), "the new unit (steps 6) stays") {
		t.Fatalf("error does not say the new unit stays: %v", err)
	}
	if got := r.unitText(t); got != newUnitText(before, "6", "7") {
		t.Fatalf("unit is not the new text:\n%s", got)
	}
	if res.HasIncident(ops.IncidentRolledBack) {
		t.Fatalf("rolled back on a benchmark failure: %v", res.Incidents)
	}
	wantLeft(t, res.Left, ops.ServiceLeft{Service: "qwen", Host: "gpu1", State: ops.LeftServing, Unit: ops.UnitNew, Steps: 6, Changed: true,
		UndoSteps: 3}, ev.text())
}

// A new unit whose engine is not ready within the ready timeout is rolled
// back like a failed start. slow-load slows every start, the rollback's too,
// so the previous unit is restored and left starting.
func TestReadyTimeoutRollsBack(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(lab.Fault{Name: "slow-load", Duration: 40 * time.Minute}), func(c *ops.Config) {
		s := c.Services["qwen"]
		s.ReadyTimeout = time.Second
		c.Services["qwen"] = s
	})
	before := r.unitText(t)
	ev := &events{}
	res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 6, false, ev)
	if err == nil {
		t.Fatalf("succeeded\n%s", ev.text())
	}
	var ns *ops.NotServingError
	if !asNotServing(err, &ns) || !strings.Contains(err.Error(), "rolling back to the previous unit (steps 3)") {
		t.Fatalf("error is not a ready timeout followed by a rollback: %v", err)
	}
	if got := r.unitText(t); got != before {
		t.Fatalf("unit not restored:\n%s", got)
	}
	wantLeft(t, res.Left, ops.ServiceLeft{Service: "qwen", Host: "gpu1", State: ops.LeftStarting, Unit: ops.UnitOld, Steps: 3, Changed: true,
		RolledBack: true, Started: true, NextStep: ops.NextStatus}, ev.text())
}

// D state: the error names the node the PID lives on and the GPUs it holds,
// says the service is down and that only a reboot of the node helps, naming
// every service it takes down, never `gpu recover` or a GPU reset (the driver
// refuses it while the process holds the GPU); `gpu status` afterwards
// advises the same.
func TestDStateSaysNodeGPUsAndReboot(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(lab.Fault{Name: "dstate"}), nil)
	ev := &events{}
	res, err := r.rb.GPURecover(testkit.Context(t, 60*time.Second), "qwen", ops.RecoverOptions{}, ev)
	if err == nil {
		t.Fatalf("succeeded with a D-state holder\n%s", ev.text())
	}
	msg := err.Error()
	for _, want := range []string{"on pve", "holding GPU 0", "D state", "qwen is down (stopped)", "refuses a GPU reset", "reboot pve, which takes down coder, qwen"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	wantLeft(t, res.Left, ops.ServiceLeft{Service: "qwen", Host: "gpu1", State: ops.LeftStopped, Changed: true, Advice: res.Left.Advice}, ev.text())
	if !strings.Contains(res.Left.Advice, "reboot pve") || strings.Contains(res.Left.Advice, "`gpu recover qwen`") || res.Left.Next != "" {
		t.Fatalf("left %+v advises the wrong thing", *res.Left)
	}
	st, err := r.rb.GPUStatus(testkit.Context(t, 60*time.Second), "", ops.Discard)
	if err != nil {
		t.Fatal(err)
	}
	status := strings.Join(st.Details, "\n")
	if strings.Contains(status, "`gpu recover qwen` clears it") || !strings.Contains(status, "reboot pve, which takes down coder, qwen") {
		t.Fatalf("gpu status advises the wrong thing:\n%s", status)
	}
}

func asNotServing(err error, target **ops.NotServingError) bool { return errors.As(err, target) }

// The driver releasing the stopped engine's memory is progress, not an
// alarm; only a release that lasts beyond ops.ReleaseWarnAfter is a warning.
func TestSlowReleaseWarnsOnlyAfterAWhile(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	for _, c := range []struct {
		lag  time.Duration // simulated, at x1000
		warn bool
	}{
		{lag: 10 * time.Minute, warn: false},                                                     // 0.6 s
		{lag: time.Duration(ops.ReleaseWarnAfter.Seconds()*1000+1800) * time.Second, warn: true}, // ReleaseWarnAfter + 1.8 s
	} {
		opts := labOpts()
		opts.ReleaseLag = c.lag
		r := newRig(t, opts, nil)
		ev := &events{}
		if _, err := r.rb.GPURecover(testkit.Context(t, 60*time.Second), "qwen", ops.RecoverOptions{}, ev); err != nil {
			t.Fatalf("gpu recover: %v\n%s", err, ev.text())
		}
		thread := ev.text()
		if !strings.Contains(thread, "waiting for the driver to release") {
			t.Fatalf("lag %s: no progress line for the release:\n%s", c.lag, thread)
		}
		warned := strings.Contains(thread, "clear GPUs warning: GPU memory still in use after")
		if warned != c.warn {
			t.Fatalf("lag %s: warned %v, want %v:\n%s", c.lag, warned, c.warn, thread)
		}
	}
}
