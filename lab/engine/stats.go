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
	draftSteps   int64 // stream steps that drafted
	drafted      int64 // draft tokens verified
	accepted     int64 // of them accepted
	tokens       int64
	promptTokens int64
	acceptedPos  []int64
}

func (w *window) reset(now time.Time) {
	w.start, w.streamSteps, w.tokens, w.promptTokens = now, 0, 0, 0
	w.draftSteps, w.drafted, w.accepted = 0, 0, 0
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
	// cumTokens and cumSteps are SGLang's cum_spec_accept_length and cum_spec_accept_count:
	// the windows closed by decode log lines since start or the last cache flush.
	cumTokens, cumSteps int64
	decodeIters         int // decode iterations since start or the last cache flush
	active              int // requests admitted and not finished (the scheduler's batch)
	done                []RequestTruth
	running             int
	queued              int
	lastVLLM            time.Time
	buf                 []int64
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
	return s.buf[:min(k, len(s.buf))]
}

// maxRequestTruths bounds the per-request truth the engine keeps (the most recent ones).
const maxRequestTruths = 100000

// record keeps a finished request's truth.
func (s *stats) record(r *request) {
	if len(s.done) >= maxRequestTruths {
		n := copy(s.done, s.done[len(s.done)-maxRequestTruths/2:])
		s.done = s.done[:n]
	}
	s.done = append(s.done, RequestTruth{ID: r.id, Received: r.received, Admitted: r.admitted, FirstToken: r.first,
		LastToken: r.last, PromptTokens: r.prompt, OutputTokens: r.generated, VerifySteps: r.steps})
}

func (s *stats) addPrompt(n int) {
	s.sgl.promptTokens += int64(n)
	s.vllm.promptTokens += int64(n)
}

// addStep counts one verify step whose streams each verified drafts draft tokens.
func (s *stats) addStep(st stepStats, drafts int) {
	t := &s.truth
	t.OutputTokens += int64(st.tokens)
	t.VerifySteps += int64(st.streams)
	t.BatchSteps++
	t.Requests += int64(st.finished)
	t.Aborted += int64(st.aborted)
	t.DraftsAccepted += int64(st.tokens - st.streams)
	var ds int64
	if drafts > 0 {
		ds = int64(st.streams)
	}
	t.DraftSteps += ds
	t.DraftsProposed += ds * int64(drafts)
	for _, w := range []*window{&s.sgl, &s.vllm} {
		w.streamSteps += int64(st.streams)
		w.draftSteps += ds
		w.drafted += ds * int64(drafts)
		w.accepted += int64(st.tokens - st.streams)
		w.tokens += int64(st.tokens)
		for i, a := range st.acceptedPos {
			w.acceptedPos[i] += a
		}
	}
	for i, a := range st.acceptedPos {
		s.acceptedPos[i] += a
	}
}
