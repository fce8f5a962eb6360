package engine

import (
	"math"
	"time"
)

// Physics is the speed model of speculative decoding. Each verify step proposes k draft
// tokens per stream; each is accepted with probability Accept until the first rejection, and
// the step emits the accepted drafts plus one bonus token, so the mean accept length is
// L(k) = (1 - a^(k+1)) / (1 - a). A step over a batch of n running streams takes
// t(k, n) = T0 + C*k + BatchC*(n-1)*(k+1): per-stream speed L/t falls with n while aggregate
// speed n*L/t rises towards L/(BatchC*(k+1)).
type Physics struct {
	Accept     float64       // per-draft-token acceptance a, in [0, 1)
	T0         time.Duration // fixed cost of one verify step (one decode step without speculation)
	C          time.Duration // cost per draft token verified
	BatchC     time.Duration // cost per extra running stream per token position verified
	PrefillTok time.Duration // prefill cost per prompt token
	EOSMean    int           // mean output length of requests without ignore_eos (tokens)
	Seed       uint64        // of the acceptance and EOS draws
}

// DefaultPhysics reproduces the incident's MTP sweep on a Qwen3.5-122B-A10B over 4 GPUs: one
// stream runs at about 282 tok/s with steps 10 (topk 1, 11 draft tokens; the night measured
// 270-293), about 217 tok/s with steps 3, about 83 tok/s without speculation.
func DefaultPhysics() Physics {
	return Physics{
		Accept:     0.92,
		T0:         12 * time.Millisecond,
		C:          1460 * time.Microsecond,
		BatchC:     60 * time.Microsecond,
		PrefillTok: 20 * time.Microsecond,
		EOSMean:    200,
		Seed:       0x5eed,
	}
}

// AcceptLen is the mean tokens emitted per verify step with k drafts: L(k).
func (p Physics) AcceptLen(k int) float64 {
	if k <= 0 {
		return 1
	}
	a := p.Accept
	if a >= 1 {
		return float64(k + 1)
	}
	return (1 - math.Pow(a, float64(k+1))) / (1 - a)
}

// StepTime is the duration of one verify step: cost k draft tokens verified per stream,
// batch running streams.
func (p Physics) StepTime(cost, batch int) time.Duration {
	cost = max(cost, 0)
	batch = max(batch, 1)
	return p.T0 + time.Duration(cost)*p.C + time.Duration((batch-1)*(cost+1))*p.BatchC
}

// StreamTokS is one stream's mean decode speed (tok/s) with chain length k, verify cost and
// batch streams.
func (p Physics) StreamTokS(k, cost, batch int) float64 {
	t := p.StepTime(cost, batch).Seconds()
	if t <= 0 {
		return math.Inf(1)
	}
	return p.AcceptLen(k) / t
}

// spec is what the scheduler needs of the settings: chain length k (drafts per step) and
// verify cost (draft tokens verified beyond the root).
func specShape(s Settings) (k, cost int) {
	if !s.Speculative() {
		return 0, 0
	}
	k = max(s.Steps, 0)
	cost = k
	if s.DraftTokens > 1 {
		cost = s.DraftTokens - 1
	}
	return k, cost
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

// emitted draws one verify step's tokens: 1 + drafts accepted before the first rejection.
func (r *rng) emitted(k int, a float64) int {
	n := 1
	for n <= k && r.float() < a {
		n++
	}
	return n
}
