package engine

import (
	"fmt"
	"strings"
	"time"
)

// kvTokens is the KV cache size the token usage figures refer to.
const kvTokens = 1423360

// rankStamp is SGLang's scheduler log prefix: "[2026-07-21 15:00:13 TP0 EP0]".
func rankStamp(now time.Time) string {
	return "[" + now.Format(time.DateTime) + " TP0 EP0]"
}

func (e *Engine) emit(line string) {
	if e.log != nil {
		e.log(line)
	}
}

// logPrefill writes SGLang's prefill batch line.
func (e *Engine) logPrefill(newSeqs, newTokens, running, queued int) {
	if e.s.Flavor != "sglang" {
		return
	}
	e.emit(fmt.Sprintf("%s Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, token usage: %.2f, #running-req: %d, #queue-req: %d",
		rankStamp(time.Now()), newSeqs, newTokens, float64(newTokens)/kvTokens, running, queued))
}

// logDecode closes the SGLang log window (Engine.mu held): it sets the gauges, adds the
// window to the cumulative acceptance /server_info reports, and returns the decode line.
// Like SGLang, the cumulative figures move only here, at decode log lines.
func (e *Engine) logDecode(now time.Time, running, queued, tokens int) string {
	w := &e.st.sgl
	secs := now.Sub(w.start).Seconds()
	g := gauges{running: running, queued: queued, tokenUsage: float64(tokens) / kvTokens}
	if secs > 0 {
		g.genTput = float64(w.tokens) / secs
	}
	if w.streamSteps > 0 {
		g.acceptLen = float64(w.tokens) / float64(w.streamSteps)
	}
	if w.drafted > 0 {
		// SGLang's accept rate: accepted drafts over draft tokens verified, i.e.
		// (accept len - 1) / (num_draft_tokens - 1) for a static shape.
		g.acceptRate = float64(w.accepted) / float64(w.drafted)
	}
	e.st.g = g
	e.st.cumTokens += w.tokens
	e.st.cumSteps += w.streamSteps
	w.reset(now)
	spec := ""
	if e.s.Speculative() {
		spec = fmt.Sprintf("accept len: %.2f, accept rate: %.2f, ", g.acceptLen, g.acceptRate)
	}
	return fmt.Sprintf("%s Decode batch, #running-req: %d, #token: %d, token usage: %.2f, %scuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d",
		rankStamp(now), running, tokens, g.tokenUsage, spec, pyBool(e.spec.graphs(running)), g.genTput, queued)
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// flushStats records the live running/queued counts and writes vLLM's periodic stats lines
// when the interval has passed (or the engine just went idle) with activity in the window.
func (e *Engine) flushStats(running, queued int, idle bool) {
	now := time.Now()
	e.mu.Lock()
	e.st.running, e.st.queued = running, queued
	w := &e.st.vllm
	if e.s.Flavor != "vllm" || (w.streamSteps == 0 && w.promptTokens == 0) ||
		(!idle && now.Sub(e.st.lastVLLM) < e.statsIv) {
		e.mu.Unlock()
		return
	}
	secs := max(now.Sub(w.start).Seconds(), 1e-9)
	var lines []string
	kv := 100 * float64(tokensGuess(w)) / kvTokens
	lines = append(lines, fmt.Sprintf("%s Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: 0.0%%",
		vllmStamp("INFO", "loggers.py:127"), float64(w.promptTokens)/secs, float64(w.tokens)/secs, running, queued, kv))
	if e.s.Speculative() && w.draftSteps > 0 && w.drafted > 0 {
		accepted, drafted := w.accepted, w.drafted
		pos := make([]string, len(w.acceptedPos))
		for i, a := range w.acceptedPos {
			pos[i] = fmt.Sprintf("%.3f", float64(a)/float64(w.draftSteps))
		}
		lines = append(lines, fmt.Sprintf("%s SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%",
			vllmStamp("INFO", "metrics.py:96"), 1+float64(accepted)/float64(w.draftSteps), float64(accepted)/secs, float64(drafted)/secs,
			accepted, drafted, strings.Join(pos, ", "), 100*float64(accepted)/float64(drafted)))
	}
	w.reset(now)
	e.st.lastVLLM = now
	e.mu.Unlock()
	for _, l := range lines {
		e.emit(l)
	}
}

func tokensGuess(w *window) int64 { return w.promptTokens + w.tokens }
