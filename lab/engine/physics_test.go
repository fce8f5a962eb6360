package engine

import (
	"math"
	"slices"
	"testing"
)

func TestDefaultPhysicsReproducesIncident(t *testing.T) {
	t.Parallel()
	p := DefaultPhysics()
	s10 := p.StreamTokS(Chain(10), 1)
	if s10 < 270 || s10 > 295 {
		t.Fatalf("steps 10, 1 stream: %.1f tok/s, want 270-295 (the incident)", s10)
	}
	s3 := p.StreamTokS(Chain(3), 1)
	if s3 > s10 || s3 < 210 || s3 > 225 {
		t.Fatalf("steps 3: %.1f tok/s, want about 217, below steps 10 (%.1f)", s3, s10)
	}
	if off := p.StreamTokS(Shape{}, 1); math.Abs(off-83.3) > 1 {
		t.Fatalf("no speculation %.1f tok/s, want about 83", off)
	}
	prevAgg, prevStream := 0.0, math.Inf(1)
	for _, n := range []int{1, 2, 8, 24, 48} {
		per := p.StreamTokS(Chain(10), n)
		if agg := per * float64(n); agg <= prevAgg || per >= prevStream && n > 1 {
			t.Fatalf("batch %d: per stream %.1f (prev %.1f), aggregate %.1f (prev %.1f): want per-stream falling, aggregate rising",
				n, per, prevStream, agg, prevAgg)
		} else {
			prevAgg, prevStream = agg, per
		}
	}
}

func TestAcceptLenChain(t *testing.T) {
	t.Parallel()
	p := Physics{Accept: 0.5, TopKGain: 0.5}
	for k, want := range map[int]float64{0: 1, 1: 1.5, 2: 1.75, 3: 1.875} {
		if got := p.AcceptLen(Chain(k)); math.Abs(got-want) > 1e-12 {
			t.Fatalf("L(%d) = %v, want %v", k, got, want)
		}
	}
	if got := (Physics{Accept: 1}).AcceptLen(Chain(4)); got != 5 {
		t.Fatalf("a=1: L(4) = %v, want 5", got)
	}
}

// The figure of issue 24 §1: over the grid a sweep can ask for, the accept length is never
// above steps+1 nor above the draft tokens verified, the acceptance rate (accepted drafts over
// draft tokens verified) never above 100%, and L rises with steps and with topk (a full tree)
// with diminishing returns.
func TestAcceptLenFollowsTheDraftTree(t *testing.T) {
	t.Parallel()
	p := DefaultPhysics()
	for steps := 1; steps <= 10; steps++ {
		for topk := 1; topk <= 8; topk++ {
			for d := 2; d <= treeNodes(Shape{Steps: steps, TopK: topk})+1; d++ {
				sh := Shape{Steps: steps, TopK: topk, DraftTokens: d}
				l := p.AcceptLen(sh)
				if l < 1 || l > float64(steps+1)+1e-9 || l > float64(sh.Verified())+1e-9 {
					t.Fatalf("%+v: L = %.3f, want 1 <= L <= min(steps+1, draft tokens %d)", sh, l, sh.Verified())
				}
				if r := (l - 1) / float64(sh.Drafts()); r > 1+1e-9 {
					t.Fatalf("%+v: acceptance %.1f%% > 100%%", sh, 100*r)
				}
				if d > 2 {
					if prev := p.AcceptLen(Shape{Steps: steps, TopK: topk, DraftTokens: d - 1}); l < prev-1e-9 {
						t.Fatalf("%+v: L %.3f below %.3f with one draft token fewer", sh, l, prev)
					}
				}
			}
		}
	}
	full := func(steps, topk int) float64 {
		return p.AcceptLen(Shape{Steps: steps, TopK: topk, DraftTokens: topk*steps + 1})
	}
	for topk := 1; topk <= 8; topk++ {
		prevGain := math.Inf(1)
		for steps := 2; steps <= 12; steps++ {
			gain := full(steps, topk) - full(steps-1, topk)
			if gain <= 0 || gain > prevGain+1e-9 {
				t.Fatalf("topk %d: steps %d adds %.4f to L (previous step added %.4f): want rising, diminishing", topk, steps, gain, prevGain)
			}
			prevGain = gain
		}
	}
	for steps := 1; steps <= 10; steps++ {
		prevGain := math.Inf(1)
		for _, topk := range []int{2, 4, 8, 16} {
			gain := full(steps, topk) - full(steps, topk/2)
			if gain <= 0 || gain > prevGain+1e-9 {
				t.Fatalf("steps %d: topk %d adds %.4f to L over topk %d (previous doubling %.4f): want rising, diminishing",
					steps, topk, gain, topk/2, prevGain)
			}
			prevGain = gain
		}
	}
}

// bestChain is the steps (0 = none, topk 1) with the highest aggregate tok/s at concurrency c,
// speculation capping the running requests at 48 as SGLang does.
func bestChain(p Physics, c int) (best int, tokS float64) {
	for k := 0; k <= 16; k++ {
		capped := 0
		if k > 0 {
			capped = specMaxRunning
		}
		if v := p.TokS(Chain(k), c, capped); v > tokS {
			best, tokS = k, v
		}
	}
	return best, tokS
}

// The figure of issue 24 §1: deep speculation wins at concurrency 1, shallow or none at 64.
func TestBestStepsFallWithLoad(t *testing.T) {
	t.Parallel()
	p := DefaultPhysics()
	prev := math.MaxInt
	for _, c := range []int{1, 8, 32, 64} {
		k, v := bestChain(p, c)
		t.Logf("concurrency %d: best steps %d, %.0f tok/s", c, k, v)
		if k > prev {
			t.Errorf("concurrency %d: best steps %d above %d at lower concurrency", c, k, prev)
		}
		prev = k
		switch c {
		case 1:
			if k < 7 {
				t.Errorf("concurrency 1: best steps %d, want deep (7 or more)", k)
			}
		case 64:
			if k > 1 {
				t.Errorf("concurrency 64: best steps %d, want shallow or none (1 or less)", k)
			}
		}
	}
}

// A stream's steps read fresh positions, so the mean tokens per step is AcceptLen, and a
// greedy request's draws follow its prompt alone: the same prompt accepts the same positions
// in every run, another prompt others.
func TestDrawsMatchAcceptLen(t *testing.T) {
	t.Parallel()
	p := DefaultPhysics()
	for _, sh := range []Shape{Chain(10), {Steps: 4, TopK: 4, DraftTokens: 9}} {
		lv := p.Levels(sh)
		d := draws{seed: 42}
		const n = 200000
		sum, lo, hi, pos := 0, 99, 0, 0
		for range n {
			e := d.emitted(lv, pos)
			pos += e
			sum += e
			lo, hi = min(lo, e), max(hi, e)
		}
		mean := float64(sum) / n
		if want := p.AcceptLen(sh); math.Abs(mean-want) > 0.05 {
			t.Fatalf("%+v: mean emitted %.3f, want L = %.3f", sh, mean, want)
		}
		if lo != 1 || hi != len(lv)+1 {
			t.Fatalf("%+v: emitted range [%d, %d], want [1, %d]", sh, lo, hi, len(lv)+1)
		}
	}
	stream := func(d draws, k int) []int {
		lv := p.Levels(Chain(k))
		var out []int
		for pos := 0; pos < 400; {
			e := d.emitted(lv, pos)
			out = append(out, e)
			pos += e
		}
		return out
	}
	a, b := greedyDraws(p.Seed, []byte(`"the same prompt"`)), greedyDraws(p.Seed, []byte(` "the same prompt"`))
	if !slices.Equal(stream(a, 7), stream(b, 7)) {
		t.Fatal("one prompt accepted different positions in two runs")
	}
	if slices.Equal(stream(a, 7), stream(greedyDraws(p.Seed, []byte(`"another prompt"`)), 7)) {
		t.Fatal("two prompts accepted the same positions")
	}
}

// The default physics agrees with SGLang's default adaptive table (deep at batch 1, none by
// 64): at concurrency 64 no speculation (all 64 running) beats every steps value, capped at
// 48 running or raised to 64, and so does the adaptive step 0 (its draft still extending) at
// 64 running; at 32 steps 1 is best; deeper speculation wins below.
func TestDefaultPhysicsFollowsSGLangsDefaultTable(t *testing.T) {
	t.Parallel()
	p := DefaultPhysics()
	best := func(c int) (int, float64) {
		k, v := 0, p.TokS(Shape{}, c, 0)
		for s := 1; s <= 16; s++ {
			if x := p.TokS(Chain(s), c, 48); x > v {
				k, v = s, x
			}
		}
		return k, v
	}
	off, zero := p.TokS(Shape{}, 64, 0), p.TokS(Shape{KeepDraft: true}, 64, 0)
	for s := 1; s <= 16; s++ {
		if on := max(p.TokS(Chain(s), 64, 48), p.TokS(Chain(s), 64, 0)); on >= zero || zero >= off {
			t.Fatalf("concurrency 64: steps %d %.0f tok/s, adaptive step 0 %.0f, no speculation %.0f: want off > step 0 > steps %d", s, on, zero, off, s)
		}
	}
	for c, want := range map[int][2]int{1: {9, 12}, 8: {5, 8}, 32: {1, 1}, 64: {0, 0}} {
		if k, _ := best(c); k < want[0] || k > want[1] {
			t.Errorf("concurrency %d: best steps %d, want %d..%d", c, k, want[0], want[1])
		}
	}
	if d := p.StepTime(Shape{KeepDraft: true}, 8) - p.StepTime(Shape{}, 8); d != p.C {
		t.Errorf("adaptive step 0 costs %v more than no speculation, want one draft pass %v", d, p.C)
	}
}
