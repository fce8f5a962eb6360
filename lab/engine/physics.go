package engine

import (
	"math"
	"time"
)

// Physics is the speed model of speculative decoding.
//
// Acceptance follows the draft tree. Each verify step drafts a tree of Steps levels (TopK
// candidates at the first, TopK x TopK at each further one) and verifies DraftTokens of it
// (the root included: DraftTokens-1 draft nodes). A level holding w candidates contains the target's token
// with probability a(w) = 1 - (1-Accept)*w^-TopKGain (w = 1: Accept; wider: more, with
// diminishing returns). The step emits the tokens accepted along the tree before the first
// level that misses, plus one bonus token, so the accept length L is at most Steps+1 and at
// most DraftTokens. The verified nodes go to the levels where they add the most to L (a
// deeper level needs one node on each level above it). With TopK 1 every level holds one
// node and L(k) = (1 - a^(k+1)) / (1 - a), as before.
//
// Cost: a verify step over a batch of n running streams, each verifying D tokens, takes
//
//	t = T0 + C*Steps*TopK + BatchC*(n-1)*D + VerifyC*max(0, n*D - ComputeKnee)
//
// the draft model's Steps passes over TopK candidates (one pass for a KeepDraft step 0), each
// stream's own attention, and once the batch verifies more than ComputeKnee tokens per
// forward the target is compute-bound and every further token costs VerifyC. So deep speculation wins at concurrency 1 (t barely
// grows with D) and shallow or none at 64 (t grows with n*D).
type Physics struct {
	Accept      float64       // per-level acceptance a of a one-candidate level, in [0, 1)
	TopKGain    float64       // exponent of a level's miss probability in its width (0 = widening gains nothing)
	T0          time.Duration // fixed cost of one verify step (one decode step without speculation)
	C           time.Duration // cost of one draft pass per candidate (Steps*TopK per verify step)
	BatchC      time.Duration // cost per extra running stream per token verified
	VerifyC     time.Duration // cost per token verified beyond ComputeKnee in one forward
	ComputeKnee int           // tokens one forward verifies before the target is compute-bound (0 = never)
	PrefillTok  time.Duration // prefill cost per prompt token
	EOSMean     int           // mean output length of requests without ignore_eos (tokens)
	Seed        uint64        // of the acceptance and EOS draws
	// ColdSteps and ColdAccept are a stream's cold draft state: with SGLang's
	// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND, an adaptive step 0 skips the draft model's
	// extend, and a stream that decoded there drafts again from stubbed (zero) draft state:
	// its first verify after the upshift accepts no draft, then for ColdSteps verify steps each
	// level holds the target's token with ColdAccept times its usual probability, until the
	// draft cache written since covers the context it drafts from.
	ColdSteps  int
	ColdAccept float64
}

// DefaultPhysics reproduces the incident's MTP sweep on a Qwen3.5-122B-A10B over 4 GPUs: one
// stream runs at about 282 tok/s with steps 10 (topk 1, 11 draft tokens; the night measured
// 270-293), about 217 tok/s with steps 3, about 83 tok/s without speculation. Under load the
// best steps fall as SGLang's own default adaptive table expects (deep at batch 1, none by
// 64): about 10 at concurrency 1, 7 at 8, 3 at 16, 1 at 32 and 48, and none at 64, where
// the target is compute-bound (VerifyC) and no speculation (its 64 requests all running)
// beats steps 1 by about a fifth; speculation also caps the running requests at 48 unless
// --max-running-requests is raised.
func DefaultPhysics() Physics {
	return Physics{
		Accept:      0.92,
		TopKGain:    0.5,
		T0:          12 * time.Millisecond,
		C:           1460 * time.Microsecond,
		BatchC:      60 * time.Microsecond,
		VerifyC:     250 * time.Microsecond,
		ComputeKnee: 64,
		PrefillTok:  20 * time.Microsecond,
		EOSMean:     200,
		Seed:        0x5eed,
		ColdSteps:   16,
		ColdAccept:  0.5,
	}
}

// Shape is the speculative shape of one verify step: draft levels (Steps), candidates per
// level (TopK) and tokens verified per stream, root included (DraftTokens). The zero Shape
// (or Steps 0) is decoding without speculation: one token verified, one emitted. KeepDraft
// (with Steps 0) is SGLang's adaptive step 0: no drafting, but the draft model still extends
// its KV cache over the verified token, one draft pass (C) per step.
type Shape struct {
	Steps, TopK, DraftTokens int
	KeepDraft                bool
}

// Chain is the topk-1 shape of k steps (k+1 tokens verified), as SGLang forces it with topk 1
// and as vLLM's num_speculative_tokens k runs.
func Chain(k int) Shape {
	if k <= 0 {
		return Shape{}
	}
	return Shape{Steps: k, TopK: 1, DraftTokens: k + 1}
}

// norm fills unset values: topk 1, and draft tokens steps+1 with topk 1 (else topk x steps + 1).
func (s Shape) norm() Shape {
	if s.Steps <= 0 {
		return Shape{KeepDraft: s.KeepDraft}
	}
	s.TopK = max(s.TopK, 1)
	if s.DraftTokens <= 1 || s.TopK == 1 {
		s.DraftTokens = s.TopK*s.Steps + 1
	}
	return s
}

// Verified is the tokens one stream verifies per step: DraftTokens, 1 without speculation.
func (s Shape) Verified() int {
	s = s.norm()
	return max(s.DraftTokens, 1)
}

// Drafts is the draft tokens verified per stream and step (Verified - 1): the denominator
// of the acceptance rate, as SGLang's decode log computes it (accepted drafts over
// forward count x (num_draft_tokens - 1); sgl-project/sglang scheduler metrics at v0.5.x).
func (s Shape) Drafts() int { return s.Verified() - 1 }

// ColdLevels is levels as a cold draft state accepts them (ColdAccept times each).
func (p Physics) ColdLevels(levels []float64) []float64 {
	out := make([]float64, len(levels))
	for i, a := range levels {
		out[i] = a * p.ColdAccept
	}
	return out
}

// levelWidth is the probability a level of w candidates holds the target's token.
func (p Physics) levelWidth(w int) float64 {
	if w <= 0 {
		return 0
	}
	miss := (1 - p.Accept) * math.Pow(float64(w), -p.TopKGain)
	return 1 - miss
}

// Levels returns the per-level acceptance of shape s: levels[j] is the probability that
// level j+1 holds the target's token given the levels above did. Its length is the levels
// the verified nodes reach (at most Steps and DraftTokens-1).
func (p Physics) Levels(s Shape) []float64 {
	s = s.norm()
	if s.Steps == 0 {
		return nil
	}
	budget := min(s.DraftTokens-1, treeNodes(s))
	widths := make([]int, 0, s.Steps)
	probs := make([]float64, 0, s.Steps)
	lenOf := func(pr []float64) float64 {
		l, run := 1.0, 1.0
		for _, a := range pr {
			run *= a
			l += run
		}
		return l
	}
	// Greedy: each node goes where it raises L the most (a new level below the deepest, or
	// one more candidate on a level not yet TopK wide).
	for range budget {
		cur := lenOf(probs)
		best, bestGain := -1, -1.0
		if len(widths) < s.Steps {
			gain := lenOf(append(probs, p.levelWidth(1))) - cur
			best, bestGain = len(widths), gain
		}
		for j, w := range widths {
			if w >= levelCap(s.TopK, j) {
				continue
			}
			old := probs[j]
			probs[j] = p.levelWidth(w + 1)
			gain := lenOf(probs) - cur
			probs[j] = old
			if gain > bestGain {
				best, bestGain = j, gain
			}
		}
		if best < 0 {
			break
		}
		if best == len(widths) {
			widths = append(widths, 1)
			probs = append(probs, p.levelWidth(1))
		} else {
			widths[best]++
			probs[best] = p.levelWidth(widths[best])
		}
	}
	return probs
}

// levelCap is how many candidates level j (0-based) of the draft tree can offer: topk at the
// first, topk x topk at each further one (each of the topk beams expands topk, SGLang's EAGLE
// tree; the unit editor's limit on draft tokens, ops/unit planSGLang, is the same count).
func levelCap(topk, j int) int {
	if j == 0 {
		return topk
	}
	return topk * topk
}

// treeNodes is the draft nodes the tree of s offers: topk + (steps-1) x topk^2.
func treeNodes(s Shape) int {
	return s.TopK + (s.Steps-1)*s.TopK*s.TopK
}

// AcceptLen is the mean tokens emitted per verify step with shape s (bonus included): at
// least 1, at most min(Steps+1, DraftTokens).
func (p Physics) AcceptLen(s Shape) float64 {
	l, run := 1.0, 1.0
	for _, a := range p.Levels(s) {
		run *= a
		l += run
	}
	return l
}

// StepTime is the duration of one verify step of shape s over batch running streams.
func (p Physics) StepTime(s Shape, batch int) time.Duration {
	s = s.norm()
	batch = max(batch, 1)
	d := s.Verified()
	passes := s.Steps * s.TopK
	if s.Steps == 0 && s.KeepDraft {
		passes = 1
	}
	t := p.T0 + time.Duration(passes)*p.C + time.Duration((batch-1)*d)*p.BatchC
	if p.ComputeKnee > 0 {
		if over := batch*d - p.ComputeKnee; over > 0 {
			t += time.Duration(over) * p.VerifyC
		}
	}
	return t
}

// StreamTokS is one stream's mean decode speed (tok/s) with shape s and batch running
// streams.
func (p Physics) StreamTokS(s Shape, batch int) float64 {
	t := p.StepTime(s, batch).Seconds()
	if t <= 0 {
		return math.Inf(1)
	}
	return p.AcceptLen(s) / t
}

// TokS is the aggregate decode speed (tok/s) of concurrency streams with shape s when at
// most maxRunning of them run at once (0 = no cap): the rest queue.
func (p Physics) TokS(s Shape, concurrency, maxRunning int) float64 {
	n := max(concurrency, 1)
	if maxRunning > 0 {
		n = min(n, maxRunning)
	}
	return float64(n) * p.StreamTokS(s, n)
}

// settingsShape is the shape a checked start runs with (before any per-batch change).
func settingsShape(s Settings) Shape {
	if !s.Speculative() {
		return Shape{}
	}
	if s.Flavor == "vllm" {
		return Chain(s.Steps)
	}
	return Shape{Steps: s.Steps, TopK: s.TopK, DraftTokens: s.DraftTokens}.norm()
}

// rng is a small deterministic generator (splitmix64).
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// float is uniform in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// draws is one request's acceptance. Level j of a verify step that starts at output position
// pos holds the target's token when the position's draw u(pos+j) is below the level's
// acceptance; u is fixed by the request's seed and the position. Every step reads positions
// no earlier step read (a step ends at its first miss, whose position the bonus token takes,
// or past its last level), so the draws are independent and a step emits AcceptLen tokens on
// average. A greedy request (temperature 0) is seeded by its prompt, as a real engine's
// greedy output and so its drafts' acceptance follow the prompt: the same prompt accepts the
// same positions under every setting and in every run, and a benchmark's settings differ only
// by what the settings change. Any other request is seeded by its arrival.
type draws struct{ seed uint64 }

// at is u(pos), uniform in [0, 1): the pos-th value of splitmix64 from the seed.
func (d draws) at(pos int) float64 {
	r := rng(d.seed + uint64(pos)*0x9e3779b97f4a7c15)
	return r.float()
}

// emitted is one verify step's tokens from output position pos: 1 + the levels accepted
// before the first miss.
func (d draws) emitted(levels []float64, pos int) int {
	n := 1
	for j, a := range levels {
		if d.at(pos+j) >= a {
			break
		}
		n++
	}
	return n
}
