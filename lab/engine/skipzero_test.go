package engine

import (
	"testing"
)

// With SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND set in the unit's environment, an
// adaptive step 0 drafts nothing and pays no draft pass (a step costs what decoding without
// speculation costs); a stream that decoded there drafts again from a stale draft state: its
// first verify above 0 accepts no draft, the next ColdSteps accept less, then as usual.
// Without the switch (or with a value EnvBool reads as false) step 0 keeps the draft pass.
func TestSkipZeroDraftExtend(t *testing.T) {
	p := DefaultPhysics()
	run := func(env ...string) specRun {
		s, err := ParseArgv(sglangArgv("--model-path /m --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 " +
			"--speculative-num-draft-tokens 4 --speculative-adaptive --max-running-requests 64"))
		if err != nil {
			t.Fatal(err)
		}
		s.ApplyEnv(env)
		s, _, err = Check(s)
		if err != nil {
			t.Fatal(err)
		}
		return newSpecRun(s, p)
	}
	for _, env := range [][]string{nil, {EnvSkipZeroDraftExtend + "=0"}, {EnvSkipZeroDraftExtend + "=1", EnvSkipZeroDraftExtend + "=no"}} {
		r := run(env...)
		if pl := r.plan(64); pl.shape.Steps != 0 || p.StepTime(pl.shape, 64) != p.StepTime(Shape{}, 64)+p.C {
			t.Fatalf("env %q: step 0 at 64 runs %+v, want steps 0 with one draft pass", env, pl.shape)
		}
	}
	r := run("PYTHONUNBUFFERED=1", EnvSkipZeroDraftExtend+"=True")
	zero := r.plan(64)
	if zero.shape.Steps != 0 || p.StepTime(zero.shape, 64) != p.StepTime(Shape{}, 64) {
		t.Fatalf("skip: step 0 at 64 runs %+v (%v), want no draft pass (%v)", zero.shape, p.StepTime(zero.shape, 64), p.StepTime(Shape{}, 64))
	}
	req := &request{}
	fresh := &request{}
	zero.levelsFor(req, p.ColdSteps)
	one := r.plan(1)
	if one.shape.Steps == 0 {
		t.Fatalf("one stream runs steps 0, want slot 1's steps")
	}
	if got := one.levelsFor(fresh, p.ColdSteps); len(got) == 0 || got[0] != one.levels[0] {
		t.Fatalf("a stream that never ran step 0 drafts with %v, want the warm %v", got, one.levels)
	}
	if got := one.levelsFor(req, p.ColdSteps); len(got) != 0 {
		t.Fatalf("first verify after the upshift: levels %v, want none accepted (stubbed draft state)", got)
	}
	for i := range p.ColdSteps {
		if got := one.levelsFor(req, p.ColdSteps); len(got) == 0 || got[0] != one.levels[0]*p.ColdAccept {
			t.Fatalf("cold step %d: level 1 accepts %v, want %v", i, got, one.levels[0]*p.ColdAccept)
		}
	}
	if got := one.levelsFor(req, p.ColdSteps); got[0] != one.levels[0] {
		t.Fatalf("after %d cold steps: level 1 accepts %v, want the warm %v", p.ColdSteps, got[0], one.levels[0])
	}
}
