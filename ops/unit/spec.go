package unit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SGLang option names (canonical) that the editor reads or writes.
const (
	FlagAlgorithm   = "--speculative-algorithm"
	FlagSteps       = "--speculative-num-steps"
	FlagTopK        = "--speculative-eagle-topk"
	FlagDraftTokens = "--speculative-num-draft-tokens"
	// Per-load speculation (sgl-project/sglang 015c8726, srt/server_args.py and
	// srt/speculative/adaptive_spec_params.py): a store_true flag, and the path of the
	// JSON file of batch-size slots.
	FlagAdaptive       = "--speculative-adaptive"
	FlagAdaptiveConfig = "--speculative-adaptive-config"
)

// vLLM option names.
const (
	FlagSpecConfig    = "--speculative-config"
	FlagSpecModel     = "--speculative-model"      // before vLLM 0.8.5
	FlagNumSpecTokens = "--num-speculative-tokens" // before vLLM 0.8.5
	keyNumSpecTokens  = "num_speculative_tokens"
	// keyBatchTable is vLLM's per-batch-size K table inside --speculative-config:
	// [[lo, hi, k], ...], each k clamped to num_speculative_tokens.
	keyBatchTable      = "num_speculative_tokens_per_batch_size"
	changeJSONTable    = FlagSpecConfig + "." + keyBatchTable
	keyMethod          = "method"
	changeJSONSpecToks = FlagSpecConfig + "." + keyNumSpecTokens
)

// sglangOptions are SGLang's option strings that share a prefix with the
// speculative flags; argparse resolves abbreviations against all of them, so an
// abbreviation that is ambiguous here is ambiguous for SGLang too.
var sglangOptions = []string{
	FlagAlgorithm, FlagSteps, FlagTopK, FlagDraftTokens,
	"--speculative-draft-model-path", "--speculative-draft-model-revision",
	"--speculative-draft-load-format", "--speculative-draft-attention-backend",
	"--speculative-accept-threshold-single", "--speculative-accept-threshold-acc",
	"--speculative-token-map", "--speculative-attention-mode",
	"--speculative-moe-runner-backend", "--speculative-moe-a2a-backend",
	"--speculative-ngram-min-match-window-size", "--speculative-ngram-max-match-window-size",
	"--speculative-ngram-min-bfs-breadth", "--speculative-ngram-max-bfs-breadth",
	"--speculative-ngram-match-type", "--speculative-ngram-branch-length",
	"--speculative-ngram-capacity",
	FlagAdaptive, FlagAdaptiveConfig,
}

var sglangRead = map[string]bool{FlagAlgorithm: true, FlagSteps: true, FlagTopK: true, FlagDraftTokens: true}

// Spec is the speculative-decoding configuration read from an engine argv.
// Integer fields are 0 when the option is not given.
type Spec struct {
	Engine string // SGLang or VLLM
	// Present reports whether speculative decoding is configured at all
	// (SGLang: --speculative-algorithm; vLLM: --speculative-config with a
	// method/model, or --speculative-model).
	Present bool

	// SGLang.
	Algorithm   string // as written, e.g. "NEXTN"
	Steps       int
	TopK        int
	DraftTokens int

	// vLLM.
	Method               string // "method" (or legacy "model") of the config
	NumSpeculativeTokens int
	Config               string // the --speculative-config JSON as the engine sees it
	BatchTable           string // num_speculative_tokens_per_batch_size as written in Config ("" = none)

	// SGLang per-load speculation: --speculative-adaptive given, and the
	// --speculative-adaptive-config path ("" = none: SGLang's default table).
	Adaptive       bool
	AdaptiveConfig string
	// SkipZeroDraftExtend is SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND
	// as the unit's Environment= sets it (Effective.Spec; false when unset).
	SkipZeroDraftExtend bool

	// Uses lists every speculative option found (SGLang: all known
	// --speculative-* options; vLLM: the options above), in argv order.
	Uses []FlagUse
}

// CanonicalAlgorithm is the algorithm as SGLang reports it (NEXTN is EAGLE).
func (s Spec) CanonicalAlgorithm() string {
	a := strings.ToUpper(s.Algorithm)
	if a == "NEXTN" {
		return "EAGLE"
	}
	return a
}

// DraftSteps is the engine-neutral speculation depth k: SGLang's steps,
// vLLM's num_speculative_tokens.
func (s Spec) DraftSteps() int {
	if s.Engine == VLLM {
		return s.NumSpeculativeTokens
	}
	return s.Steps
}

// FlagUse is one option occurrence in argv.
type FlagUse struct {
	Flag    string // canonical name, e.g. "--speculative-num-steps"
	Written string // as written, e.g. "--speculative-num-step"
	// NameIndex is the argv index of the option word; ValueIndex the index of
	// the word holding the value (equal to NameIndex for --flag=value, where
	// the value starts at byte ValueOffset of that word).
	NameIndex, ValueIndex, ValueOffset int
	Value                              string
}

// Eq reports whether the value was written in --flag=value form.
func (u FlagUse) Eq() bool { return u.NameIndex == u.ValueIndex }

// ReadSpec detects the engine in argv and reads its speculative settings.
// Errors: *Error with CodeNoEngine, or CodeInvalid/CodeUnsupported when the
// settings are malformed (an ambiguous abbreviation, a missing value, bad JSON,
// a value set through an environment variable).
func ReadSpec(argv []string) (Spec, error) {
	d, err := Detect(argv)
	if err != nil {
		return Spec{}, err
	}
	return readSpec(argv, d)
}

func readSpec(argv []string, d Detection) (Spec, error) {
	if d.Engine == VLLM {
		return readVLLM(argv, d.ArgsStart)
	}
	return readSGLang(argv, d.ArgsStart)
}

// resolveOption resolves an option word like argparse with allow_abbrev: an
// exact match wins, otherwise the unique option it is a prefix of.
func resolveOption(name string, options []string) (string, []string) {
	var cands []string
	for _, o := range options {
		if o == name {
			return o, nil
		}
		if strings.HasPrefix(o, name) {
			cands = append(cands, o)
		}
	}
	if len(cands) == 1 {
		return cands[0], nil
	}
	return "", cands
}

// takesValue reports whether argparse would accept w as an option's value.
func takesValue(w string) bool {
	if !strings.HasPrefix(w, "-") {
		return true
	}
	_, err := strconv.ParseFloat(w, 64)
	return err == nil && len(w) > 1
}

func optionValue(argv []string, i int, written, canon string) (FlagUse, int, error) {
	a := argv[i]
	if eq := strings.IndexByte(a, '='); eq >= 0 {
		return FlagUse{Flag: canon, Written: a[:eq], NameIndex: i, ValueIndex: i, ValueOffset: eq + 1, Value: a[eq+1:]}, i + 1, nil
	}
	if i+1 >= len(argv) || !takesValue(argv[i+1]) {
		return FlagUse{}, 0, refuse(CodeInvalid, "%s (for %s) expects one argument: the engine would refuse to start", written, canon)
	}
	return FlagUse{Flag: canon, Written: written, NameIndex: i, ValueIndex: i + 1, Value: argv[i+1]}, i + 2, nil
}

func readSGLang(argv []string, start int) (Spec, error) {
	s := Spec{Engine: SGLang}
	for i := start; i < len(argv); {
		a := argv[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "--") || len(a) < 3 {
			i++
			continue
		}
		name := a
		if eq := strings.IndexByte(a, '='); eq >= 0 {
			name = a[:eq]
		}
		canon, cands := resolveOption(name, sglangOptions)
		if canon == "" {
			for _, c := range cands {
				if sglangRead[c] {
					return s, refuse(CodeInvalid, "ambiguous option %s could match %s: SGLang refuses to start; write the full option name", name, strings.Join(cands, ", "))
				}
			}
			i++
			continue
		}
		if canon == FlagAdaptive {
			// store_true: no value (argparse refuses --speculative-adaptive=x).
			if strings.Contains(a, "=") {
				return s, refuse(CodeInvalid, "%s takes no value: SGLang refuses to start", name)
			}
			s.Uses = append(s.Uses, FlagUse{Flag: canon, Written: name, NameIndex: i, ValueIndex: i, ValueOffset: len(a)})
			s.Adaptive = true
			i++
			continue
		}
		// Every other --speculative-* option takes one value.
		use, next, err := optionValue(argv, i, name, canon)
		if err != nil {
			return s, err
		}
		i = next
		s.Uses = append(s.Uses, use)
		if canon == FlagAdaptiveConfig {
			s.AdaptiveConfig = use.Value
		}
		if !sglangRead[canon] {
			continue
		}
		if canon == FlagAlgorithm {
			s.Algorithm = use.Value
			continue
		}
		n, err := pyInt(use)
		if err != nil {
			return s, err
		}
		switch canon {
		case FlagSteps:
			s.Steps = n
		case FlagTopK:
			s.TopK = n
		case FlagDraftTokens:
			s.DraftTokens = n
		}
	}
	s.Present = s.Algorithm != ""
	return s, nil
}

// pyInt parses an option value the way Python's int() does (surrounding
// whitespace, a sign, underscores between digits).
func pyInt(u FlagUse) (int, error) {
	v := strings.TrimSpace(u.Value)
	if strings.ContainsAny(v, "$%") {
		return 0, refuse(CodeUnsupported, "%s is set indirectly (%q): change it where it is defined, or write a number in the unit", u.Flag, u.Value)
	}
	clean := v
	if strings.Contains(v, "_") && !strings.HasPrefix(strings.TrimLeft(v, "+-"), "_") && !strings.HasSuffix(v, "_") && !strings.Contains(v, "__") {
		clean = strings.ReplaceAll(v, "_", "")
	}
	n, err := strconv.Atoi(clean)
	if err != nil || clean == "" {
		return 0, refuse(CodeInvalid, "%s has a value that is not an integer: %q; the engine would refuse to start", u.Flag, u.Value)
	}
	return n, nil
}

var vllmOptions = []string{FlagSpecConfig, FlagSpecModel, FlagNumSpecTokens}

func readVLLM(argv []string, start int) (Spec, error) {
	s := Spec{Engine: VLLM}
	for i := start; i < len(argv); {
		a := argv[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "--") {
			i++
			continue
		}
		name := a
		if eq := strings.IndexByte(a, '='); eq >= 0 {
			name = a[:eq]
		}
		// vLLM accepts underscores for dashes in option names.
		norm := "--" + strings.ReplaceAll(name[2:], "_", "-")
		canon := ""
		for _, o := range vllmOptions {
			if norm == o {
				canon = o
			}
		}
		if canon == "" {
			i++
			continue
		}
		use, next, err := optionValue(argv, i, name, canon)
		if err != nil {
			return s, err
		}
		i = next
		s.Uses = append(s.Uses, use)
		switch canon {
		case FlagSpecConfig:
			s.Config = use.Value
			m, n, err := parseSpecConfig(use.Value)
			if err != nil {
				return s, err
			}
			s.Method, s.NumSpeculativeTokens = m, n
			s.BatchTable = ""
			if vs, ve, _, found, err := jsonKeyValue(use.Value, keyBatchTable); err == nil && found {
				s.BatchTable = use.Value[vs:ve]
			}
		case FlagSpecModel:
			if s.Method == "" {
				s.Method = use.Value
			}
		case FlagNumSpecTokens:
			n, err := pyInt(use)
			if err != nil {
				return s, err
			}
			s.NumSpeculativeTokens = n
		}
	}
	s.Present = s.Method != ""
	return s, nil
}

// parseSpecConfig reads method (or the older "model") and
// num_speculative_tokens from a --speculative-config JSON object.
func parseSpecConfig(js string) (string, int, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return "", 0, refuse(CodeInvalid, "--speculative-config is not a JSON object (%v): vLLM would refuse to start", errOr(err, "null"))
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", 0, refuse(CodeInvalid, "--speculative-config has text after the JSON object: vLLM would refuse to start")
	}
	var method string
	for _, k := range []string{"model", keyMethod} {
		if raw, ok := m[k]; ok {
			var v any
			if err := json.Unmarshal(raw, &v); err == nil {
				if str, ok := v.(string); ok && str != "" {
					method = str
				}
			}
		}
	}
	n := 0
	if raw, ok := m[keyNumSpecTokens]; ok {
		raw = bytes.TrimSpace(raw)
		v, err := strconv.Atoi(string(raw))
		if err != nil {
			return "", 0, refuse(CodeInvalid, "--speculative-config num_speculative_tokens is %s, not an integer", raw)
		}
		n = v
	}
	return method, n, nil
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// jsonKeyValue locates the value of a top-level key in a JSON object:
// the byte range of its literal, the offset of the object's closing brace,
// and whether the key exists.
func jsonKeyValue(js, key string) (valStart, valEnd, closeBrace int, found bool, err error) {
	dec := json.NewDecoder(strings.NewReader(js))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return 0, 0, 0, false, fmt.Errorf("not a JSON object")
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return 0, 0, 0, false, err
		}
		k, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return 0, 0, 0, false, err
		}
		end := int(dec.InputOffset())
		if k == key { // the last duplicate wins, as in Python's json
			found, valStart, valEnd = true, end-len(raw), end
		}
	}
	if _, err := dec.Token(); err != nil {
		return 0, 0, 0, false, err
	}
	closeBrace = int(dec.InputOffset()) - 1
	return valStart, valEnd, closeBrace, found, nil
}

// jsonKeySpan is the byte range of a top-level key of a JSON object with its
// value and one comma beside it (the one before it, or after it for the first
// key) with that comma's spacing: what to cut to remove the key.
func jsonKeySpan(js, key string) (int, int, bool) {
	vs, ve, _, found, err := jsonKeyValue(js, key)
	if err != nil || !found {
		return 0, 0, false
	}
	ks := strings.LastIndex(js[:vs], `"`+key+`"`)
	if ks < 0 {
		return 0, 0, false
	}
	b := ks
	for b > 0 && isWS(js[b-1]) {
		b--
	}
	if b > 0 && js[b-1] == ',' {
		return b - 1, ve, true
	}
	e := ve
	for e < len(js) && isWS(js[e]) {
		e++
	}
	if e < len(js) && js[e] == ',' {
		e++
		for e < len(js) && isWS(js[e]) {
			e++
		}
		return ks, e, true
	}
	return ks, ve, true
}
