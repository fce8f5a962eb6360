package ops_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// engine set changes one flag's bytes in the unit, redeploys, reads the
// value back from the engine and benchmarks; mtp undo then puts the unit
// back byte for byte, the engine's value read back again.
func TestEngineSetAndUndo(t *testing.T) {
	t.Parallel()
	h := &history{}
	r := newRig(t, labOpts(), func(c *ops.Config) { c.Changes = h })
	original := r.unitText(t)
	ev := &events{}
	res, err := r.rb.EngineSet(testkit.Context(t, 60*time.Second), "qwen", "mem-fraction-static", "0.8", false, ev)
	if err != nil {
		t.Fatalf("engine set: %v\n%s", err, ev.text())
	}
	after := r.unitText(t)
	if want := strings.Replace(original, "--mem-fraction-static 0.88 ", "--mem-fraction-static 0.8 ", 1); after != want {
		t.Fatalf("unit after engine set is not the one-flag edit:\n%s", after)
	}
	if res.Flag == nil || res.Flag.Before != "0.88" || res.Flag.Unit != "0.8" || res.Flag.Live == nil || *res.Flag.Live != "0.8" {
		t.Errorf("flag %+v: want 0.88 -> 0.8, read back 0.8 from the engine", res.Flag)
	}
	if res.Bench == nil || !strings.Contains(res.Summary, "--mem-fraction-static 0.88 -> --mem-fraction-static 0.8") {
		t.Errorf("summary %q, bench %v", res.Summary, res.Bench)
	}
	if !strings.Contains(ev.text(), "verify flag done: engine runs mem_fraction_static 0.8") {
		t.Errorf("no read-back step:\n%s", ev.text())
	}
	if res.Left == nil || res.Left.State != ops.LeftServing {
		t.Errorf("left %+v", res.Left)
	}
	h.add(ops.AppliedChange{JobID: 7, Command: "engine set mem-fraction-static 0.8 qwen", Status: "succeeded", Unit: *res.Unit})

	ev = &events{}
	ures, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ev)
	if err != nil {
		t.Fatalf("mtp undo of engine set: %v\n%s", err, ev.text())
	}
	if got := r.unitText(t); got != original {
		t.Fatalf("undo did not restore the unit byte for byte:\n%s", got)
	}
	if !strings.Contains(ures.Summary, "--mem-fraction-static 0.8 -> --mem-fraction-static 0.88") {
		t.Errorf("undo summary %q does not say the flag", ures.Summary)
	}
	if !strings.Contains(ev.text(), "engine runs mem_fraction_static 0.88") {
		t.Errorf("undo did not read the flag back:\n%s", ev.text())
	}
}

// A value outside the flag's range, or a flag of the other engine, is
// refused before anything is stopped: the unit is untouched and the
// service serves as before.
func TestEngineSetRefusalChangesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), nil)
	original := r.unitText(t)
	for _, c := range [][2]string{{"mem-fraction-static", "1.5"}, {"gpu-memory-utilization", "0.8"}, {"cuda-graph-max-bs", "0"}} {
		ev := &events{}
		_, err := r.rb.EngineSet(testkit.Context(t, 30*time.Second), "qwen", c[0], c[1], false, ev)
		if err == nil || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("engine set %s %s: %v, want a refusal", c[0], c[1], err)
		}
		if strings.Contains(ev.text(), "stop") {
			t.Errorf("engine set %s %s stopped the service:\n%s", c[0], c[1], ev.text())
		}
	}
	if got := r.unitText(t); got != original {
		t.Fatalf("unit changed:\n%s", got)
	}
	if st := r.lab.Host("gpu1").Unit(r.svc.Unit); !st.Ready {
		t.Fatalf("service not serving: %+v", st)
	}
}

// The out-of-memory start of steps that do not fit names `engine set` with
// a value computed from the engine's own figures; applying it makes the
// same steps start on the lab.
func TestOutOfMemoryAdviceNamesEngineSet(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), nil)
	ev := &events{}
	_, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 14, false, ev)
	if err == nil {
		t.Fatalf("mtp steps 14 fitted the GPU\n%s", ev.text())
	}
	m := regexp.MustCompile("`engine set mem-fraction-static (0\\.[0-9]+) qwen`").FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("the advice names no engine set command: %v", err)
	}
	t.Logf("error: %v", err)
	if m[1] == "0.8" || m[1] == "0.7" {
		t.Errorf("advice %s is SGLang's own example, not a computed value", m[1])
	}
	ev = &events{}
	if _, err := r.rb.EngineSet(testkit.Context(t, 60*time.Second), "qwen", "mem-fraction-static", m[1], false, ev); err != nil {
		t.Fatalf("engine set %s: %v\n%s", m[1], err, ev.text())
	}
	ev = &events{}
	if _, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 14, false, ev); err != nil {
		t.Fatalf("mtp steps 14 after engine set mem-fraction-static %s: %v\n%s", m[1], err, ev.text())
	}
}

// vLLM: gpu-memory-utilization is read back from /metrics; max-num-seqs,
// which vLLM reports nowhere, is taken as deployed and the step says so.
func TestEngineSetVLLM(t *testing.T) {
	t.Parallel()
	r := newRig(t, lab.Options{TimeScale: 1000, Engine: "vllm"}, nil)
	ev := &events{}
	res, err := r.rb.EngineSet(testkit.Context(t, 60*time.Second), "qwen", "gpu-memory-utilization", "0.85", false, ev)
	if err != nil {
		t.Fatalf("engine set: %v\n%s", err, ev.text())
	}
	if res.Flag.Live == nil || *res.Flag.Live != "0.85" {
		t.Errorf("live %v, want 0.85 from vllm:cache_config_info", res.Flag.Live)
	}
	ev = &events{}
	res, err = r.rb.EngineSet(testkit.Context(t, 60*time.Second), "qwen", "max-num-seqs", "64", false, ev)
	if err != nil {
		t.Fatalf("engine set max-num-seqs: %v\n%s", err, ev.text())
	}
	if res.Flag.Live != nil || !strings.Contains(ev.text(), "verify flag skipped") {
		t.Errorf("max_num_seqs read back as %v:\n%s", res.Flag.Live, ev.text())
	}
	var ve *ops.VerifyError
	if errors.As(err, &ve) {
		t.Errorf("verify error %v", ve)
	}
}
