package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
)

// Acceptance measures speculative acceptance over the benchmark window: Run
// calls Begin right before the first measured request and End right after
// the last one. One window at a time: an Acceptance is not for concurrent
// benchmarks.
type Acceptance interface {
	Begin(ctx context.Context) error
	End(ctx context.Context) (AcceptStats, error)
}

// AcceptStats is acceptance over a window. AcceptLen is tokens per verify step
// (bonus included); EngineRate is the engine's own rate when it gives one;
// K is drafts per step when the measure knows it (vLLM), else 0; Lifetime is
// server_info's lifetime average when read (a cross-check).
type AcceptStats struct {
	AcceptLen, EngineRate float64
	Source                string
	K                     float64
	Lifetime              float64
}

// vLLM counter names (DOMAIN.md section 2).
const (
	vllmDrafts      = "vllm:spec_decode_num_drafts_total"
	vllmDraftTokens = "vllm:spec_decode_num_draft_tokens_total"
	vllmAccepted    = "vllm:spec_decode_num_accepted_tokens_total"
)

type vllmAcceptance struct {
	c                             *engine.Client
	drafts, draftTokens, accepted float64
	begun                         bool
}

// VLLMAcceptance measures from /metrics counter deltas, as vllm bench serve
// does: L = 1 + d(accepted)/d(drafts); EngineRate = d(accepted)/d(draft
// tokens); K = d(draft tokens)/d(drafts).
func VLLMAcceptance(c *engine.Client) Acceptance { return &vllmAcceptance{c: c} }

func (v *vllmAcceptance) read(ctx context.Context) (d, t, a float64, err error) {
	m, err := v.c.Metrics(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	d, ok1 := m.Value(vllmDrafts)
	t, ok2 := m.Value(vllmDraftTokens)
	a, ok3 := m.Value(vllmAccepted)
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, fmt.Errorf("%s/metrics has no %s counters: is speculative decoding on?", v.c.BaseURL, "vllm:spec_decode_*")
	}
	return d, t, a, nil
}

func (v *vllmAcceptance) Begin(ctx context.Context) error {
	d, t, a, err := v.read(ctx)
	if err != nil {
		return fmt.Errorf("vLLM acceptance at the start: %w", err)
	}
	v.drafts, v.draftTokens, v.accepted, v.begun = d, t, a, true
	return nil
}

func (v *vllmAcceptance) End(ctx context.Context) (AcceptStats, error) {
	if !v.begun {
		return AcceptStats{}, errors.New("vLLM acceptance: End without a successful Begin")
	}
	d, t, a, err := v.read(ctx)
	if err != nil {
		return AcceptStats{}, fmt.Errorf("vLLM acceptance at the end: %w", err)
	}
	dd, dt, da := d-v.drafts, t-v.draftTokens, a-v.accepted
	if dd <= 0 || dt <= 0 || da < 0 {
		return AcceptStats{}, fmt.Errorf("vLLM acceptance: counters moved by %v drafts, %v draft tokens, %v accepted during the run: nothing to measure (engine restarted?)", dd, dt, da)
	}
	return AcceptStats{AcceptLen: 1 + da/dd, EngineRate: da / dt, K: dt / dd, Source: "vllm /metrics counter deltas"}, nil
}

type sglangAcceptance struct {
	c     *engine.Client
	logs  func(ctx context.Context, since time.Time) ([]string, error)
	begin time.Time
	// gauge0 is sglang:spec_accept_length at Begin (ok0 when present): a gauge
	// that has not changed by End was not updated in the window and describes
	// an earlier one.
	gauge0 float64
	ok0    bool
}

// SGLangAcceptance measures from the decode log lines the engine wrote during
// the window (logs returns lines since a time; nil = no logs): AcceptLen is
// the mean of the lines' accept len weighted by #running-req, since a line
// covers decode-log-interval iterations of that many requests, each one
// verify step per iteration; this is tokens over verify steps. A line counts
// when its timestamp (in the local zone: host and bot must share it) is in
// the window's seconds, or when it has none. EngineRate is the likewise
// weighted printed accept rate. Without such lines it falls back to the
// sglang:spec_accept_length gauge (last log window only; not when it still
// holds the value it had at Begin: then that window was before the run), then to
// /server_info's lifetime average (warm-up included); Source says which.
func SGLangAcceptance(c *engine.Client, logs func(ctx context.Context, since time.Time) ([]string, error)) Acceptance {
	return &sglangAcceptance{c: c, logs: logs}
}

func (s *sglangAcceptance) Begin(ctx context.Context) error {
	s.begin = time.Now()
	if m, err := s.c.Metrics(ctx); err == nil {
		s.gauge0, s.ok0 = m.Value("sglang:spec_accept_length")
	}
	return nil
}

func (s *sglangAcceptance) End(ctx context.Context) (AcceptStats, error) {
	if s.begin.IsZero() {
		return AcceptStats{}, errors.New("SGLang acceptance: End without Begin")
	}
	end := time.Now()
	var why []string
	var st AcceptStats
	info, ierr := s.c.ServerInfo(ctx)
	if ierr == nil {
		st.Lifetime = info.AvgAcceptLen
	}
	if s.logs != nil {
		lines, err := s.logs(ctx, s.begin)
		if err != nil {
			why = append(why, "reading the decode log: "+err.Error())
		} else if got, n := fromLines(lines, s.begin, end); n > 0 {
			got.Lifetime = st.Lifetime
			return got, nil
		} else if got, n := fromLines(lines, time.Time{}, time.Time{}); n > 0 {
			// The journal was read from the window's start on the host's own clock, but
			// the lines' stamps (host local time) do not fall in it: another time zone.
			got.Lifetime = st.Lifetime
			got.Source += "; line stamps outside the window (host time zone differs), all lines since the start used"
			return got, nil
		} else {
			why = append(why, fmt.Sprintf("no decode line with accept len in the window among %d log lines", len(lines)))
		}
	}
	m, err := s.c.Metrics(ctx)
	if err == nil {
		if l, ok := m.Value("sglang:spec_accept_length"); ok && s.ok0 && l == s.gauge0 {
			why = append(why, "sglang:spec_accept_length did not change during the run (it describes an earlier log window)")
		} else if ok && l >= 1 {
			st.AcceptLen, st.Source = l, "sglang:spec_accept_length gauge (last log window)"
			if r, ok := m.Value("sglang:spec_accept_rate"); ok {
				st.EngineRate = r
			}
			return st, nil
		}
		why = append(why, "no sglang:spec_accept_length at /metrics")
	} else {
		why = append(why, err.Error())
	}
	if ierr != nil {
		why = append(why, ierr.Error())
	} else if info.AvgAcceptLen >= 1 {
		st.AcceptLen, st.Source = info.AvgAcceptLen, "server_info lifetime average (warm-up included)"
		return st, nil
	} else {
		why = append(why, "no avg_spec_accept_length in server_info")
	}
	return AcceptStats{}, fmt.Errorf("SGLang acceptance: %s", strings.Join(why, "; "))
}

// fromLines aggregates the decode lines in [begin, end] (to the second); a zero
// begin takes every line.
func fromLines(lines []string, begin, end time.Time) (AcceptStats, int) {
	lo := begin.Truncate(time.Second)
	var w, wl, wr, rw float64
	n := 0
	for _, line := range lines {
		d, ok := engine.ParseDecodeLine(line)
		if !ok || d.Engine != "sglang" || d.AcceptLen <= 0 {
			continue
		}
		if !begin.IsZero() && !d.Time.IsZero() && (d.Time.Before(lo) || d.Time.After(end)) {
			continue
		}
		weight := float64(max(d.Running, 1))
		n++
		w += weight
		wl += weight * d.AcceptLen
		if d.HasRate {
			rw += weight
			wr += weight * d.AcceptRate
		}
	}
	if n == 0 {
		return AcceptStats{}, 0
	}
	st := AcceptStats{AcceptLen: wl / w, Source: fmt.Sprintf("sglang decode log (%d lines in the window, weighted by #running-req)", n)}
	if rw > 0 {
		st.EngineRate = wr / rw
	}
	return st, n
}
