package engine

import (
	"math"
	"testing"
)

func TestDefaultPhysicsReproducesIncident(t *testing.T) {
	p := DefaultPhysics()
	s10 := p.StreamTokS(10, 10, 1)
	if s10 < 270 || s10 > 295 {
		t.Fatalf("steps 10, 1 stream: %.1f tok/s, want 270-295 (the incident)", s10)
	}
	s3 := p.StreamTokS(3, 3, 1)
	if s3 > s10 || s3 < 150 {
		t.Fatalf("steps 3: %.1f tok/s, want below steps 10 (%.1f) and plausible", s3, s10)
	}
	if off := p.StreamTokS(0, 0, 1); off >= s3 {
		t.Fatalf("no speculation %.1f tok/s, want below steps 3 %.1f", off, s3)
	}
	prevAgg, prevStream := 0.0, math.Inf(1)
	for _, n := range []int{1, 2, 8, 24, 48} {
		per := p.StreamTokS(10, 10, n)
		if agg := per * float64(n); agg <= prevAgg || per >= prevStream && n > 1 {
			t.Fatalf("batch %d: per stream %.1f (prev %.1f), aggregate %.1f (prev %.1f): want per-stream falling, aggregate rising",
				n, per, prevStream, agg, prevAgg)
		} else {
			prevAgg, prevStream = agg, per
		}
	}
}

func TestAcceptLen(t *testing.T) {
	p := Physics{Accept: 0.5}
	for k, want := range map[int]float64{0: 1, 1: 1.5, 2: 1.75, 3: 1.875} {
		if got := p.AcceptLen(k); math.Abs(got-want) > 1e-12 {
			t.Fatalf("L(%d) = %v, want %v", k, got, want)
		}
	}
	if got := (Physics{Accept: 1}).AcceptLen(4); got != 5 {
		t.Fatalf("a=1: L(4) = %v, want 5", got)
	}
}

func TestDrawsMatchAcceptLen(t *testing.T) {
	p := DefaultPhysics()
	r := rng(42)
	const n = 200000
	sum, lo, hi := 0, 99, 0
	for range n {
		e := r.emitted(10, p.Accept)
		sum += e
		lo, hi = min(lo, e), max(hi, e)
	}
	mean := float64(sum) / n
	if want := p.AcceptLen(10); math.Abs(mean-want) > 0.05 {
		t.Fatalf("mean emitted %.3f, want L(10) = %.3f", mean, want)
	}
	if lo != 1 || hi != 11 {
		t.Fatalf("emitted range [%d, %d], want [1, 11]", lo, hi)
	}
}
