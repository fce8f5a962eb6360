package unit

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/internal/testkit"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/edit/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSetStepsIncident(t *testing.T) {
	before := readTestdata(t, "sglang-incident.service")
	e, err := SetSteps(before, 10, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(before, "--speculative-num-steps 3 ", "--speculative-num-steps 10 ", 1)
	want = strings.Replace(want, "--speculative-num-draft-tokens 4 ", "--speculative-num-draft-tokens 11 ", 1)
	if e.After != want {
		t.Errorf("after:\n%s", e.After)
	}
	wantCh := []Change{{FlagSteps, "3", "10"}, {FlagDraftTokens, "4", "11"}}
	if !slices.Equal(e.Changed, wantCh) {
		t.Errorf("changes %+v", e.Changed)
	}
	s := e.SpecAfter
	if s.Steps != 10 || s.TopK != 1 || s.DraftTokens != 11 || s.Algorithm != "NEXTN" {
		t.Errorf("spec after %+v", s)
	}
	// Only two argv words differ.
	diff := 0
	for i := range e.ArgvBefore {
		if e.ArgvBefore[i] != e.ArgvAfter[i] {
			diff++
		}
	}
	if diff != 2 || len(e.ArgvBefore) != len(e.ArgvAfter) {
		t.Errorf("argv diff count %d", diff)
	}
	// Same steps again: nothing to change.
	again, err := SetSteps(e.After, 10, Options{})
	if err != nil || again.After != e.After || len(again.Changed) != 0 || again.Diff != "" {
		t.Errorf("idempotent edit: %v %+v", err, again.Changed)
	}
}

func TestSetStepsStyles(t *testing.T) {
	tests := []struct {
		name, in, want string
		n              int
		opts           Options
	}{
		{name: "inline add after last option",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --port 1\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 --port 1\n", n: 4},
		{name: "eq form add",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algorithm=EAGLE --speculative-num-steps=2\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algorithm=EAGLE --speculative-num-steps=4 --speculative-eagle-topk=1 --speculative-num-draft-tokens=5\n", n: 4},
		{name: "crlf continuation lines",
			in:   "[Service]\r\nExecStart=/bin/python3 -m sglang.launch_server \\\r\n  --speculative-algo EAGLE \\\r\n  --speculative-num-steps 2 \\\r\n  --port 1\r\n",
			want: "[Service]\r\nExecStart=/bin/python3 -m sglang.launch_server \\\r\n  --speculative-algo EAGLE \\\r\n  --speculative-num-steps 6 \\\r\n  --speculative-eagle-topk 1 \\\r\n  --speculative-num-draft-tokens 7 \\\r\n  --port 1\r\n", n: 6},
		{name: "last line of the command",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server \\\n\t--speculative-algo EAGLE\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server \\\n\t--speculative-algo EAGLE \\\n\t--speculative-num-steps 2 \\\n\t--speculative-eagle-topk 1 \\\n\t--speculative-num-draft-tokens 3\n", n: 2},
		{name: "quoted values keep their quotes",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo \"EAGLE\" --speculative-num-steps \"3\" --speculative-eagle-topk '1' --speculative-num-draft-tokens=\"4\"\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo \"EAGLE\" --speculative-num-steps \"12\" --speculative-eagle-topk '1' --speculative-num-draft-tokens=\"13\"\n", n: 12},
		{name: "repeated option: every occurrence",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-num-steps 1 --speculative-algo EAGLE --speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-num-steps 5 --speculative-algo EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6\n", n: 5},
		{name: "argv0 prefix and separate argv0",
			in:   "[Service]\nExecStart=-@/opt/py/bin/python3.12 python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 3\n",
			want: "[Service]\nExecStart=-@/opt/py/bin/python3.12 python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2\n", n: 1},
		{name: "topk > 1 keeps draft tokens",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 2 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16\n", n: 2},
		{name: "topk > 1 explicit draft tokens",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 3 --speculative-eagle-topk 2\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 4 --speculative-eagle-topk 2 --speculative-num-draft-tokens 8\n", n: 4, opts: Options{DraftTokens: 8}},
		{name: "topk set with draft tokens",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8\n", n: 3, opts: Options{TopK: 4, DraftTokens: 8}},
		{name: "topk back to 1 forces draft tokens",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6\n", n: 5, opts: Options{TopK: 1}},
		{name: "topk added when missing",
			in:   "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 3\n",
			want: "[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 5\n", n: 2, opts: Options{TopK: 2, DraftTokens: 5}},
		{name: "vllm escaped json keeps escapes",
			in:   "[Service]\nExecStart=vllm serve m --speculative-config \"{\\\"method\\\":\\\"mtp\\\",\\\"num_speculative_tokens\\\":\\x32}\"\n",
			want: "[Service]\nExecStart=vllm serve m --speculative-config \"{\\\"method\\\":\\\"mtp\\\",\\\"num_speculative_tokens\\\":7}\"\n", n: 7},
		{name: "vllm add key in double quotes",
			in:   "[Service]\nExecStart=vllm serve m --speculative-config \"{\\\"method\\\":\\\"mtp\\\"}\"\n",
			want: "[Service]\nExecStart=vllm serve m --speculative-config \"{\\\"method\\\":\\\"mtp\\\",\\\"num_speculative_tokens\\\":3}\"\n", n: 3},
		{name: "vllm legacy flags",
			in:   "[Service]\nExecStart=vllm serve m --speculative-model /d --num-speculative-tokens=5\n",
			want: "[Service]\nExecStart=vllm serve m --speculative-model /d --num-speculative-tokens=3\n", n: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := SetSteps(tt.in, tt.n, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if e.After != tt.want {
				t.Errorf("after\n got %q\nwant %q", e.After, tt.want)
			}
		})
	}
}

func TestSetStepsRefusals(t *testing.T) {
	sg := func(args string) string {
		return "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m " + args + "\n"
	}
	tests := []struct {
		name, in string
		n        int
		opts     Options
		code     Code
		sentinel error
		msg      string
	}{
		{"no speculation", sg("--tp 4"), 3, Options{}, CodeNoSpeculation, ErrNoSpeculation, "refusing to invent speculative decoding: the unit has no --speculative-algorithm"},
		{"steps only, no algorithm", sg("--speculative-num-steps 3"), 3, Options{}, CodeNoSpeculation, ErrNoSpeculation, "no --speculative-algorithm"},
		{"vllm no speculation", "[Service]\nExecStart=vllm serve m\n", 3, Options{}, CodeNoSpeculation, ErrNoSpeculation, "--speculative-config"},
		{"negative", sg("--speculative-algo EAGLE"), -1, Options{}, CodeOutOfRange, ErrOutOfRange, "0..16 (0: speculative decoding off)"},
		{"too many", sg("--speculative-algo EAGLE"), 17, Options{}, CodeOutOfRange, ErrOutOfRange, "0..16"},
		{"custom max", sg("--speculative-algo EAGLE"), 9, Options{MaxSteps: 8}, CodeOutOfRange, ErrOutOfRange, "0..8"},
		{"zero with a topk", sg("--speculative-algo EAGLE"), 0, Options{TopK: 2}, CodeRejected, ErrRejected, "speculative decoding off"},
		{"zero with an adaptive file", sg("--speculative-algo EAGLE"), 0, Options{AdaptiveConfig: "/etc/a.json"}, CodeRejected, ErrRejected, "speculative decoding off"},
		{"zero with an unknown speculative option", sg("--speculative-algo EAGLE --speculative-dflash-block 8"), 0, Options{}, CodeUnsupported, ErrUnsupported, "--speculative-dflash-block is a speculative option opsbot does not know"},
		{"zero with a value missing", sg("--speculative-algo EAGLE --speculative-draft"), 0, Options{}, CodeInvalid, ErrInvalid, "expects one argument"},
		{"default table with a file", sg("--speculative-algo EAGLE"), 3, Options{AdaptiveDefault: true, AdaptiveConfig: "/etc/a.json"}, CodeInvalid, ErrInvalid, "two tables"},
		{"default table on vllm", "[Service]\nExecStart=vllm serve m --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'\n", 3, Options{AdaptiveDefault: true}, CodeUnsupported, ErrUnsupported, "SGLang's"},
		{"no ExecStart", "[Service]\nType=simple\n", 3, Options{}, CodeNoExecStart, ErrNoExecStart, "no ExecStart"},
		{"reset ExecStart", "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server\nExecStart=\n", 3, Options{}, CodeNoExecStart, ErrNoExecStart, "no ExecStart"},
		{"two engines", "[Service]\nType=oneshot\nExecStart=/usr/bin/python3 -m sglang.launch_server\nExecStart=vllm serve m\n", 3, Options{}, CodeAmbiguous, ErrAmbiguous, "ambiguous"},
		{"unknown engine", "[Service]\nExecStart=/usr/bin/llama-server -m x\n", 3, Options{}, CodeNoEngine, ErrNoEngine, "no inference engine"},
		{"ngram", sg("--speculative-algorithm NGRAM"), 3, Options{}, CodeUnsupported, ErrUnsupported, "NGRAM"},
		{"env steps", sg("--speculative-algo EAGLE --speculative-num-steps ${STEPS}"), 3, Options{}, CodeUnsupported, ErrUnsupported, "indirectly"},
		{"ambiguous abbreviation", sg("--speculative-algo EAGLE --speculative-num 3"), 3, Options{}, CodeInvalid, ErrInvalid, "ambiguous option --speculative-num"},
		{"topk>1 without draft tokens", sg("--speculative-algo EAGLE --speculative-eagle-topk 4"), 3, Options{}, CodeRejected, ErrRejected, "not set"},
		{"draft tokens too many for tree", sg("--speculative-algo EAGLE --speculative-num-steps 3 --speculative-eagle-topk 2 --speculative-num-draft-tokens 9"), 1, Options{}, CodeRejected, ErrRejected, "between 2 and 3"},
		{"topk 1 conflicting draft", sg("--speculative-algo EAGLE"), 3, Options{DraftTokens: 8}, CodeRejected, ErrRejected, "steps+1 = 4"},
		{"vllm topk", "[Service]\nExecStart=vllm serve m --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'\n", 3, Options{TopK: 2}, CodeUnsupported, ErrUnsupported, "no topk"},
		{"topk 2 draft beyond tree", sg("--speculative-algo EAGLE --speculative-num-steps 3"), 2, Options{TopK: 2, DraftTokens: 8}, CodeRejected, ErrRejected, "between 2 and 7"},
		{"topk 0", sg("--speculative-algo EAGLE --speculative-eagle-topk 0"), 3, Options{}, CodeRejected, ErrRejected, "at least 1"},
		{"bad json", "[Service]\nExecStart=vllm serve m --speculative-config '{\"method\":'\n", 3, Options{}, CodeInvalid, ErrInvalid, "JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := SetSteps(tt.in, tt.n, tt.opts)
			var ue *Error
			if !errors.As(err, &ue) {
				t.Fatalf("SetSteps = %+v, %v; want *Error", e, err)
			}
			if ue.Code != tt.code || !errors.Is(err, tt.sentinel) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v (code %v), want code %v containing %q", err, ue.Code, tt.code, tt.msg)
			}
			for _, other := range []error{ErrNoExecStart, ErrAmbiguous, ErrNoEngine, ErrNoSpeculation, ErrOutOfRange, ErrRejected, ErrUnsupported, ErrInvalid} {
				if other != tt.sentinel && errors.Is(err, other) {
					t.Errorf("error also matches %v", other.(*Error).Code)
				}
			}
		})
	}
}

func TestMergeDropIns(t *testing.T) {
	main, err := Parse("/etc/systemd/system/sglang.service", readTestdata(t, "sglang-incident.service"))
	if err != nil {
		t.Fatal(err)
	}
	env, _ := Parse("/etc/systemd/system/sglang.service.d/env.conf", "[Service]\nEnvironment=X=1\n")
	over, _ := Parse("/etc/systemd/system/sglang.service.d/override.conf",
		"[Service]\nExecStart=\nExecStart=/usr/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --speculative-num-steps 2\n")
	eff, err := Merge(main, env, over)
	if err != nil {
		t.Fatal(err)
	}
	if eff.File() != over || len(eff.Commands) != 1 {
		t.Fatalf("effective ExecStart from %s (%d commands)", eff.File().Name, len(eff.Commands))
	}
	e, err := eff.SetSteps(5, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if e.File != over.Name || e.Before != over.Text {
		t.Errorf("edited %s", e.File)
	}
	if !strings.Contains(e.After, "--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6\n") {
		t.Errorf("after %q", e.After)
	}
	// Without the reset the two ExecStart= lines add up: one engine, one not.
	add, _ := Parse("add.conf", "[Service]\nExecStartPre=/bin/true\nExecStart=/bin/echo hi\n")
	eff, err = Merge(main, add)
	if err != nil || eff.File() != main || len(eff.Commands) != 2 {
		t.Fatalf("merge without reset: %v", err)
	}
}

func TestDropIn(t *testing.T) {
	e, err := SetSteps(readTestdata(t, "sglang-incident.service"), 10, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := DropIn(e)
	testkit.Golden(t, "edit/sglang-incident.dropin", d)
	// The drop-in applied over the original unit yields the edited argv.
	main, _ := Parse("main", e.Before)
	du, err := Parse("opsbot.conf", d)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Merge(main, du)
	if err != nil {
		t.Fatal(err)
	}
	if eff.File() != du || !slices.Equal(eff.Argv(), e.ArgvAfter) {
		t.Errorf("drop-in argv %q", eff.Argv())
	}
}

func TestUnifiedDiff(t *testing.T) {
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"
	b := "1\n2\nthree\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13"
	got := UnifiedDiff("f", a, b)
	want := "--- a/f\n+++ b/f\n@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+three\n 4\n 5\n 6\n@@ -10,3 +10,4 @@\n 10\n 11\n 12\n+13\n\\ No newline at end of file\n"
	if got != want {
		t.Errorf("diff\n%s\nwant\n%s", got, want)
	}
	if UnifiedDiff("f", a, a) != "" {
		t.Error("diff of equal texts not empty")
	}
	// An absolute path reads as git writes it: a/etc/..., never a//etc/...
	if got := UnifiedDiff("/etc/systemd/system/q.service", a, b); !strings.HasPrefix(got, "--- a/etc/systemd/system/q.service\n+++ b/etc/systemd/system/q.service\n@@") {
		t.Errorf("headers of an absolute path:\n%s", got)
	}
}
