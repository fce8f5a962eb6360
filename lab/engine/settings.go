// Package engine is the lab's SGLang-like (and vLLM-like) inference server: it parses a unit's
// ExecStart command line the way the real engines do (rejecting what they reject), checks and
// adjusts the speculative-decoding settings like SGLang, and serves an OpenAI-compatible HTTP
// API (and SGLang's native /generate and /flush_cache) whose token speed follows a small
// physics model of speculative decoding. It writes the engines' log lines and metrics, and is
// no easier to measure than the real engine: SGLang's cumulative accept length on
// /server_info moves only at decode log lines. It keeps ground truth (tokens emitted, verify
// steps, and per request its arrival, admission, first and last token) so a benchmark can
// be checked against it.
package engine

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Settings are the server arguments that matter to the lab, after ParseArgv (and Check).
// Steps, TopK and DraftTokens are 0 when unset (see Args for None versus given).
type Settings struct {
	Flavor             string  // "sglang" or "vllm"
	Prog               string  // argparse prog: "launch_server.py", "vllm serve", "api_server.py"
	SitePackages       string  // where tracebacks say the package lives
	Model              string  // model path (SGLang --model-path, vLLM positional or --model)
	ServedModelName    string  // name in /v1/models; defaults to Model
	Host               string  //
	Port               int     //
	TP                 int     // tensor parallel size
	MemFractionStatic  float64 // SGLang --mem-fraction-static, vLLM --gpu-memory-utilization; 0 = unset
	Algorithm          string  // SGLang EAGLE/EAGLE3/NEXTN/...; vLLM method ("mtp", "eagle", ...); "" = off
	DraftModelPath     string  //
	Steps              int     // drafts proposed per verify step along the chain (vLLM num_speculative_tokens)
	TopK               int     //
	DraftTokens        int     // tokens verified per step, root included (vLLM: Steps+1)
	MaxRunningRequests int     // 0 = unset (Check fills it)
	DecodeLogInterval  int     // decode iterations between SGLang decode log lines
	EnableMetrics      bool    // SGLang serves /metrics only with --enable-metrics (vLLM always)
	ContextLength      int     // 0 = model default (32768)
	ChunkedPrefillSize int     // prompt tokens per prefill batch; 0 = default
	CudaGraphMaxBS     int     // 0 = default
	// Adaptive is SGLang's adaptive speculative config after Check (nil = static steps).
	Adaptive *AdaptiveConfig
	// BatchTable is vLLM's num_speculative_tokens_per_batch_size (nil = Steps at every batch).
	BatchTable []BatchK
	// SkipZeroDraftExtend is SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND from the
	// environment (ApplyEnv): adaptive step 0 skips the draft model's extend.
	SkipZeroDraftExtend bool
	// Args are the server arguments by argparse dest, defaults included; nil values are
	// Python's None. /server_info reports them.
	Args map[string]any
}

// Speculative reports whether speculative decoding is on.
func (s Settings) Speculative() bool { return s.Algorithm != "" }

// ArgError is a command line the engine's argparse rejects: Lines are what it prints to stderr
// (usage, then "PROG: error: ..."), ExitStatus is 2 (0 for --help).
type ArgError struct {
	Lines      []string
	ExitStatus int
}

func (e *ArgError) Error() string {
	if len(e.Lines) == 0 {
		return fmt.Sprintf("engine arguments rejected (exit %d)", e.ExitStatus)
	}
	return e.Lines[len(e.Lines)-1]
}

// StartError is an engine start that fails after parsing: Lines are the traceback it prints,
// ExitStatus the process exit status (1).
type StartError struct {
	Lines      []string
	ExitStatus int
}

func (e *StartError) Error() string {
	if len(e.Lines) == 0 {
		return fmt.Sprintf("engine start failed (exit %d)", e.ExitStatus)
	}
	return e.Lines[len(e.Lines)-1]
}

// The parsers are immutable once built.
var (
	sglangParser = sync.OnceValue(func() *argParser {
		return newParser("launch_server.py", "", "", false, sglangFlags())
	})
	vllmServeParser = sync.OnceValue(func() *argParser {
		return newParser("vllm serve", "vllm serve [model_tag] [options]", "model_tag", true, vllmFlags())
	})
	vllmAPIServerParser = sync.OnceValue(func() *argParser {
		return newParser("api_server.py", "api_server.py [-h] [options]", "", true, vllmFlags())
	})
)

var pythonBin = regexp.MustCompile(`^python(3(\.\d+)?)?$`)

// ParseArgv parses a full ExecStart argv: `python3 -m sglang.launch_server ...`,
// `vllm serve MODEL ...` or `python3 -m vllm.entrypoints.openai.api_server ...`. A command
// line the engine's argparse rejects yields an *ArgError (exit status 2); an argv that launches
// neither engine yields a plain error.
func ParseArgv(argv []string) (Settings, error) {
	if len(argv) == 0 {
		return Settings{}, fmt.Errorf("parse engine command line: empty argv")
	}
	base := path.Base(argv[0])
	if base == "vllm" && len(argv) > 1 && argv[1] == "serve" {
		return parseVLLM(argv, "vllm serve", argv[2:])
	}
	if pythonBin.MatchString(base) {
		for i := 1; i+1 < len(argv); i++ {
			if argv[i] == "-m" {
				switch argv[i+1] {
				case "sglang.launch_server":
					return parseSGLang(argv, argv[i+2:])
				case "vllm.entrypoints.openai.api_server":
					return parseVLLM(argv, "api_server.py", argv[i+2:])
				}
				break
			}
			if !strings.HasPrefix(argv[i], "-") {
				break
			}
		}
	}
	return Settings{}, fmt.Errorf("parse engine command line %q: not an SGLang or vLLM launch", strings.Join(argv, " "))
}

// sitePackages guesses the package directory from the interpreter path, like a venv layout.
func sitePackages(argv0 string) string {
	dir := path.Dir(argv0)
	if path.Base(dir) == "bin" && path.IsAbs(dir) {
		return path.Dir(dir) + "/lib/python3.12/site-packages"
	}
	return "/usr/local/lib/python3.12/dist-packages"
}

func parseSGLang(argv, args []string) (Settings, error) {
	p := sglangParser()
	res, aerr := p.parse(args)
	if aerr != nil {
		return Settings{}, aerr
	}
	v := res.vals
	s := Settings{
		Flavor:             "sglang",
		Prog:               p.prog,
		SitePackages:       sitePackages(argv[0]),
		Model:              str(v["model_path"]),
		ServedModelName:    str(v["served_model_name"]),
		Host:               str(v["host"]),
		Port:               num(v["port"]),
		TP:                 num(v["tp_size"]),
		MemFractionStatic:  flt(v["mem_fraction_static"]),
		Algorithm:          str(v["speculative_algorithm"]),
		DraftModelPath:     str(v["speculative_draft_model_path"]),
		Steps:              num(v["speculative_num_steps"]),
		TopK:               num(v["speculative_eagle_topk"]),
		DraftTokens:        num(v["speculative_num_draft_tokens"]),
		MaxRunningRequests: num(v["max_running_requests"]),
		DecodeLogInterval:  num(v["decode_log_interval"]),
		EnableMetrics:      v["enable_metrics"] == true,
		ContextLength:      num(v["context_length"]),
		ChunkedPrefillSize: num(v["chunked_prefill_size"]),
		CudaGraphMaxBS:     num(v["cuda_graph_max_bs"]),
		Args:               v,
	}
	if s.ServedModelName == "" {
		s.ServedModelName = s.Model
		v["served_model_name"] = s.Model
	}
	return s, nil
}

func parseVLLM(argv []string, prog string, args []string) (Settings, error) {
	p := vllmAPIServerParser()
	if prog == "vllm serve" {
		p = vllmServeParser()
	}
	res, aerr := p.parse(args)
	if aerr != nil {
		return Settings{}, aerr
	}
	v := res.vals
	model := str(v["model"])
	if t := str(v["model_tag"]); t != "" {
		model = t
		v["model"] = t
	}
	if model == "" {
		model = "Qwen/Qwen3-0.6B"
		v["model"] = model
	}
	s := Settings{
		Flavor:             "vllm",
		Prog:               prog,
		SitePackages:       sitePackages(argv[0]),
		Model:              model,
		ServedModelName:    model,
		Host:               str(v["host"]),
		Port:               num(v["port"]),
		TP:                 num(v["tensor_parallel_size"]),
		MemFractionStatic:  flt(v["gpu_memory_utilization"]),
		MaxRunningRequests: num(v["max_num_seqs"]),
		DecodeLogInterval:  40,
		EnableMetrics:      true,
		ChunkedPrefillSize: num(v["max_num_batched_tokens"]),
		Args:               v,
	}
	if names, ok := v["served_model_name"].([]string); ok && len(names) > 0 {
		s.ServedModelName = names[0]
	}
	if ml := str(v["max_model_len"]); ml != "" {
		n, ok := humanInt(ml)
		if !ok {
			return Settings{}, p.fail("argument --max-model-len: invalid human_readable_int value: " + pyRepr(ml))
		}
		s.ContextLength = n
	}
	if sc, ok := v["speculative_config"]; ok && sc != nil {
		m, ok := sc.(map[string]any)
		if !ok {
			return Settings{}, p.fail("argument --speculative-config: invalid loads value: " + pyRepr(fmt.Sprint(sc)))
		}
		method, _ := m["method"].(string)
		s.Algorithm = method
		if n, ok := m["num_speculative_tokens"].(float64); ok && n == float64(int(n)) {
			s.Steps = int(n) // Check validates it
		}
		if d, ok := m["model"].(string); ok {
			s.DraftModelPath = d
		}
	}
	return s, nil
}

// humanInt parses vLLM's human-readable ints: 32768, 32k, 1m.
func humanInt(s string) (int, bool) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1000, s[:len(s)-1]
	case strings.HasSuffix(s, "m"), strings.HasSuffix(s, "M"):
		mult, s = 1000000, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	return n * mult, true
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) int {
	n, _ := v.(int)
	return n
}

func flt(v any) float64 {
	f, _ := v.(float64)
	return f
}

// EnvSkipZeroDraftExtend is SGLang's switch (sgl-project/sglang python/sglang/srt/environ.py,
// EnvBool(False), at 0003215c): skip draft_extend while adaptive spec is at steps 0; the draft
// KV goes stale and an upshift starts from a cold draft state.
const EnvSkipZeroDraftExtend = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"

// ApplyEnv reads the environment variables the engine honours from env (KEY=VALUE, in order;
// a later one wins, as systemd's Environment= lines do). SGLang's EnvBool takes true, 1, yes,
// y and false, 0, no, n in any case; any other value is its default (False).
func (s *Settings) ApplyEnv(env []string) {
	if s.Flavor != "sglang" {
		return
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvSkipZeroDraftExtend+"="); ok {
			switch strings.ToLower(v) {
			case "true", "1", "yes", "y":
				s.SkipZeroDraftExtend = true
			default:
				s.SkipZeroDraftExtend = false
			}
		}
	}
}
