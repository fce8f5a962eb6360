package ops

import (
	"context"
	"testing"

	labengine "github.com/opsbot/opsbot/lab/engine"
)

// physicsTokS is the lab's speed model at steps n and concurrency c, as a
// unit of single steps runs it: speculation capped at SGLang's 48 running
// requests, no speculation not.
func physicsTokS(n, c int) float64 {
	p := labengine.DefaultPhysics()
	if n == 0 {
		return p.TokS(labengine.Shape{}, c, 0)
	}
	return p.TokS(labengine.Chain(n), c, sglangSpecCap)
}

// On the lab's physics, with the running steps 3 and no speculation measured
// first as a tune does, the search finds each load's best within 2.5% (what
// the proposal is held to: 3%), restarting for 10 values at most of 1..12.
func TestPerLoadSearchOnThePhysics(t *testing.T) {
	t.Parallel()
	at := []int{1, 4, 8, 16, 32, 48, 64}
	res := &Result{Incidents: []string{}}
	s := &perLoadSearch{r: &Runbook{}, at: at, res: res, rep: Discard, memo: map[int][]float64{},
		deploy: func(_ context.Context, n int) ([]SweepPoint, int, error) {
			var pts []SweepPoint
			for _, c := range at {
				pts = append(pts, SweepPoint{Steps: n, Concurrency: c, OK: true, OutputTokS: physicsTokS(n, c)})
			}
			return pts, 1, nil
		}}
	ctx := context.Background()
	for _, n := range []int{3, 0} {
		if _, err := s.measure(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.run(ctx, 1, 12); err != nil {
		t.Fatal(err)
	}
	pl := perLoadRows(at, s.memo)
	if pl == nil {
		t.Fatal("no rows")
	}
	for _, r := range pl.Rows {
		best := 0.0
		for n := 0; n <= 12; n++ {
			best = max(best, physicsTokS(n, r.Concurrency))
		}
		if got := physicsTokS(r.Steps, r.Concurrency); got < best*0.975 {
			t.Errorf("concurrency %d: steps %d runs %.0f tok/s, the best %.0f (tried %v)", r.Concurrency, r.Steps, got, best, res.Tried)
		}
	}
	// 3 and 0 first, then at most 10 more (each a restart).
	if n := len(res.Tried) - 2; n > 10 {
		t.Errorf("%d values restarted for (%v): want 10 at most", n, res.Tried)
	}
}

// The golden-section search at the lowest load stops once no value left in
// its range may beat the best measured by more than the noise: on a flat
// top (within 1% over 7..12, as one stream measures) it measures 3 values
// where the full search measures 5.
func TestPerLoadGoldenStopsOnAFlatTop(t *testing.T) {
	t.Parallel()
	tok := map[int]float64{1: 140, 2: 180, 3: 210, 4: 235, 5: 252, 6: 262, 7: 270, 8: 271, 9: 272, 10: 272, 11: 271, 12: 270}
	s := &perLoadSearch{memo: map[int][]float64{}}
	f := func(n int) (float64, error) {
		s.memo[n] = []float64{tok[n]}
		return tok[n], nil
	}
	if _, _, err := goldenMaxWorth(1, 12, f, func(n int) bool { return s.worth(0, n) }); err != nil {
		t.Fatal(err)
	}
	if len(s.memo) > 3 {
		t.Errorf("measured %d values on a flat top: %v", len(s.memo), s.memo)
	}
	best := 0.0
	for _, v := range s.memo {
		best = max(best, v[0])
	}
	if best < 272*0.98 {
		t.Errorf("the best measured %.0f, the top 272", best)
	}
	full := map[int]bool{}
	if _, _, err := goldenMax(1, 12, func(n int) (float64, error) { full[n] = true; return tok[n], nil }, nil); err != nil || len(full) < 5 {
		t.Errorf("the full search measured %v", full)
	}
}

// worth bounds an unmeasured value by the lines through the two measured
// values nearest it on each side (either side bounds it); with neither it
// is always worth a restart. No speculation bounds nothing.
func TestPerLoadWorth(t *testing.T) {
	t.Parallel()
	s := &perLoadSearch{memo: map[int][]float64{0: {100}, 2: {200}, 4: {240}, 8: {250}, 9: {245}}}
	for _, tc := range []struct {
		n    int
		want bool
	}{
		{1, false},  // right: 200 - (240-200)/2 = 180 (0 bounds nothing)
		{3, false},  // right: 240 - (250-240)/4 = 237.5; below 250 x 1.02
		{6, true},   // left: 240 + 20 = 280; right: 250 + 10 = 260: above 255
		{7, false},  // left: 270; right: 255: not above 255
		{10, false}, // left (8, 9): 240
		{11, false},
		{4, false}, // measured
	} {
		if got := s.worth(0, tc.n); got != tc.want {
			t.Errorf("worth(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if !(&perLoadSearch{memo: map[int][]float64{5: {100}}}).worth(0, 12) {
		t.Error("one value measured: nothing bounds 12")
	}
}
