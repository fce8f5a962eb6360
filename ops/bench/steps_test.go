package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Run samples the steps the engine says it runs while the measured requests
// run (SGLang's adaptive mode chooses them per batch), and reports each
// value with how often it was seen, most seen first; an engine that does
// not say leaves none.
func TestRunSamplesRunningSteps(t *testing.T) {
	t.Parallel()
	srv := (&fake{ChunkDelay: 10 * time.Millisecond}).start(t) // 20 chunks: about 200ms a request
	var asked atomic.Int64
	o := opts(srv.URL)
	o.Prompts, o.Concurrency = 4, 2
	o.RunningSteps = func(context.Context) (int, bool) {
		if asked.Add(1)%4 == 0 {
			return 3, true
		}
		return 1, true
	}
	res, err := run(t, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.EngineSteps) != 2 || res.EngineSteps[0].Steps != 1 || res.EngineSteps[1].Steps != 3 ||
		res.EngineSteps[0].Samples < res.EngineSteps[1].Samples {
		t.Fatalf("engine steps %+v (asked %d times), want 1 most seen, then 3", res.EngineSteps, asked.Load())
	}
	n := res.EngineSteps[0].Samples + res.EngineSteps[1].Samples
	if wall := time.Duration(res.DurationS * float64(time.Second)); n < 3 || int64(n) > int64(wall/StepsSampleEvery)+2 {
		t.Errorf("%d samples over %s: want one about every %s while the requests ran", n, wall, StepsSampleEvery)
	}
	o.RunningSteps = func(context.Context) (int, bool) { return 0, false }
	if res, err = run(t, o); err != nil || len(res.EngineSteps) != 0 {
		t.Errorf("an engine that does not say: steps %+v, %v", res.EngineSteps, err)
	}
}
