package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// SGLang's adaptive speculative decoding, as of sgl-project/sglang commit 015c8726
// (python/sglang/srt/speculative/adaptive_spec_params.py, adaptive_step_router.py and
// srt/arg_groups/speculative_hook.py). With --speculative-adaptive the engine moves its draft
// steps per batch size at run time. --speculative-adaptive-config FILE is a JSON object whose
// integer-string keys are batch-size slots, each with "candidate_steps" (non-negative ints;
// 0 turns drafting off) and optional knobs (ema_alpha 0.2, update_interval 5, warmup_batches
// 10, up_hysteresis 0.0, down_hysteresis -0.25, ceiling_coeff 0); top-level knobs apply to
// every slot a slot does not override, and other keys ("strategy") are not slots. Without a
// file SGLang uses DefaultAdaptiveConfig. A batch pads up to the next CUDA-graph batch size,
// then runs the slot with the largest key not above it (the smallest slot below all keys).
// Adaptive needs EAGLE/EAGLE3 (NEXTN is EAGLE) and topk 1: otherwise SGLang warns
// "speculative_adaptive disabled: ..." and runs the static settings. The start is refused
// when --speculative-num-steps is not among the candidates (unset: the middle candidate),
// and draft tokens are forced to steps + 1.

// DefaultAdaptiveConfig is SGLang's DEFAULT_ADAPTIVE_CONFIG at the pinned commit.
const DefaultAdaptiveConfig = `{"1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
 "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
 "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
 "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}}`

// AdaptiveSlot is one batch-size slot of an adaptive config, knobs resolved.
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
	Path  string // "" = SGLang's default table
	Slots []AdaptiveSlot
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

// ParseAdaptiveConfig validates an adaptive config file's bytes as SGLang's
// _load_adaptive_config does; the error is SGLang's message (ValueError text, or a JSON
// decode error).
func ParseAdaptiveConfig(b []byte) (*AdaptiveConfig, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		var v any
		if json.Unmarshal(b, &v) == nil {
			return nil, fmt.Errorf("speculative adaptive config must be a JSON object, got %s", pyTypeName(v))
		}
		return nil, fmt.Errorf("json.decoder.JSONDecodeError: %v", err)
	}
	if st, ok := raw["strategy"]; ok {
		var name string
		if json.Unmarshal(st, &name) != nil || (name != "ema" && name != "throughput_aware") {
			return nil, fmt.Errorf("speculative adaptive config 'strategy' must be 'ema' or 'throughput_aware', got %s", string(st))
		}
		if name == "throughput_aware" {
			return nil, fmt.Errorf("speculative adaptive config 'strategy' throughput_aware is not simulated by the lab")
		}
	}
	top := map[string]json.RawMessage{}
	keys := make([]string, 0, len(raw))
	for k, v := range raw {
		keys = append(keys, k)
		if !isDigits(k) {
			top[k] = v
		}
	}
	sort.Strings(keys)
	c := &AdaptiveConfig{}
	for _, k := range keys {
		if !isDigits(k) {
			continue
		}
		var entry map[string]json.RawMessage
		if err := json.Unmarshal(raw[k], &entry); err != nil {
			return nil, fmt.Errorf("BS %s: entry must be an object, got %s", k, string(raw[k]))
		}
		var steps []json.Number
		d := json.NewDecoder(strings.NewReader(string(entry["candidate_steps"])))
		d.UseNumber()
		bad := d.Decode(&steps) != nil || len(steps) == 0
		var cand []int
		for _, n := range steps {
			i, err := strconv.Atoi(n.String())
			if err != nil || i < 0 {
				bad = true
				break
			}
			cand = append(cand, i)
		}
		if bad {
			got := string(entry["candidate_steps"])
			if got == "" {
				got = "None"
			}
			return nil, fmt.Errorf("BS %s: candidate_steps must be a list of non-negative ints, got %s", k, got)
		}
		slices.Sort(cand)
		bs, _ := strconv.Atoi(k)
		s := AdaptiveSlot{BatchSize: bs, CandidateSteps: slices.Compact(cand), EMAAlpha: 0.2, UpdateInterval: 5,
			WarmupBatches: 10, DownHysteresis: -0.25}
		for _, src := range []map[string]json.RawMessage{top, entry} {
			knob(src, "ema_alpha", &s.EMAAlpha)
			knob(src, "up_hysteresis", &s.UpHysteresis)
			knob(src, "down_hysteresis", &s.DownHysteresis)
			knob(src, "ceiling_coeff", &s.CeilingCoeff)
			var f float64
			if knob(src, "update_interval", &f) {
				s.UpdateInterval = max(int(f), 1)
			}
			if knob(src, "warmup_batches", &f) {
				s.WarmupBatches = max(int(f), 0)
			}
		}
		c.Slots = append(c.Slots, s)
	}
	if len(c.Slots) == 0 {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = "'" + k + "'"
		}
		return nil, fmt.Errorf(`speculative_adaptive_config must contain at least one integer-string BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: [%s]`, strings.Join(names, ", "))
	}
	slices.SortFunc(c.Slots, func(a, b AdaptiveSlot) int { return a.BatchSize - b.BatchSize })
	return c, nil
}

func knob(m map[string]json.RawMessage, key string, dst *float64) bool {
	v, ok := m[key]
	if !ok {
		return false
	}
	var f float64
	if json.Unmarshal(v, &f) != nil {
		return false
	}
	*dst = f
	return true
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

func pyTypeName(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "str"
	case float64:
		return "float"
	case bool:
		return "bool"
	case nil:
		return "NoneType"
	}
	return "dict"
}

// checkAdaptive applies SGLang's adaptive start rules to s (speculative, SGLang) before the
// EAGLE defaults: it may turn adaptive off with a warning, or refuse the start.
func checkAdaptive(s Settings, read func(string) ([]byte, error)) (Settings, []string, error) {
	on, _ := s.Args["speculative_adaptive"].(bool)
	if !on {
		s.Adaptive = nil
		return s, nil, nil
	}
	reason := ""
	switch {
	case s.Algorithm != "EAGLE" && s.Algorithm != "EAGLE3":
		reason = fmt.Sprintf("speculative_algorithm=%s (only EAGLE/EAGLE3 are supported)", s.Algorithm)
	case s.given("speculative_eagle_topk", s.TopK) && s.TopK != 1:
		reason = fmt.Sprintf("speculative_eagle_topk=%d (only topk=1 is supported)", s.TopK)
	}
	if reason != "" {
		s.Args["speculative_adaptive"] = false
		s.Adaptive = nil
		return s, []string{stampNow() + " WARNING speculative_adaptive disabled: " + reason + ". Falling back to static speculative params."}, nil
	}
	path, _ := s.Args["speculative_adaptive_config"].(string)
	cfg := s.Adaptive
	if cfg == nil || cfg.Path != path {
		b := []byte(DefaultAdaptiveConfig)
		if path != "" {
			var err error
			if b, err = read(path); err != nil {
				if errors.Is(err, iofs.ErrNotExist) {
					return s, nil, s.adaptiveTraceback(fmt.Sprintf("FileNotFoundError: [Errno 2] No such file or directory: %s", pyRepr(path)))
				}
				return s, nil, s.adaptiveTraceback(fmt.Sprintf("OSError: %s: %v", pyRepr(path), err))
			}
		}
		c, err := ParseAdaptiveConfig(b)
		if err != nil {
			if strings.HasPrefix(err.Error(), "json.") {
				return s, nil, s.adaptiveTraceback(err.Error())
			}
			return s, nil, s.adaptiveTraceback("ValueError: " + err.Error())
		}
		c.Path = path
		cfg = c
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
		return s, nil, s.adaptiveTraceback(fmt.Sprintf("ValueError: --speculative-num-steps=%d is not in the adaptive config candidate_steps [%s]. Pass one of those values.",
			s.Steps, strings.Join(strs, ", ")))
	}
	s.DraftTokens = s.Steps + 1
	s.Args["speculative_num_draft_tokens"] = s.DraftTokens
	s.Adaptive = cfg
	return s, nil, nil
}

func (s Settings) adaptiveTraceback(last string) *StartError {
	return s.traceback([]string{
		`  File "SITE/sglang/srt/arg_groups/speculative_hook.py", line 140, in handle_speculative_decoding`,
		`    _init_adaptive_speculative_params(server_args)`,
		`  File "SITE/sglang/srt/speculative/adaptive_spec_params.py", line 121, in _load_adaptive_config`,
	}, last)
}

// slotState is one slot's controller at run time (AdaptiveStepSlot).
type slotState struct {
	cfg     AdaptiveSlot
	current int
	ema     float64
	batches int
}

func newSlotState(c AdaptiveSlot, initial int) *slotState {
	st := &slotState{cfg: c, current: c.CandidateSteps[len(c.CandidateSteps)/2]}
	if slices.Contains(c.CandidateSteps, initial) {
		st.current = initial
	}
	st.ema = float64(st.current - 1)
	return st
}

// update feeds one verify's accepted drafts per request; it returns the old and new steps
// when the slot moved.
func (st *slotState) update(correct []int) (from, to int, moved bool) {
	if len(correct) == 0 {
		return 0, 0, false
	}
	if st.current > 0 {
		sum := 0
		for _, c := range correct {
			sum += c
		}
		st.ema = (1-st.cfg.EMAAlpha)*st.ema + st.cfg.EMAAlpha*float64(sum)/float64(len(correct))
	}
	st.batches++
	if st.batches <= st.cfg.WarmupBatches || (st.batches-st.cfg.WarmupBatches)%st.cfg.UpdateInterval != 0 {
		return 0, 0, false
	}
	return st.recompute()
}

func (st *slotState) recompute() (int, int, bool) {
	cand := st.cfg.CandidateSteps
	old := st.current
	idx := slices.Index(cand, old)
	if old == 0 {
		idx = min(idx+1, len(cand)-1)
		if t := cand[idx]; t > 0 && st.ema < 0 {
			st.ema = float64(t - 1)
		}
		return st.apply(old, cand[idx])
	}
	oldIdx := idx
	for idx > 0 {
		prev := cand[idx-1]
		drop := float64(prev) - 0.5
		if prev == 0 {
			drop = 0.5
		}
		if st.ema <= drop+st.cfg.DownHysteresis {
			idx--
		} else {
			break
		}
	}
	if idx >= oldIdx {
		for idx < len(cand)-1 && st.ema > float64(cand[idx])-0.5+st.cfg.UpHysteresis {
			idx++
		}
	}
	target := cand[idx]
	if st.cfg.CeilingCoeff > 0 {
		ceiling := max(1, int(ceilF(st.ema*st.cfg.CeilingCoeff)))
		if target > ceiling && target <= old {
			for idx > 0 && cand[idx] > ceiling {
				idx--
			}
			target = cand[idx]
		}
	}
	return st.apply(old, target)
}

func (st *slotState) apply(old, target int) (int, int, bool) {
	if target == old {
		return old, old, false
	}
	st.current = target
	return old, target, true
}

func ceilF(f float64) float64 {
	i := float64(int(f))
	if f > i {
		return i + 1
	}
	return i
}

// graphBatchSizes is SGLang's default list of CUDA-graph batch sizes up to maxBS
// (model_executor/cuda_graph_runner.py get_batch_sizes_to_capture: 1, 2, 4, 8, 12, then
// every 8).
func graphBatchSizes(maxBS int) []int {
	var out []int
	for _, b := range []int{1, 2, 4, 8, 12} {
		if b <= maxBS {
			out = append(out, b)
		}
	}
	for b := 16; b <= maxBS; b += 8 {
		out = append(out, b)
	}
	return out
}

// adaptiveRouter routes batch sizes to slots.
type adaptiveRouter struct {
	graphBS []int
	slots   []*slotState // by ascending batch size
}

func newAdaptiveRouter(c *AdaptiveConfig, initial, graphMaxBS int) *adaptiveRouter {
	r := &adaptiveRouter{graphBS: graphBatchSizes(graphMaxBS)}
	for _, s := range c.Slots {
		r.slots = append(r.slots, newSlotState(s, initial))
	}
	return r
}

// slot is the slot a batch of n runs with.
func (r *adaptiveRouter) slot(n int) *slotState {
	if i, _ := slices.BinarySearch(r.graphBS, n); i < len(r.graphBS) {
		n = r.graphBS[i]
	}
	best := r.slots[0]
	for _, s := range r.slots {
		if s.cfg.BatchSize <= n {
			best = s
		}
	}
	return best
}
