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
// server_info's lifetime average when read (a cross-check). Source says how
// it was measured; Window is false when it is not a measure of the window
// (a fallback: Source then says so).
type AcceptStats struct {
	AcceptLen, EngineRate float64
	Source                string
	Window                bool
	K                     float64
	Lifetime              float64
}

// SourceVLLMDeltas is vLLM's accept source: counter deltas over the window.
const SourceVLLMDeltas = "vllm /metrics counter deltas"

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
	return AcceptStats{AcceptLen: 1 + da/dd, EngineRate: da / dt, K: dt / dd, Source: SourceVLLMDeltas, Window: true}, nil
}

type sglangAcceptance struct {
	c     *engine.Client
	logs  func(ctx context.Context, since time.Time) ([]string, error)
	begin time.Time
	// flushed: /flush_cache succeeded at Begin, so /server_info's cumulative
	// accept length covers only what ran since; flushErr says why not.
	flushed  bool
	flushErr error
	lifetime float64 // server_info's average before the flush
	// gauge0 is sglang:spec_accept_length at Begin (ok0 when present): a gauge
	// that has not changed by End was not updated in the window and describes
	// an earlier one.
	gauge0 float64
	ok0    bool
	// flushAt is when Begin asked for the flush: the decode log is read
	// from there, so that it holds the engine's flush line.
	flushAt time.Time
}

// flushedLine is what SGLang's scheduler logs when /flush_cache flushed
// (Scheduler.flush_cache: logger.info("Cache flushed successfully!")).
const flushedLine = "Cache flushed successfully!"

// afterFlush is the lines after the last flushedLine, and whether there was one.
func afterFlush(lines []string) ([]string, bool) {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], flushedLine) {
			return lines[i+1:], true
		}
	}
	return lines, false
}

// Accept sources of SGLang, best first. Only the first two measure the
// benchmark window; the others say so in AcceptStats.Source.
const (
	SourceSGLangFlush    = "sglang /server_info avg_spec_accept_length since /flush_cache at the start (the run's whole decode-log windows)"
	SourceSGLangLog      = "sglang decode log lines of the window"
	SourceSGLangGauge    = "sglang:spec_accept_length gauge: the last decode-log window only, not measured over the window"
	SourceSGLangLifetime = "sglang /server_info lifetime average (warm-up included), not measured over the window"
)

// SGLangAcceptance measures acceptance over the benchmark window from what a
// real SGLang exposes, best method first:
//
//  1. Begin asks the engine to flush its cache (POST /flush_cache; SGLang does
//     it only when no request runs or waits). A flush restarts the cumulative
//     accept length of /server_info (Begin checks that it did: the figure is
//     absent right after) and the count of decode iterations, so at
//     End avg_spec_accept_length is tokens over verify steps of exactly the
//     run's decode-log windows (every --decode-log-interval iterations from
//     the flush; the iterations after the last window, fewer than one window,
//     are not in it). A flush also empties the prefix cache: the run's
//     requests share no prefix, so their figures do not change.
//  2. Without that figure, the decode log lines the engine wrote during the
//     window (logs returns lines since a time; nil = no logs, as over plain
//     HTTP): the mean of their accept len weighted by #running-req, since a
//     line covers decode-log-interval iterations of that many requests. After
//     a flush, the lines after the engine's "Cache flushed successfully!"
//     (SGLang's scheduler logs it in flush_cache) are the window's: a line of
//     the run before, stamped in the same second, is not. Otherwise a line
//     counts when its timestamp (host local time, to the second) is in the
//     window's seconds, or when it has none. The lines' printed accept rate,
//     likewise weighted, is EngineRate (with a flush too, when there are
//     lines).
//  3. The sglang:spec_accept_length gauge when it changed during the run: the
//     last decode-log window only.
//  4. /server_info's lifetime average.
//
// Only 1 and 2 set Window; Source names the method, and 3 and 4 say they are
// not measured over the window. Lifetime is server_info's average before the
// run.
func SGLangAcceptance(c *engine.Client, logs func(ctx context.Context, since time.Time) ([]string, error)) Acceptance {
	return &sglangAcceptance{c: c, logs: logs}
}

func (s *sglangAcceptance) Begin(ctx context.Context) error {
	if info, err := s.c.ServerInfo(ctx); err == nil {
		s.lifetime = info.AvgAcceptLen
	}
	if m, err := s.c.Metrics(ctx); err == nil {
		s.gauge0, s.ok0 = m.Value("sglang:spec_accept_length")
	}
	s.flushAt = time.Now()
	s.flushErr = s.c.FlushCache(ctx)
	if s.flushErr == nil {
		// A flush restarts the cumulative figure: it is absent until the next decode
		// log line. Still there, it was not restarted (an SGLang that answers 200 without
		// flushing, or one that keeps it), and would be the lifetime's.
		if info, err := s.c.ServerInfo(ctx); err != nil {
			s.flushErr = fmt.Errorf("after the flush: %w", err)
		} else if info.AvgAcceptLen > 0 {
			s.flushErr = errors.New("the engine answered /flush_cache but its avg_spec_accept_length did not restart")
		}
	}
	s.flushed = s.flushErr == nil
	s.begin = time.Now()
	return nil
}

func (s *sglangAcceptance) End(ctx context.Context) (AcceptStats, error) {
	if s.begin.IsZero() {
		return AcceptStats{}, errors.New("SGLang acceptance: End without Begin")
	}
	end := time.Now()
	var why []string
	var lines []string
	var logsRead bool
	var short *ShortRunError
	since := s.begin
	if s.flushed {
		since = s.flushAt
	}
	if s.logs != nil {
		var err error
		if lines, err = s.logs(ctx, since); err != nil {
			why = append(why, "reading the decode log: "+err.Error())
		} else {
			logsRead = true
		}
	}
	var fromLog AcceptStats
	var nLines int
	if cut, ok := afterFlush(lines); s.flushed && ok {
		lines = cut
		fromLog, nLines = fromLines(cut, since, end)
	} else {
		fromLog, nLines = fromLines(lines, s.begin, end)
	}
	info, ierr := s.c.ServerInfo(ctx)
	if s.flushed {
		if ierr == nil && info.AvgAcceptLen >= 1 {
			st := AcceptStats{AcceptLen: info.AvgAcceptLen, Source: SourceSGLangFlush, Window: true, Lifetime: s.lifetime}
			if nLines > 0 {
				st.EngineRate = fromLog.EngineRate
			}
			return st, nil
		}
		if ierr != nil {
			why = append(why, "after the flush: "+ierr.Error())
		} else {
			iv := "decode_log_interval"
			if n, ok := info.Raw["decode_log_interval"]; ok && n != nil {
				iv = fmt.Sprintf("%v", n)
			}
			short = &ShortRunError{Interval: iv}
			why = append(why, "no avg_spec_accept_length in server_info after the flush: "+short.Reason())
		}
	} else {
		why = append(why, s.flushErr.Error())
	}
	if nLines > 0 {
		fromLog.Lifetime = s.lifetime
		return fromLog, nil
	}
	if logsRead {
		if got, n := fromLines(lines, time.Time{}, time.Time{}); n > 0 {
			// The journal was read from the window's start on the host's own clock, but
			// the lines' stamps (host local time) do not fall in it: another time zone.
			got.Lifetime = s.lifetime
			got.Source += "; line stamps outside the window (host time zone differs), all lines since the start used"
			return got, nil
		}
		why = append(why, fmt.Sprintf("no decode line with accept len in the window among %d log lines", len(lines)))
	}
	st := AcceptStats{Lifetime: s.lifetime}
	m, err := s.c.Metrics(ctx)
	if err == nil {
		if l, ok := m.Value("sglang:spec_accept_length"); ok && s.ok0 && l == s.gauge0 {
			why = append(why, "sglang:spec_accept_length did not change during the run (it describes an earlier log window)")
		} else if ok && l >= 1 {
			st.AcceptLen, st.Source = l, SourceSGLangGauge
			if r, ok := m.Value("sglang:spec_accept_rate"); ok {
				st.EngineRate = r
			}
			return st, nil
		} else {
			why = append(why, "no sglang:spec_accept_length at /metrics")
		}
	} else {
		why = append(why, err.Error())
	}
	switch {
	case s.flushed: // after a flush the figure is the window's, and was read above
	case ierr != nil:
		why = append(why, ierr.Error())
	case info.AvgAcceptLen >= 1:
		st.AcceptLen, st.Source = info.AvgAcceptLen, SourceSGLangLifetime
		return st, nil
	default:
		why = append(why, "no avg_spec_accept_length in server_info")
	}
	err = fmt.Errorf("SGLang acceptance not measured over the window: %s", strings.Join(why, "; "))
	if short != nil {
		short.Err = err
		return AcceptStats{}, short
	}
	return AcceptStats{}, err
}

// ShortRunError is SGLang's acceptance not measured because the run ended
// before the engine logged one decode window after the flush (Interval: its
// decode_log_interval as /server_info gives it). Longer outputs or more
// prompts measure it. Err is the whole error: every method tried.
type ShortRunError struct {
	Interval string
	Err      error
}

// Reason says why, in a few words.
func (e *ShortRunError) Reason() string {
	return fmt.Sprintf("the run was shorter than one decode-log window (%s decode iterations)", e.Interval)
}

func (e *ShortRunError) Error() string { return e.Err.Error() }

func (e *ShortRunError) Unwrap() error { return e.Err }

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
	st := AcceptStats{AcceptLen: wl / w, Window: true, Source: fmt.Sprintf("%s (%d, weighted by #running-req)", SourceSGLangLog, n)}
	if rw > 0 {
		st.EngineRate = wr / rw
	}
	return st, n
}
