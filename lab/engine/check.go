package engine

import (
	"fmt"
	"maps"
	"os"
	"strings"
	"time"
)

// Defaults Check applies to unset values.
const (
	defaultContextLength    = 32768
	defaultChunkedPrefill   = 8192
	defaultMemFraction      = 0.88
	specMaxRunning          = 48   // SGLang's cap with speculation on
	sglangDefaultMaxRunning = 2048 // SGLang without speculation (really derived from memory)
	vllmDefaultMaxNumSeqs   = 256
	maxSpecSteps            = 32
)

// AdjustDraftLine is what SGLang logs when topk == 1 forces draft tokens to steps + 1.
const AdjustDraftLine = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"

// Check validates and completes parsed settings the way the engine does at start
// (SGLang's ServerArgs.__post_init__, vLLM's SpeculativeConfig), returning the settings after
// adjustment and the log lines the engine writes while doing so. A start the engine refuses
// yields a *StartError (Python traceback, exit 1); lines written before it are returned too.
// s is not modified (Args is copied).
func Check(s Settings) (Settings, []string, error) {
	return CheckFiles(s, os.ReadFile)
}

// CheckFiles is Check reading the files the settings name (--speculative-adaptive-config)
// with read, as the engine reads them on its own host.
func CheckFiles(s Settings, read func(path string) ([]byte, error)) (Settings, []string, error) {
	s.Args = maps.Clone(s.Args)
	if s.Args == nil {
		s.Args = map[string]any{}
	}
	if s.TP <= 0 {
		s.TP = 1
	}
	if s.ContextLength <= 0 {
		s.ContextLength = defaultContextLength
	}
	if s.ChunkedPrefillSize <= 0 {
		s.ChunkedPrefillSize = defaultChunkedPrefill
	}
	if s.DecodeLogInterval <= 0 {
		s.DecodeLogInterval = 40
	}
	if s.ServedModelName == "" {
		s.ServedModelName = s.Model
	}
	if s.Flavor == "vllm" {
		return checkVLLM(s)
	}
	s.Flavor = "sglang"
	if s.Prog == "" {
		s.Prog = "launch_server.py"
	}
	if s.MemFractionStatic <= 0 {
		s.MemFractionStatic = defaultMemFraction
		s.Args["mem_fraction_static"] = s.MemFractionStatic
	}
	var lines []string
	if s.Speculative() {
		var err error
		if s, lines, err = checkSGLangSpec(s, read); err != nil {
			return s, lines, err
		}
	}
	if s.MaxRunningRequests <= 0 {
		s.MaxRunningRequests = sglangDefaultMaxRunning
	}
	if s.CudaGraphMaxBS <= 0 {
		s.CudaGraphMaxBS = min(s.MaxRunningRequests, 256)
		s.Args["cuda_graph_max_bs"] = s.CudaGraphMaxBS
	}
	return s, lines, nil
}

// given says whether a speculative value was set: by the command line when Args come from
// ParseArgv, else by a non-zero field.
func (s Settings) given(dest string, field int) bool {
	if v, ok := s.Args[dest]; ok {
		return v != nil
	}
	return field != 0
}

func checkSGLangSpec(s Settings, read func(string) ([]byte, error)) (Settings, []string, error) {
	if s.Algorithm == "NEXTN" {
		s.Algorithm = "EAGLE" // NEXTN (MTP) is EAGLE with the model's own draft layer
	}
	s, lines, err := checkAdaptive(s, read)
	if err != nil {
		return s, lines, err
	}
	stepsSet := s.given("speculative_num_steps", s.Steps)
	topkSet := s.given("speculative_eagle_topk", s.TopK)
	draftSet := s.given("speculative_num_draft_tokens", s.DraftTokens)
	switch {
	case !stepsSet && (topkSet || draftSet):
		return s, lines, s.traceback([]string{
			`  File "SITE/sglang/srt/server_args.py", line 1763, in _handle_speculative_decoding`,
			`    assert (`,
		}, "AssertionError")
	case !stepsSet:
		s.Steps, s.TopK, s.DraftTokens = 3, 1, 4
		if strings.Contains(strings.ToLower(s.Model), "llama") {
			s.Steps, s.TopK, s.DraftTokens = 5, 4, 8
		}
	case !topkSet || !draftSet:
		return s, lines, s.traceback([]string{
			`  File "SITE/sglang/srt/server_args.py", line 1790, in _handle_speculative_decoding`,
			`    self.speculative_num_draft_tokens = self.speculative_eagle_topk * self.speculative_num_steps + 1`,
		}, "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'")
	}
	minSteps := 1
	if s.Adaptive != nil {
		minSteps = 0 // a candidate of the adaptive config (checkAdaptive), 0 included
	}
	for _, c := range []struct {
		name  string
		v, lo int
		hi    int
	}{{"speculative_num_steps", s.Steps, minSteps, maxSpecSteps}, {"speculative_eagle_topk", s.TopK, 1, 64},
		{"speculative_num_draft_tokens", s.DraftTokens, 1, 1024}} {
		if c.v < c.lo || c.v > c.hi {
			return s, lines, s.traceback([]string{
				`  File "SITE/sglang/srt/server_args.py", line 1771, in _handle_speculative_decoding`,
				`    raise ValueError(`,
			}, fmt.Sprintf("ValueError: %s must be between %d and %d, got %d", c.name, c.lo, c.hi, c.v))
		}
	}
	if s.TopK == 1 && s.DraftTokens != s.Steps+1 {
		s.DraftTokens = s.Steps + 1
		lines = append(lines, stampNow()+" "+AdjustDraftLine)
	}
	if s.MaxRunningRequests <= 0 {
		s.MaxRunningRequests = specMaxRunning
		s.Args["max_running_requests"] = specMaxRunning
		lines = append(lines, stampNow()+" Max running requests is reset to 48 for speculative decoding. "+
			"You can override this by explicitly setting --max-running-requests.")
	}
	s.Args["speculative_algorithm"] = s.Algorithm
	s.Args["speculative_num_steps"] = s.Steps
	s.Args["speculative_eagle_topk"] = s.TopK
	s.Args["speculative_num_draft_tokens"] = s.DraftTokens
	return s, lines, nil
}

// traceback builds SGLang's start-up crash: the launch_server frames, then frames, then last.
func (s Settings) traceback(frames []string, last string) *StartError {
	lines := []string{
		"Traceback (most recent call last):",
		`  File "<frozen runpy>", line 198, in _run_module_as_main`,
		`  File "<frozen runpy>", line 88, in _run_code`,
		`  File "SITE/sglang/launch_server.py", line 11, in <module>`,
		`    server_args = prepare_server_args(sys.argv[1:])`,
		`  File "SITE/sglang/srt/server_args.py", line 4213, in prepare_server_args`,
		`    return ServerArgs.from_cli_args(raw_args)`,
		`  File "<string>", line 318, in __init__`,
		`  File "SITE/sglang/srt/server_args.py", line 598, in __post_init__`,
		`    self._handle_speculative_decoding()`,
	}
	lines = append(lines, frames...)
	lines = append(lines, last)
	site := s.SitePackages
	if site == "" {
		site = sitePackages("")
	}
	for i, l := range lines {
		lines[i] = strings.Replace(l, "SITE", site, 1)
	}
	return &StartError{Lines: lines, ExitStatus: 1}
}

var vllmMTPAliases = map[string]bool{"deepseek_mtp": true, "qwen3_next_mtp": true, "ernie_mtp": true,
	"glm4_moe_mtp": true, "mimo_mtp": true, "longcat_flash_mtp": true}

var vllmMethods = []string{"ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "mtp", "suffix"}

func checkVLLM(s Settings) (Settings, []string, error) {
	var lines []string
	if s.Prog == "" {
		s.Prog = "vllm serve"
	}
	// CacheConfig.gpu_memory_utilization is Field(default=0.9, gt=0, le=1) and
	// SchedulerConfig.max_num_seqs has ge=1 (vllm/config/cache.py, scheduler.py):
	// pydantic refuses anything else when the engine config is built.
	if v, ok := s.Args["gpu_memory_utilization"].(float64); ok && (v <= 0 || v > 1) {
		return s, lines, s.vllmConfigTraceback("CacheConfig", "gpu_memory_utilization",
			fmt.Sprintf("  Input should be greater than 0 and less than or equal to 1 [type=less_than_equal, input_value=%s, input_type=float]", pyFloat(v)))
	}
	if v, ok := s.Args["max_num_seqs"].(int); ok && v < 1 {
		return s, lines, s.vllmConfigTraceback("SchedulerConfig", "max_num_seqs",
			fmt.Sprintf("  Input should be greater than or equal to 1 [type=greater_than_equal, input_value=%d, input_type=int]", v))
	}
	if s.MemFractionStatic <= 0 {
		s.MemFractionStatic = 0.9
	}
	if s.MaxRunningRequests <= 0 {
		s.MaxRunningRequests = vllmDefaultMaxNumSeqs
	}
	if s.CudaGraphMaxBS <= 0 {
		s.CudaGraphMaxBS = 512
	}
	_, hasConfig := s.Args["speculative_config"]
	hasConfig = hasConfig && s.Args["speculative_config"] != nil
	if !hasConfig && s.Algorithm == "" {
		s.Steps, s.TopK, s.DraftTokens = 0, 0, 0
		return s, lines, nil
	}
	if vllmMTPAliases[s.Algorithm] {
		lines = append(lines, vllmStamp("WARNING", "speculative.py:285")+fmt.Sprintf(" method `%s` is deprecated and replaced with mtp.", s.Algorithm))
		s.Algorithm = "mtp"
	}
	known := false
	for _, m := range vllmMethods {
		known = known || m == s.Algorithm
	}
	switch {
	case s.Algorithm == "" && s.DraftModelPath == "":
		return s, lines, s.vllmTraceback("ValueError: num_speculative_tokens was provided but without speculative model.")
	case s.Algorithm == "":
		s.Algorithm = "draft_model"
	case !known:
		q := make([]string, len(vllmMethods))
		for i, m := range vllmMethods {
			q[i] = "'" + m + "'"
		}
		return s, lines, s.vllmTraceback("pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
			"method",
			fmt.Sprintf("  Input should be %s [type=literal_error, input_value=%s, input_type=str]", strings.Join(q, ", "), pyRepr(s.Algorithm)))
	}
	stepsGiven := s.Steps != 0
	if m, ok := s.Args["speculative_config"].(map[string]any); ok {
		if v, ok := m["num_speculative_tokens"]; ok && v != nil {
			f, isNum := v.(float64)
			if !isNum || f != float64(int(f)) {
				return s, lines, s.vllmTraceback("pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
					"num_speculative_tokens", fmt.Sprintf("  Input should be a valid integer [type=int_type, input_value=%v, input_type=%T]", v, v))
			}
			s.Steps, stepsGiven = int(f), true
		}
	}
	if !stepsGiven {
		if s.Algorithm != "mtp" {
			return s, lines, s.vllmTraceback("ValueError: num_speculative_tokens must be provided with speculative model unless the draft model config contains an n_predict parameter.")
		}
		s.Steps = 1 // the model's n_predict
	}
	if s.Steps < 1 {
		return s, lines, s.vllmTraceback(fmt.Sprintf("ValueError: Expected num_speculative_tokens to be greater than zero (%d).", s.Steps))
	}
	s.TopK, s.DraftTokens = 1, s.Steps+1
	if m, ok := s.Args["speculative_config"].(map[string]any); ok {
		if raw, ok := m["num_speculative_tokens_per_batch_size"]; ok && raw != nil {
			t, err := parseBatchTable(raw)
			if err != nil {
				return s, lines, s.vllmTraceback("pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
					"num_speculative_tokens_per_batch_size", err.Error())
			}
			if len(t) > 0 { // the Scheduler builds the lookup only for a non-empty table
				if t, err = checkBatchTable(t); err != nil {
					return s, lines, s.vllmCoreTraceback(err.Error())
				}
				s.BatchTable = t
			}
		}
	}
	if m, ok := s.Args["speculative_config"].(map[string]any); ok {
		m = maps.Clone(m)
		m["method"], m["num_speculative_tokens"] = s.Algorithm, s.Steps
		s.Args["speculative_config"] = m
	}
	return s, lines, nil
}

func (s Settings) vllmTraceback(last ...string) *StartError {
	site := s.SitePackages
	if site == "" {
		site = sitePackages("")
	}
	lines := []string{
		"Traceback (most recent call last):",
		`  File "` + site + `/vllm/entrypoints/cli/main.py", line 73, in main`,
		`    args.dispatch_function(args)`,
		`  File "` + site + `/vllm/engine/arg_utils.py", line 1412, in create_engine_config`,
		`    speculative_config = self.create_speculative_config(`,
		`  File "` + site + `/vllm/config/speculative.py", line 312, in __post_init__`,
	}
	return &StartError{Lines: append(lines, last...), ExitStatus: 1}
}

// vllmConfigTraceback is vLLM's start-up crash when pydantic refuses a config field.
func (s Settings) vllmConfigTraceback(config, field, detail string) *StartError {
	site := s.SitePackages
	if site == "" {
		site = sitePackages("")
	}
	return &StartError{ExitStatus: 1, Lines: []string{
		"Traceback (most recent call last):",
		`  File "` + site + `/vllm/entrypoints/cli/main.py", line 73, in main`,
		`    args.dispatch_function(args)`,
		`  File "` + site + `/vllm/engine/arg_utils.py", line 1290, in create_engine_config`,
		"pydantic_core._pydantic_core.ValidationError: 1 validation error for " + config,
		field,
		detail,
	}}
}

// vllmCoreTraceback is the engine core's start-up crash when its Scheduler refuses the
// per-batch-size table (vllm/v1/core/sched/scheduler.py calls build_dynamic_sd_schedule_lookup).
func (s Settings) vllmCoreTraceback(msg string) *StartError {
	site := s.SitePackages
	if site == "" {
		site = sitePackages("")
	}
	return &StartError{ExitStatus: 1, Lines: []string{
		vllmStamp("ERROR", "core.py:708") + " EngineCore failed to start.",
		"Traceback (most recent call last):",
		`  File "` + site + `/vllm/v1/engine/core.py", line 699, in run_engine_core`,
		"    engine_core = EngineCoreProc(*args, **kwargs)",
		`  File "` + site + `/vllm/v1/core/sched/scheduler.py", line 309, in __init__`,
		"    self.dynamic_sd_lookup = build_dynamic_sd_schedule_lookup(",
		`  File "` + site + `/vllm/v1/spec_decode/dynamic/utils.py", line 93, in build_dynamic_sd_schedule_lookup`,
		"    parsed_schedule = validate_and_normalize_dynamic_sd_schedule(",
		`  File "` + site + `/vllm/v1/spec_decode/dynamic/utils.py", line 74, in validate_and_normalize_dynamic_sd_schedule`,
		"    raise ValueError(",
		"ValueError: " + msg,
		"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
	}}
}

// stampNow is SGLang's log prefix without a rank: "[2026-07-21 15:00:13]".
func stampNow() string { return "[" + time.Now().Format(time.DateTime) + "]" }

// vllmStamp is vLLM's log prefix: "INFO 07-21 15:00:13 [file.py:12]".
func vllmStamp(level, where string) string {
	return level + " " + time.Now().Format("01-02 15:04:05") + " [" + where + "]"
}
