package unit

import (
	"path"
	"regexp"
	"strings"
)

// Engine names.
const (
	SGLang = "sglang"
	VLLM   = "vllm"
)

// DefaultEngine is the engine a service is taken to run when its
// configuration names none (opsbot's services.NAME.engine when unset).
const DefaultEngine = SGLang

// Detection is the engine found in an argv.
type Detection struct {
	// Engine is SGLang or VLLM.
	Engine string
	// Entry names how it is launched: "python -m sglang.launch_server",
	// "sglang serve", "vllm serve", "python -m vllm.entrypoints.openai.api_server".
	Entry string
	// ArgsStart is the index in argv of the first engine argument (after the
	// module or subcommand).
	ArgsStart int
}

var pythonRe = regexp.MustCompile(`^python(\d+(\.\d+)?)?$`)

// Detect finds the engine an argv starts: SGLang (`python[3[.X]] [flags] -m
// sglang.launch_server`, `sglang serve`), vLLM (`vllm serve`, `python -m
// vllm.entrypoints.openai.api_server`), also behind `env [VAR=x]`. Anything else
// is a *Error with CodeNoEngine.
func Detect(argv []string) (Detection, error) {
	i := 0
	if len(argv) > 0 && path.Base(argv[0]) == "env" {
		i = 1
		for i < len(argv) {
			a := argv[i]
			if a == "-u" || a == "--unset" || a == "-C" || a == "--chdir" {
				i += 2
				continue
			}
			if strings.HasPrefix(a, "-") || (strings.Contains(a, "=") && !strings.HasPrefix(a, "=")) {
				i++
				continue
			}
			break
		}
	}
	if i >= len(argv) {
		return Detection{}, noEngine(argv)
	}
	base := path.Base(argv[i])
	switch {
	case base == "vllm" && i+1 < len(argv) && argv[i+1] == "serve":
		return Detection{Engine: VLLM, Entry: "vllm serve", ArgsStart: i + 2}, nil
	case base == "sglang" && i+1 < len(argv) && argv[i+1] == "serve":
		return Detection{Engine: SGLang, Entry: "sglang serve", ArgsStart: i + 2}, nil
	case pythonRe.MatchString(base):
		mod, next := pythonModule(argv, i+1)
		switch mod {
		case "sglang.launch_server":
			return Detection{Engine: SGLang, Entry: "python -m sglang.launch_server", ArgsStart: next}, nil
		case "vllm.entrypoints.openai.api_server":
			return Detection{Engine: VLLM, Entry: "python -m vllm.entrypoints.openai.api_server", ArgsStart: next}, nil
		}
	}
	return Detection{}, noEngine(argv)
}

func noEngine(argv []string) error {
	s := strings.Join(argv, " ")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return refuse(CodeNoEngine, "no inference engine in the command line %q: expected `python3 -m sglang.launch_server`, `vllm serve MODEL` or `python3 -m vllm.entrypoints.openai.api_server`", s)
}

// pythonModule scans python interpreter options from argv[i:] and returns the
// module named by -m and the index after it ("" when there is no -m).
func pythonModule(argv []string, i int) (string, int) {
	const noArg = "bBdEhiIOPqsSuvVx" // options without a value
	for i < len(argv) {
		a := argv[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return "", i
		}
		if strings.HasPrefix(a, "--") { // --check-hash-based-pycs takes a value
			if a == "--check-hash-based-pycs" {
				i += 2
			} else {
				i++
			}
			continue
		}
		// A cluster of short options, e.g. -u, -OO, -um, -msglang.launch_server, -W ignore.
		for k := 1; k < len(a); k++ {
			c := a[k]
			switch {
			case c == 'm':
				if k+1 < len(a) {
					return a[k+1:], i + 1
				}
				if i+1 < len(argv) {
					return argv[i+1], i + 2
				}
				return "", len(argv)
			case c == 'c':
				return "", len(argv)
			case c == 'W' || c == 'X':
				if k+1 == len(a) {
					i++ // value is the next word
				}
				k = len(a)
			case strings.IndexByte(noArg, c) >= 0:
			default:
				return "", i
			}
		}
		i++
	}
	return "", i
}
