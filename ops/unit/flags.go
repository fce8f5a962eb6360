package unit

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// The engine flags `engine set` may change: an allowlist, each with its
// type and range as the engine's own argument parsing checks them, and the
// key its running value is reported under.
//
// SGLang [sgl-project/sglang python/sglang/srt/server_args.py, ServerArgs]:
// --mem-fraction-static is Optional[float], --max-running-requests,
// --chunked-prefill-size and --cuda-graph-max-bs are Optional[int] (argparse
// type=float / type=int: it checks the type, not a range), and
// --disable-cuda-graph is a store_true bool. /server_info returns the server
// args under their dest names (mem_fraction_static, ...). Where argparse
// takes any number of the type, the range here is opsbot's, and says so: a
// memory fraction is above 0 and below 1; a count is at least 1;
// --chunked-prefill-size also takes -1, which its help names as "disabling
// chunked prefill".
//
// vLLM [vllm-project/vllm vllm/engine/arg_utils.py, EngineArgs.add_cli_args,
// with the fields' own checks in vllm/config/cache.py and
// vllm/config/scheduler.py]: --gpu-memory-utilization is CacheConfig's
// `float = Field(default=0.9, gt=0, le=1)` (0 < u <= 1, refused at start
// otherwise); --max-num-seqs is SchedulerConfig's int with ge=1;
// --max-model-len is parsed by human_readable_int ("32k" is 32000, "32K"
// 32768), an int; opsbot writes the plain number. vLLM has no /server_info:
// gpu_memory_utilization is a label of the vllm:cache_config_info gauge on
// /metrics, max_model_len a field of each model on /v1/models, and
// max_num_seqs is reported nowhere over HTTP (its verify step says so).

// FlagKind is the type of an engine flag's value.
type FlagKind int

// The flag kinds.
const (
	KindFloat FlagKind = iota // a decimal number: 0.8
	KindInt                   // a whole number: 16
	KindBool                  // a store_true flag: present (true) or absent (false)
)

// EngineFlag is one flag of the allowlist.
type EngineFlag struct {
	Name   string // the option, "--mem-fraction-static"
	Engine string // SGLang or VLLM
	Kind   FlagKind
	// Min and Max bound the value (inclusive unless MinOpen or MaxOpen);
	// Off, when set, is one more value outside them the engine takes
	// (-1 for --chunked-prefill-size: no chunked prefill).
	Min, Max         float64
	MinOpen, MaxOpen bool
	Off              *int64
	// Report is the key the running engine reports the value under: a
	// /server_info key (SGLang), or for vLLM where ReportedBy says.
	Report string
	// What says in a few words what the flag does, for help.
	What string
	// Counterpart is the other engine's flag for the same thing ("" none).
	Counterpart string
	// EngineBound says whether the range is the engine's own check (true)
	// or opsbot's bound where the engine's parser takes any value (false).
	EngineBound bool
}

var minusOne int64 = -1

// EngineFlags is the allowlist, SGLang's first, in help order.
var EngineFlags = []EngineFlag{
	{Name: "--mem-fraction-static", Engine: SGLang, Kind: KindFloat, Min: 0, Max: 1, MinOpen: true, MaxOpen: true,
		Report: "mem_fraction_static", Counterpart: "--gpu-memory-utilization",
		What: "the share of each GPU's memory for the weights and the KV cache; CUDA graphs come out of the rest"},
	{Name: "--cuda-graph-max-bs", Engine: SGLang, Kind: KindInt, Min: 1, Max: 4096,
		Report: "cuda_graph_max_bs", What: "the largest batch size CUDA graphs are captured for (their memory grows with it)"},
	{Name: "--disable-cuda-graph", Engine: SGLang, Kind: KindBool,
		Report: "disable_cuda_graph", What: "no CUDA graphs (frees their memory; decoding is much slower)"},
	{Name: "--max-running-requests", Engine: SGLang, Kind: KindInt, Min: 1, Max: 65536,
		Report: "max_running_requests", Counterpart: "--max-num-seqs", What: "the most requests running at once (SGLang caps it at 48 with speculation unless it is set)"},
	{Name: "--chunked-prefill-size", Engine: SGLang, Kind: KindInt, Min: 1, Max: 1 << 20, Off: &minusOne,
		Report: "chunked_prefill_size", What: "prompt tokens per prefill chunk; -1 turns chunked prefill off"},
	{Name: "--gpu-memory-utilization", Engine: VLLM, Kind: KindFloat, Min: 0, Max: 1, MinOpen: true, EngineBound: true,
		Report: "gpu_memory_utilization", Counterpart: "--mem-fraction-static", What: "the share of each GPU's memory vLLM may use"},
	{Name: "--max-num-seqs", Engine: VLLM, Kind: KindInt, Min: 1, Max: 65536, EngineBound: true,
		Report: "max_num_seqs", Counterpart: "--max-running-requests", What: "the most sequences in one batch"},
	{Name: "--max-model-len", Engine: VLLM, Kind: KindInt, Min: 1, Max: 1 << 24,
		Report: "max_model_len", What: "the longest context (prompt and output) the engine accepts"},
}

// Word is the flag's name without its dashes, as `engine set` takes it.
func (f EngineFlag) Word() string { return strings.TrimPrefix(f.Name, "--") }

// LookupFlag returns the allowlisted flag named name (with or without its
// dashes, case-insensitive; vLLM's underscores read as dashes).
func LookupFlag(name string) (EngineFlag, bool) {
	w := strings.ToLower(strings.TrimLeft(name, "-"))
	w = strings.ReplaceAll(w, "_", "-")
	for _, f := range EngineFlags {
		if f.Word() == w {
			return f, true
		}
	}
	return EngineFlag{}, false
}

// Range says the flag's accepted values: "above 0 and below 1", "1..4096
// (or -1: off)", "true or false".
func (f EngineFlag) Range() string {
	switch f.Kind {
	case KindBool:
		return "true or false"
	case KindInt:
		s := fmt.Sprintf("%d..%d", int64(f.Min), int64(f.Max))
		if f.Off != nil {
			s += fmt.Sprintf(" (or %d: off)", *f.Off)
		}
		return s
	}
	lo, hi := "at least", "at most"
	if f.MinOpen {
		lo = "above"
	}
	if f.MaxOpen {
		hi = "below"
	}
	return fmt.Sprintf("%s %s and %s %s", lo, fmtNum(f.Min), hi, fmtNum(f.Max))
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

var (
	decimalRE = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$`)
	integerRE = regexp.MustCompile(`^-?[0-9]+$`)
)

// ParseValue checks a value typed for the flag and returns it as opsbot
// writes it in the unit: a plain decimal for a float ("0.8"), digits for an
// int, "true" or "false" for a bool (on/off, yes/no, 1/0 also read). The
// problem names the flag and its range.
func (f EngineFlag) ParseValue(text string) (string, error) {
	s := strings.TrimSpace(text)
	switch f.Kind {
	case KindBool:
		switch strings.ToLower(s) {
		case "true", "on", "yes", "1":
			return "true", nil
		case "false", "off", "no", "0":
			return "false", nil
		}
		return "", fmt.Errorf("%s is a switch: give true or false, not %q", f.Word(), s)
	case KindInt:
		if !integerRE.MatchString(s) || len(s) > 12 {
			return "", fmt.Errorf("%s takes a whole number, %s; got %q", f.Word(), f.Range(), s)
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		if !f.inRange(float64(n)) && (f.Off == nil || n != *f.Off) {
			return "", fmt.Errorf("%s must be %s, got %d%s", f.Word(), f.Range(), n, f.boundNote())
		}
		return strconv.FormatInt(n, 10), nil
	}
	if !decimalRE.MatchString(s) || len(s) > 20 {
		return "", fmt.Errorf("%s takes a decimal number %s (like 0.8); got %q", f.Word(), f.Range(), s)
	}
	v, _ := strconv.ParseFloat(s, 64)
	if !f.inRange(v) {
		return "", fmt.Errorf("%s must be %s, got %s%s", f.Word(), f.Range(), s, f.boundNote())
	}
	return fmtNum(v), nil
}

func (f EngineFlag) boundNote() string {
	if f.EngineBound {
		return " (the engine refuses to start otherwise)"
	}
	return ""
}

func (f EngineFlag) inRange(v float64) bool {
	if math.IsNaN(v) || v < f.Min || v > f.Max {
		return false
	}
	return !(f.MinOpen && v == f.Min) && !(f.MaxOpen && v == f.Max)
}

// Same reports whether two values of the flag are the same number (or
// switch state): "0.80" and "0.8" are. A value that does not read as the
// flag's type is the same only as itself.
func (f EngineFlag) Same(a, b string) bool {
	if a == b {
		return true
	}
	if f.Kind == KindBool {
		return false
	}
	x, errA := pyNumber(a)
	y, errB := pyNumber(b)
	return errA == nil && errB == nil && x == y
}

// pyNumber reads a number the way Python's float() reads an option's value
// (surrounding whitespace, underscores between digits).
func pyNumber(s string) (float64, error) {
	v := strings.TrimSpace(s)
	if strings.Contains(v, "_") && !strings.Contains(v, "__") && !strings.HasPrefix(v, "_") && !strings.HasSuffix(v, "_") {
		v = strings.ReplaceAll(v, "_", "")
	}
	return strconv.ParseFloat(v, 64)
}
