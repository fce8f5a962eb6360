package engine

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// SGLang's adaptive speculative decoding at start, as of sgl-project/sglang commit 015c8726
// (python/sglang/srt/arg_groups/speculative_hook.py: _maybe_disable_adaptive,
// _init_adaptive_speculative_params; speculative/adaptive_spec_params.py:
// adaptive_unsupported_reason). Adaptive needs EAGLE/EAGLE3 (NEXTN is EAGLE), topk 1, no
// attention DP, and pp_size 1 for the throughput_aware strategy: otherwise SGLang warns
// "speculative_adaptive disabled: ..." and runs the static settings, without reading the
// config file when an earlier check decided. Then it reads the file (SGLang's default table
// without one), sets topk 1 when unset and the steps to the middle candidate when unset,
// refuses steps that are not a candidate (0 is one where a slot lists it) and forces draft
// tokens to steps + 1. See adaptive_config.go for the file, adaptive_router.go for run time.

// checkAdaptive applies SGLang's adaptive start rules to s (speculative, SGLang) before the
// EAGLE defaults: it may turn adaptive off with a warning, or refuse the start.
func checkAdaptive(s Settings, read func(string) ([]byte, error)) (Settings, []string, error) {
	on, _ := s.Args["speculative_adaptive"].(bool)
	if !on {
		s.Adaptive = nil
		return s, nil, nil
	}
	if reason := adaptiveUnsupported(s); reason != "" {
		return s.adaptiveOff(reason)
	}
	path, _ := s.Args["speculative_adaptive_config"].(string)
	cfg := s.Adaptive
	if cfg == nil || cfg.Path != path {
		c, err := s.loadAdaptive(path, read)
		if err != nil {
			return s, nil, err
		}
		cfg = c
	}
	if pp, _ := s.Args["pp_size"].(int); cfg.Strategy == StrategyThroughputAware && pp > 1 {
		return s.adaptiveOff(fmt.Sprintf("pp_size=%d is not supported by throughput-aware adaptive profiling (synthetic startup batches do not traverse PP stages)", pp))
	}
	cand := cfg.CandidateSteps()
	if !s.given("speculative_eagle_topk", s.TopK) {
		s.TopK = 1
		s.Args["speculative_eagle_topk"] = 1
	}
	if !s.given("speculative_num_steps", s.Steps) {
		s.Steps = cand[len(cand)/2]
		s.Args["speculative_num_steps"] = s.Steps
	}
	if !slices.Contains(cand, s.Steps) {
		strs := make([]string, len(cand))
		for i, c := range cand {
			strs[i] = strconv.Itoa(c)
		}
		return s, nil, s.adaptiveTraceback(candidateFrames, fmt.Sprintf("ValueError: --speculative-num-steps=%d is not in the adaptive config candidate_steps [%s]. Pass one of those values.",
			s.Steps, strings.Join(strs, ", ")))
	}
	s.DraftTokens = s.Steps + 1
	s.Args["speculative_num_draft_tokens"] = s.DraftTokens
	s.Adaptive = cfg
	return s, nil, nil
}

// adaptiveUnsupported is adaptive_unsupported_reason's checks that need no file ("" = none).
func adaptiveUnsupported(s Settings) string {
	switch {
	case s.Algorithm != "EAGLE" && s.Algorithm != "EAGLE3":
		return fmt.Sprintf("speculative_algorithm=%s (only EAGLE/EAGLE3 are supported)", s.Algorithm)
	case s.given("speculative_eagle_topk", s.TopK) && s.TopK != 1:
		return fmt.Sprintf("speculative_eagle_topk=%d (only topk=1 is supported)", s.TopK)
	case s.Args["enable_dp_attention"] == true:
		return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
	}
	return ""
}

// adaptiveOff is _maybe_disable_adaptive's warning and fallback to the static settings.
func (s Settings) adaptiveOff(reason string) (Settings, []string, error) {
	s.Args["speculative_adaptive"] = false
	s.Adaptive = nil
	return s, []string{stampNow() + " WARNING speculative_adaptive disabled: " + reason + ". Falling back to static speculative params."}, nil
}

// loadAdaptive reads and parses the file at path (SGLang's default table for ""); a failure
// is the engine's start-up crash.
func (s Settings) loadAdaptive(path string, read func(string) ([]byte, error)) (*AdaptiveConfig, error) {
	b := []byte(DefaultAdaptiveConfig)
	if path != "" {
		var err error
		if b, err = read(path); err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil, s.adaptiveTraceback(strategyFrames, fmt.Sprintf("FileNotFoundError: [Errno 2] No such file or directory: %s", pyRepr(path)))
			}
			return nil, s.adaptiveTraceback(strategyFrames, fmt.Sprintf("OSError: %s: %v", pyRepr(path), err))
		}
	}
	c, err := ParseAdaptiveConfig(b)
	if err != nil {
		last := err.Error()
		if !pyException.MatchString(last) {
			last = "ValueError: " + last
		}
		var se strategyError
		var pe policyError
		switch {
		case errors.As(err, &se):
			return nil, s.adaptiveTraceback(strategyFrames, last)
		case errors.As(err, &pe):
			return nil, s.policyTraceback(last)
		}
		return nil, s.adaptiveTraceback(loadFrames, last)
	}
	c.Path = path
	return c, nil
}

// pyException matches a message that already names its Python exception.
var pyException = regexp.MustCompile(`^[A-Za-z_.]+(Error|Exception): `)

// strategyError is a failure of resolve_adaptive_strategy: the file is not JSON, not an
// object, or names no known strategy. SGLang hits it while deciding whether adaptive can
// run at all, before it loads the slots.
type strategyError struct{ error }

// policyError is a failure of ThroughputAwarePolicy.__init__ (a knob out of range): SGLang
// hits it in the scheduler process, when the speculative worker starts.
type policyError struct{ error }

// The frames above each kind of adaptive start failure (speculative_hook.py,
// adaptive_spec_params.py, throughput_aware_controller.py; line numbers illustrative).
var (
	strategyFrames = []string{
		`  File "SITE/sglang/srt/arg_groups/speculative_hook.py", line 137, in handle_speculative_decoding`,
		`    _maybe_disable_adaptive(server_args)`,
		`  File "SITE/sglang/srt/arg_groups/speculative_hook.py", line 555, in _maybe_disable_adaptive`,
		`    reason = adaptive_unsupported_reason(server_args)`,
		`  File "SITE/sglang/srt/speculative/adaptive_spec_params.py", line 113, in adaptive_unsupported_reason`,
		`    resolve_adaptive_strategy(cfg.speculative_adaptive_config) == "throughput_aware"`,
		`  File "SITE/sglang/srt/speculative/adaptive_spec_params.py", line 32, in resolve_adaptive_strategy`,
	}
	candidateFrames = []string{
		`  File "SITE/sglang/srt/arg_groups/speculative_hook.py", line 139, in handle_speculative_decoding`,
		`    _init_adaptive_speculative_params(server_args)`,
		`  File "SITE/sglang/srt/arg_groups/speculative_hook.py", line 585, in _init_adaptive_speculative_params`,
		`    raise ValueError(`,
	}
	loadFrames = []string{
		`  File "SITE/sglang/srt/arg_groups/speculative_hook.py", line 139, in handle_speculative_decoding`,
		`    _init_adaptive_speculative_params(server_args)`,
		`  File "SITE/sglang/srt/arg_groups/speculative_hook.py", line 575, in _init_adaptive_speculative_params`,
		`    candidate_steps = resolve_candidate_steps_from_config(`,
		`  File "SITE/sglang/srt/speculative/adaptive_spec_params.py", line 174, in resolve_candidate_steps_from_config`,
	}
)

// policyTraceback is the scheduler's crash when the throughput-aware policy refuses a knob.
func (s Settings) policyTraceback(last string) *StartError {
	site := s.SitePackages
	if site == "" {
		site = sitePackages("")
	}
	lines := []string{
		stampNow() + " Scheduler hit an exception: Traceback (most recent call last):",
		`  File "` + site + `/sglang/srt/managers/scheduler.py", line 2914, in run_scheduler_process`,
		`    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)`,
		`  File "` + site + `/sglang/srt/speculative/eagle_worker_v2.py", line 1181, in __init__`,
		`    ThroughputAwarePolicy(`,
		`  File "` + site + `/sglang/srt/speculative/throughput_aware_controller.py", line 214, in __init__`,
		"    raise ValueError(",
		last,
		"",
		stampNow() + " Received sigquit from a child process. It usually means the child failed.",
	}
	return &StartError{Lines: lines, ExitStatus: 1}
}

func (s Settings) adaptiveTraceback(frames []string, last string) *StartError {
	return s.traceback(frames, last)
}
