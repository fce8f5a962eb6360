package lab

// SlowSteps makes every engine started from now on with speculative steps
// (--speculative-num-steps, vLLM's num_speculative_tokens) equal to steps
// decode factor times slower than the default physics, as SlowEngine does
// for all of them: a setting that regresses, for a canary to fail on.
// factor <= 1 takes it off. Engines already serving keep their speed.
func (l *Lab) SlowSteps(steps int, factor float64) {
	l.w.lock()
	defer l.w.unlock()
	if l.w.slowSteps == nil {
		l.w.slowSteps = map[int]float64{}
	}
	if factor <= 1 {
		delete(l.w.slowSteps, steps)
		return
	}
	l.w.slowSteps[steps] = factor
}

// slowFor is the slowdown of an engine started now with settings s (w
// locked): SlowEngine's, or SlowSteps' for its steps when larger.
func (w *world) slowFor(s engSettings) float64 {
	return max(w.slowdown, w.slowSteps[s.s.Steps])
}
