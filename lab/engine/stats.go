package engine

import (
	"time"
)

// stepStats is what one verify step did.
type stepStats struct {
	streams, tokens, finished, aborted int
	acceptedPos                        []int64 // drafts accepted at each position
}

// window accumulates verify steps between two log lines.
type window struct {
	start        time.Time
	streamSteps  int64
	tokens       int64
	promptTokens int64
	acceptedPos  []int64
}

func (w *window) reset(now time.Time) {
	w.start, w.streamSteps, w.tokens, w.promptTokens = now, 0, 0, 0
	clear(w.acceptedPos)
}

// gauges are SGLang's Prometheus gauges: values of the last decode log window.
type gauges struct {
	acceptLen, acceptRate, genTput, tokenUsage float64
	running, queued                            int
}

// stats are the engine's counters (guarded by Engine.mu).
type stats struct {
	truth       Truth
	acceptedPos []int64 // cumulative drafts accepted per position (vLLM per-pos counter)
	sgl, vllm   window
	g           gauges
	logged      bool // a decode log line was written (avg_spec_accept_length exists)
	running     int
	queued      int
	lastVLLM    time.Time
	buf         []int64
}

func (s *stats) init(k int, now time.Time) {
	s.acceptedPos = make([]int64, k)
	s.sgl.acceptedPos = make([]int64, k)
	s.vllm.acceptedPos = make([]int64, k)
	s.sgl.start, s.vllm.start, s.lastVLLM = now, now, now
	s.buf = make([]int64, k)
}

// scratch returns a zeroed per-position buffer for one step. Only the scheduler uses it.
func (s *stats) scratch(k int) []int64 {
	clear(s.buf)
	return s.buf[:k]
}

func (s *stats) addPrompt(n int) {
	s.sgl.promptTokens += int64(n)
	s.vllm.promptTokens += int64(n)
}

func (s *stats) addStep(st stepStats, k int) {
	t := &s.truth
	t.OutputTokens += int64(st.tokens)
	t.VerifySteps += int64(st.streams)
	t.BatchSteps++
	t.Requests += int64(st.finished)
	t.Aborted += int64(st.aborted)
	t.DraftsProposed += int64(st.streams * k)
	t.DraftsAccepted += int64(st.tokens - st.streams)
	for _, w := range []*window{&s.sgl, &s.vllm} {
		w.streamSteps += int64(st.streams)
		w.tokens += int64(st.tokens)
		for i, a := range st.acceptedPos {
			w.acceptedPos[i] += a
		}
	}
	for i, a := range st.acceptedPos {
		s.acceptedPos[i] += a
	}
}
