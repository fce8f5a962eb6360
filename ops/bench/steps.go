package bench

import (
	"context"
	"slices"
	"sync"
	"time"
)

// StepsSampleEvery is how often Run asks Options.RunningSteps which steps
// the engine runs: often enough for a few samples in the lab's shortest
// benchmark, rarely enough to cost a real engine nothing (SGLang's
// /server_info is one small answer).
const StepsSampleEvery = 50 * time.Millisecond

// sampleSteps calls running every StepsSampleEvery, from now until stop is
// called; stop returns each steps value seen with its count, most seen
// first (ties: fewer steps first), none when running never said.
func sampleSteps(ctx context.Context, running func(context.Context) (int, bool)) (stop func() []StepsSeen) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	seen := map[int]int{}
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(StepsSampleEvery)
		defer tick.Stop()
		for {
			if n, ok := running(ctx); ok && ctx.Err() == nil {
				mu.Lock()
				seen[n]++
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() []StepsSeen {
		cancel()
		wg.Wait()
		out := make([]StepsSeen, 0, len(seen))
		for n, c := range seen {
			out = append(out, StepsSeen{Steps: n, Samples: c})
		}
		slices.SortFunc(out, func(a, b StepsSeen) int {
			if a.Samples != b.Samples {
				return b.Samples - a.Samples
			}
			return a.Steps - b.Steps
		})
		return out
	}
}
