package unit

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseUnit(t *testing.T) {
	text := "\uFEFF# comment\n; other comment\n[Unit]\nDescription = Hello  world \n\n" +
		"[Service]\r\nExecStart=/bin/a \\\n# ignored comment\n; ignored too\n   b\\\\\nEnvironment=\nEnvironment=A=1\n" +
		"NoEquals\nKey=value \\\n"
	u, err := Parse("x.service", text)
	if err != nil {
		t.Fatal(err)
	}
	type kv struct{ sec, key, val string }
	var got []kv
	for _, e := range u.Entries {
		got = append(got, kv{e.Section, e.Key, e.Value})
	}
	want := []kv{
		{"Unit", "Description", "Hello  world"},
		{"Service", "ExecStart", `/bin/a     b\\`},
		{"Service", "Environment", ""},
		{"Service", "Environment", "A=1"},
		{"Service", "Key", "value"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries:\n got %q\nwant %q", got, want)
	}
	if len(u.Warnings) != 1 || !strings.Contains(u.Warnings[0], "missing '='") {
		t.Errorf("warnings = %q", u.Warnings)
	}
	// Every value byte maps back to the same byte in the text, except the
	// spaces that replaced continuation backslashes.
	for _, e := range u.Entries {
		for i := 0; i < len(e.Value); i++ {
			c := text[e.TextPos(i)]
			if c != e.Value[i] && !(e.Value[i] == ' ' && c == '\\') {
				t.Errorf("%s: value byte %d %q maps to %q", e.Key, i, e.Value[i], c)
			}
		}
	}
	ex := u.Lookup("Service", "ExecStart")[0]
	if ex.Line != 7 || text[ex.Span.Start:ex.Span.End] != "ExecStart=/bin/a \\\n# ignored comment\n; ignored too\n   b\\\\" {
		t.Errorf("ExecStart line %d span %q", ex.Line, text[ex.Span.Start:ex.Span.End])
	}
	if v, ok := u.Value("Service", "Environment"); !ok || v != "A=1" {
		t.Errorf("Value = %q %v", v, ok)
	}
}

func TestParseUnitErrors(t *testing.T) {
	for _, text := range []string{"[Service\nExecStart=/bin/x\n", "[Se]rvice]\n"} {
		_, err := Parse("", text)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Line != 1 {
			t.Errorf("Parse(%q) = %v, want *SyntaxError on line 1", text, err)
		}
	}
	u, err := Parse("", "A=1\n")
	if err != nil || len(u.Entries) != 0 || len(u.Warnings) != 1 {
		t.Errorf("assignment outside section: %v %+v", err, u)
	}
}

func TestParseCommandLine(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		argv  [][]string
		check func(t *testing.T, c []Command)
	}{
		{name: "plain", in: "/usr/bin/python3 -m sglang.launch_server --tp 4", argv: [][]string{{"/usr/bin/python3", "-m", "sglang.launch_server", "--tp", "4"}}},
		{name: "double quotes", in: `/bin/echo "a b"  c`, argv: [][]string{{"/bin/echo", "a b", "c"}}},
		{name: "single quotes keep double", in: `/bin/x '{"k": 1}'`, argv: [][]string{{"/bin/x", `{"k": 1}`}}},
		{name: "quote inside word", in: `/bin/x --a="b c"d`, argv: [][]string{{"/bin/x", "--a=b cd"}}},
		{name: "empty quoted", in: `/bin/x "" ''`, argv: [][]string{{"/bin/x", "", ""}}},
		{name: "C escapes outside and inside quotes", in: `/bin/x a\tb "c\"d" 'e\'f' \x41\101\u00e9\s`, argv: [][]string{{"/bin/x", "a\tb", `c"d`, "e'f", "AAé "}}},
		{name: "dollar", in: `/bin/x $$HOME ${A} $B pre${C}post cost$$5`, argv: [][]string{{"/bin/x", "$HOME", "${A}", "$B", "pre${C}post", "cost$5"}},
			check: func(t *testing.T, c []Command) {
				a := c[0].Args
				if len(a[1].Env) != 0 || !slices.Equal(a[2].Env, []EnvRef{{Name: "A"}}) ||
					!slices.Equal(a[3].Env, []EnvRef{{Name: "B", Split: true}}) || !slices.Equal(a[4].Env, []EnvRef{{Name: "C"}}) {
					t.Errorf("env refs: %+v %+v %+v %+v", a[1].Env, a[2].Env, a[3].Env, a[4].Env)
				}
			}},
		{name: "percent", in: `/bin/x 100%% %i %h/x '%%n'`, argv: [][]string{{"/bin/x", "100%", "%i", "%h/x", "%n"}},
			check: func(t *testing.T, c []Command) {
				a := c[0].Args
				if len(a[1].Specifiers) != 0 || !slices.Equal(a[2].Specifiers, []string{"%i"}) || len(a[4].Specifiers) != 0 {
					t.Errorf("specifiers: %v %v %v", a[1].Specifiers, a[2].Specifiers, a[4].Specifiers)
				}
			}},
		{name: "specifier after unescape", in: `/bin/x \x25n`, argv: [][]string{{"/bin/x", "%n"}},
			check: func(t *testing.T, c []Command) {
				if !slices.Equal(c[0].Args[1].Specifiers, []string{"%n"}) {
					t.Errorf("specifiers %v", c[0].Args[1].Specifiers)
				}
			}},
		{name: "prefixes", in: `-@+/usr/bin/python3 python -m x`, argv: [][]string{{"python", "-m", "x"}},
			check: func(t *testing.T, c []Command) {
				if !c[0].IgnoreFailure || !c[0].SeparateArgv0 || !c[0].Privileged || c[0].Path != "/usr/bin/python3" || c[0].Prefix != "-@+" {
					t.Errorf("command %+v", c[0])
				}
			}},
		{name: "double bang", in: `!!/bin/x a`, argv: [][]string{{"/bin/x", "a"}},
			check: func(t *testing.T, c []Command) {
				if !c[0].AmbientMagic || c[0].NoSetUID {
					t.Errorf("!! flags %+v", c[0])
				}
			}},
		{name: "colon disables env", in: `:/bin/x $$A ${B}`, argv: [][]string{{"/bin/x", "$$A", "${B}"}},
			check: func(t *testing.T, c []Command) {
				if !c[0].NoEnvExpand || len(c[0].Args[2].Env) != 0 {
					t.Errorf("colon: %+v", c[0])
				}
			}},
		{name: "semicolon separates", in: `/bin/a x ; /bin/b \; ";" y;`, argv: [][]string{{"/bin/a", "x"}, {"/bin/b", ";", ";", "y;"}}},
		{name: "relative name", in: `python3 -V`, argv: [][]string{{"python3", "-V"}}},
		// systemd resolves specifiers before it checks the path: %h/... is absolute.
		{name: "home specifier path", in: `%h/venv/bin/python3 -m sglang.launch_server`, argv: [][]string{{"%h/venv/bin/python3", "-m", "sglang.launch_server"}},
			check: func(t *testing.T, c []Command) {
				if c[0].Path != "%h/venv/bin/python3" || !slices.Equal(c[0].Args[0].Specifiers, []string{"%h"}) {
					t.Errorf("command %+v", c[0])
				}
			}},
		{name: "state dir specifier path", in: `%S/engine/run --x`, argv: [][]string{{"%S/engine/run", "--x"}}},
		{name: "empty", in: "   ", argv: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmds, err := ParseCommandLine(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for _, c := range cmds {
				got = append(got, c.Argv())
			}
			if !slices.EqualFunc(got, tt.argv, slices.Equal) {
				t.Fatalf("argv\n got %q\nwant %q", got, tt.argv)
			}
			if tt.check != nil {
				tt.check(t, cmds)
			}
		})
	}
}

func TestParseCommandLineErrors(t *testing.T) {
	for _, in := range []string{
		`/bin/x "unterminated`, `/bin/x 'a`, `/bin/x \q`, `/bin/x \x4`, `/bin/x \x00`, `/bin/x \000`,
		`/bin/x 100%`, `/bin/x %Z`, `bin/x`, `%n/bin/x`, `%hx/bin/x`, `/bin/`, `@/bin/x`, `- `, `"/bin/x\ty"`, `/bin/x a\`,
	} {
		_, err := ParseCommandLine(in)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("ParseCommandLine(%q) = %v, want *SyntaxError", in, err)
		}
	}
}

func TestArgSpans(t *testing.T) {
	text := "[Service]\nExecStart=/bin/x \\\n  # comment\n  --cfg '{\"n\":2}' \"a\\x41\"\n"
	u, err := Parse("", text)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := u.Lookup("Service", "ExecStart")[0].ExecCommands()
	if err != nil {
		t.Fatal(err)
	}
	a := cmds[0].Args
	if got := text[a[2].Span.Start:a[2].Span.End]; got != `'{"n":2}'` {
		t.Errorf("span of arg 2 = %q", got)
	}
	if got := text[a[3].Span.Start:a[3].Span.End]; got != `"a\x41"` {
		t.Errorf("span of arg 3 = %q", got)
	}
	// The "A" from \x41 maps to the four escape bytes.
	if sp := a[3].ValueSpan(1, 2); text[sp.Start:sp.End] != `\x41` {
		t.Errorf("value span = %q", text[sp.Start:sp.End])
	}
	if sp := a[2].ValueSpan(5, 6); text[sp.Start:sp.End] != "2" {
		t.Errorf("json digit span = %q", text[sp.Start:sp.End])
	}
}

func TestQuoteRoundTrip(t *testing.T) {
	args := []string{"plain", "", "a b", `q"uo'te`, "$HOME", "100%n", ";", "tab\tnl\n", "back\\slash", "é\x01\xff", "--x=1"}
	var words []string
	for _, a := range args {
		words = append(words, Quote(a))
	}
	cmds, err := ParseCommandLine("/bin/x " + strings.Join(words, " "))
	if err != nil {
		t.Fatal(err)
	}
	if got := cmds[0].Argv()[1:]; !slices.Equal(got, args) {
		t.Errorf("round trip\n got %q\nwant %q", got, args)
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		argv   string
		engine string
		start  int
	}{
		{"python3 -m sglang.launch_server --tp 4", SGLang, 3},
		{"/opt/venv/bin/python3.11 -u -X dev -W ignore -m sglang.launch_server --tp 4", SGLang, 8},
		{"python -msglang.launch_server", SGLang, 2},
		{"python3 -um sglang.launch_server", SGLang, 3},
		{"/usr/bin/env CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server", SGLang, 5},
		{"sglang serve --model-path m", SGLang, 2},
		{"/opt/vllm/bin/vllm serve Qwen/Qwen3 --port 1", VLLM, 2},
		{"python3 -m vllm.entrypoints.openai.api_server --model m", VLLM, 3},
		{"python3 -m http.server", "", 0},
		{"python3 /opt/launch.py", "", 0},
		{"pythonista -m sglang.launch_server", "", 0},
		{"vllm bench", "", 0},
		{"python3 -c import -m sglang.launch_server", "", 0},
	}
	for _, tt := range tests {
		d, err := Detect(strings.Fields(tt.argv))
		if tt.engine == "" {
			if !errors.Is(err, ErrNoEngine) {
				t.Errorf("Detect(%q) = %+v, %v; want ErrNoEngine", tt.argv, d, err)
			}
			var ue *Error
			if !errors.As(err, &ue) || ue.Code != CodeNoEngine {
				t.Errorf("Detect(%q): not a *Error with CodeNoEngine: %v", tt.argv, err)
			}
			continue
		}
		if err != nil || d.Engine != tt.engine || d.ArgsStart != tt.start {
			t.Errorf("Detect(%q) = %+v, %v; want %s at %d", tt.argv, d, err, tt.engine, tt.start)
		}
	}
}

func TestReadSpec(t *testing.T) {
	tests := []struct {
		argv string
		want Spec
		code Code
	}{
		{argv: "python3 -m sglang.launch_server --speculative-algo NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
			want: Spec{Engine: SGLang, Present: true, Algorithm: "NEXTN", Steps: 3, TopK: 1, DraftTokens: 4}},
		{argv: "python3 -m sglang.launch_server --speculative-algorithm=EAGLE3 --speculative-num-s=5 --speculative-e 2 --speculative-num-d=9",
			want: Spec{Engine: SGLang, Present: true, Algorithm: "EAGLE3", Steps: 5, TopK: 2, DraftTokens: 9}},
		{argv: "python3 -m sglang.launch_server --speculative-num-steps 2 --speculative-num-steps 6 --speculative-algo EAGLE",
			want: Spec{Engine: SGLang, Present: true, Algorithm: "EAGLE", Steps: 6}},
		{argv: "python3 -m sglang.launch_server --speculative-num-steps 3",
			want: Spec{Engine: SGLang, Steps: 3}},
		{argv: "python3 -m sglang.launch_server --speculative-draft /m --speculative-algo EAGLE",
			want: Spec{Engine: SGLang, Present: true, Algorithm: "EAGLE"}},
		{argv: "python3 -m sglang.launch_server --speculative-num 3", code: CodeInvalid},
		{argv: "python3 -m sglang.launch_server --speculative-a EAGLE", code: CodeInvalid},
		{argv: "python3 -m sglang.launch_server --speculative-num-steps", code: CodeInvalid},
		{argv: "python3 -m sglang.launch_server --speculative-num-steps --tp", code: CodeInvalid},
		{argv: "python3 -m sglang.launch_server --speculative-num-steps three", code: CodeInvalid},
		{argv: "python3 -m sglang.launch_server --speculative-num-steps ${STEPS}", code: CodeUnsupported},
		{argv: `vllm serve m --speculative-config {"method":"mtp","num_speculative_tokens":2}`,
			want: Spec{Engine: VLLM, Present: true, Method: "mtp", NumSpeculativeTokens: 2, Config: `{"method":"mtp","num_speculative_tokens":2}`}},
		{argv: `vllm serve m --speculative_config={"model":"/d","num_speculative_tokens":4}`,
			want: Spec{Engine: VLLM, Present: true, Method: "/d", NumSpeculativeTokens: 4, Config: `{"model":"/d","num_speculative_tokens":4}`}},
		{argv: `vllm serve m --speculative-model /d --num-speculative-tokens 5`,
			want: Spec{Engine: VLLM, Present: true, Method: "/d", NumSpeculativeTokens: 5}},
		{argv: `vllm serve m --port 1`, want: Spec{Engine: VLLM}},
		{argv: `vllm serve m --speculative-config {bad`, code: CodeInvalid},
		{argv: `vllm serve m --speculative-config {"num_speculative_tokens":1.5}`, code: CodeInvalid},
		{argv: `bash -c true`, code: CodeNoEngine},
	}
	for _, tt := range tests {
		got, err := ReadSpec(strings.Fields(tt.argv))
		if tt.code != 0 {
			var ue *Error
			if !errors.As(err, &ue) || ue.Code != tt.code {
				t.Errorf("ReadSpec(%q) error = %v, want code %v", tt.argv, err, tt.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("ReadSpec(%q): %v", tt.argv, err)
			continue
		}
		got.Uses = nil
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ReadSpec(%q)\n got %+v\nwant %+v", tt.argv, got, tt.want)
		}
	}
}

func TestReadSpecUses(t *testing.T) {
	s, err := ReadSpec([]string{"python3", "-m", "sglang.launch_server", "--speculative-num-step=4", "--speculative-algo", "EAGLE"})
	if err != nil {
		t.Fatal(err)
	}
	want := []FlagUse{
		{Flag: FlagSteps, Written: "--speculative-num-step", NameIndex: 3, ValueIndex: 3, ValueOffset: 23, Value: "4"},
		{Flag: FlagAlgorithm, Written: "--speculative-algo", NameIndex: 4, ValueIndex: 5, Value: "EAGLE"},
	}
	if !slices.Equal(s.Uses, want) {
		t.Errorf("uses\n got %+v\nwant %+v", s.Uses, want)
	}
	if !s.Uses[0].Eq() || s.Uses[1].Eq() || s.CanonicalAlgorithm() != "EAGLE" {
		t.Errorf("Eq/CanonicalAlgorithm wrong")
	}
}
