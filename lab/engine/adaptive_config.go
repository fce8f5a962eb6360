package engine

import (
	"slices"
	"strconv"
	"strings"
)

// The file of --speculative-adaptive-config, read as SGLang reads it at commit 015c8726
// (sgl-project/sglang python/sglang/srt/speculative/adaptive_spec_params.py:
// resolve_adaptive_strategy, _load_adaptive_config, AdaptiveSpeculativeParams; and
// throughput_aware_controller.py: _parse_bs_candidates, ThroughputAwarePolicy). A JSON object
// whose integer-string keys are batch-size slots (lower bounds), each with "candidate_steps";
// every other top-level key is not a slot: "strategy" ("ema", the default, or
// "throughput_aware") and defaults merged into each slot ({**cfg, **entry}), so a slot's own
// knob wins. The old flat form {"candidate_steps": [...]} has no slot and is refused.

// DefaultAdaptiveConfig is SGLang's DEFAULT_ADAPTIVE_CONFIG at the pinned commit.
const DefaultAdaptiveConfig = `{"1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
 "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
 "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
 "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}}`

// Strategies of the "strategy" key.
const (
	StrategyEMA             = "ema"
	StrategyThroughputAware = "throughput_aware"
)

// AdaptiveSlot is one batch-size slot of an adaptive config, knobs resolved. The EMA knobs
// apply to the "ema" strategy only.
type AdaptiveSlot struct {
	BatchSize      int
	CandidateSteps []int // sorted, distinct
	EMAAlpha       float64
	UpdateInterval int
	WarmupBatches  int
	UpHysteresis   float64
	DownHysteresis float64
	CeilingCoeff   float64
}

// AdaptiveConfig is a loaded adaptive config: its slots by ascending batch size.
type AdaptiveConfig struct {
	Path     string // "" = SGLang's default table
	Strategy string // StrategyEMA or StrategyThroughputAware
	Slots    []AdaptiveSlot
	// Throughput-aware knobs (ThroughputAwarePolicy): re-score every UpdateInterval
	// batches once WindowSize verifies were seen; switch only for a score above the
	// current one by SwitchHysteresis.
	UpdateInterval   int
	WindowSize       int
	SwitchHysteresis float64
}

// CandidateSteps is the union of the slots' candidates, sorted.
func (c *AdaptiveConfig) CandidateSteps() []int {
	var all []int
	for _, s := range c.Slots {
		all = append(all, s.CandidateSteps...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// keys are the slots' batch sizes, ascending.
func (c *AdaptiveConfig) keys() []int {
	out := make([]int, len(c.Slots))
	for i, s := range c.Slots {
		out[i] = s.BatchSize
	}
	return out
}

// candidatesAt is the candidates of the slot with batch-size key k.
func (c *AdaptiveConfig) candidatesAt(k int) []int {
	for _, s := range c.Slots {
		if s.BatchSize == k {
			return s.CandidateSteps
		}
	}
	return nil
}

// ParseAdaptiveConfig validates an adaptive config file's bytes as SGLang does at start;
// the error is SGLang's: the text of the ValueError (AttributeError, JSON decode error:
// prefixed with the exception's name) the engine dies with.
func ParseAdaptiveConfig(b []byte) (*AdaptiveConfig, error) {
	root, err := decodeJSON(b)
	if err != nil {
		return nil, strategyError{pyErrorf("json.decoder.JSONDecodeError: %v", err)}
	}
	cfg, ok := root.(*pyDict)
	if !ok {
		return nil, strategyError{pyErrorf("speculative adaptive config must be a JSON object, got %s", pyTypeName(root))}
	}
	strategy := StrategyEMA
	if v, ok := cfg.get("strategy"); ok {
		if str, _ := v.(string); str == StrategyEMA || str == StrategyThroughputAware {
			strategy = str
		} else {
			return nil, strategyError{pyErrorf("speculative adaptive config 'strategy' must be 'ema' or 'throughput_aware', got %s", pyValue(v))}
		}
	}
	if strategy == StrategyThroughputAware {
		return parseThroughputAware(cfg)
	}
	return parseEMA(cfg)
}

// parseEMA is _load_adaptive_config and AdaptiveStepSlot's knobs.
func parseEMA(cfg *pyDict) (*AdaptiveConfig, error) {
	c := &AdaptiveConfig{Strategy: StrategyEMA}
	for i, key := range cfg.keys {
		if !isDigits(key) {
			continue
		}
		entry, ok := cfg.vals[i].(*pyDict)
		if !ok {
			return nil, pyErrorf("AttributeError: '%s' object has no attribute 'get'", pyTypeName(cfg.vals[i]))
		}
		steps, _ := entry.get("candidate_steps")
		cand, ok := intList(steps, 0, true)
		if !ok {
			return nil, pyErrorf("BS %s: candidate_steps must be a list of non-negative ints, got %s", key, pyValue(steps))
		}
		bs, _ := strconv.Atoi(key)
		s := AdaptiveSlot{BatchSize: bs, CandidateSteps: cand, EMAAlpha: 0.2, UpdateInterval: 5,
			WarmupBatches: 10, DownHysteresis: -0.25}
		for _, src := range []*pyDict{cfg, entry} { // {**cfg, **entry}
			src.num("ema_alpha", &s.EMAAlpha)
			src.num("up_hysteresis", &s.UpHysteresis)
			src.num("down_hysteresis", &s.DownHysteresis)
			src.num("ceiling_coeff", &s.CeilingCoeff)
			var f float64
			if src.num("update_interval", &f) {
				s.UpdateInterval = max(int(f), 1)
			}
			if src.num("warmup_batches", &f) {
				s.WarmupBatches = max(int(f), 0)
			}
		}
		c.addSlot(s)
	}
	if len(c.Slots) == 0 {
		return nil, pyErrorf(`speculative_adaptive_config must contain at least one integer-string BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: %s`, cfg.keysRepr())
	}
	return c, nil
}

// parseThroughputAware is throughput_aware_controller.py's _parse_bs_candidates and the
// knob checks of ThroughputAwarePolicy.__init__: candidates must be positive, so this
// strategy refuses step 0.
func parseThroughputAware(cfg *pyDict) (*AdaptiveConfig, error) {
	c := &AdaptiveConfig{Strategy: StrategyThroughputAware}
	for i, key := range cfg.keys {
		if !isDigits(key) {
			continue
		}
		bs, _ := strconv.Atoi(key)
		if bs < 1 {
			return nil, pyErrorf("throughput-aware batch-size key must be positive, got %s", pyRepr(key))
		}
		entry, ok := cfg.vals[i].(*pyDict)
		if !ok {
			return nil, pyErrorf("throughput-aware config key '%s' must map to a JSON object, got %s", key, pyTypeName(cfg.vals[i]))
		}
		steps, _ := entry.get("candidate_steps")
		cand, ok := intList(steps, 1, false)
		if !ok {
			return nil, pyErrorf("throughput-aware config key '%s': candidate_steps must be a non-empty list of positive ints, got %s", key, pyValue(steps))
		}
		c.addSlot(AdaptiveSlot{BatchSize: bs, CandidateSteps: cand})
	}
	if len(c.Slots) == 0 {
		return nil, pyErrorf(`throughput-aware adaptive config must contain at least one integer-string BS key, e.g. {"1": {"candidate_steps": [1, 3, 7]}}. Got keys: %s`, cfg.keysRepr())
	}
	var err error
	if c.WindowSize, err = cfg.configInt("window_size", 20, 1); err != nil {
		return nil, policyError{err}
	}
	if c.UpdateInterval, err = cfg.configInt("update_interval", 5, 1); err != nil {
		return nil, policyError{err}
	}
	c.SwitchHysteresis = 0.1
	if v, ok := cfg.get("switch_hysteresis"); ok {
		f, isNum := pyNumber(v)
		if !isNum || f < 0 {
			return nil, policyError{pyErrorf("switch_hysteresis must be a finite non-negative number, got %s", pyValue(v))}
		}
		c.SwitchHysteresis = f
	}
	return c, nil
}

// addSlot adds s in ascending batch-size order (a repeated key keeps the last entry, as a
// Python dict does).
func (c *AdaptiveConfig) addSlot(s AdaptiveSlot) {
	c.Slots = slices.DeleteFunc(c.Slots, func(o AdaptiveSlot) bool { return o.BatchSize == s.BatchSize })
	c.Slots = append(c.Slots, s)
	slices.SortFunc(c.Slots, func(a, b AdaptiveSlot) int { return a.BatchSize - b.BatchSize })
}

// intList reads a candidate_steps value: a non-empty list of ints >= lo, sorted and made
// distinct. Python's isinstance(s, int) holds for true and false; withBool says whether they
// count (as 1 and 0).
func intList(v any, lo int, withBool bool) ([]int, bool) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, false
	}
	out := make([]int, 0, len(list))
	for _, x := range list {
		n, ok := pyInt(x, withBool)
		if !ok || n < lo {
			return nil, false
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

// configInt is throughput_aware_controller.py's _config_int.
func (d *pyDict) configInt(name string, def, minimum int) (int, error) {
	v, ok := d.get(name)
	if !ok {
		return def, nil
	}
	n, isInt := pyInt(v, false)
	if !isInt || n < minimum {
		return 0, pyErrorf("%s must be an integer >= %d, got %s", name, minimum, pyValue(v))
	}
	return n, nil
}

// num sets *dst from a numeric key of d and says whether it did.
func (d *pyDict) num(key string, dst *float64) bool {
	v, ok := d.get(key)
	if !ok {
		return false
	}
	f, ok := pyNumber(v)
	if ok {
		*dst = f
	}
	return ok
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// keysRepr is Python's repr of list(cfg.keys()): the keys in file order.
func (d *pyDict) keysRepr() string {
	q := make([]string, len(d.keys))
	for i, k := range d.keys {
		q[i] = pyRepr(k)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
