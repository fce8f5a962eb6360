package engine

import (
	"errors"
	"strings"
	"testing"
)

func sglangArgv(flags string) []string {
	return append([]string{"/opt/sglang/.venv/bin/python3", "-m", "sglang.launch_server"}, strings.Fields(flags)...)
}

func TestParseSGLang(t *testing.T) {
	tests := []struct {
		name  string
		flags string
		check func(t *testing.T, s Settings)
	}{
		{"incident unit", "--model-path /models/Qwen3.5-122B-A10B --served-model-name qwen --host 0.0.0.0 --port 30000 --tp 4 --mem-fraction-static 0.88 --context-length 32768 --speculative-algorithm NEXTN --speculative-num-steps 10 --speculative-eagle-topk 1 --speculative-num-draft-tokens 11 --enable-metrics",
			func(t *testing.T, s Settings) {
				if s.Flavor != "sglang" || s.Model != "/models/Qwen3.5-122B-A10B" || s.ServedModelName != "qwen" || s.Host != "0.0.0.0" ||
					s.Port != 30000 || s.TP != 4 || s.MemFractionStatic != 0.88 || s.ContextLength != 32768 || s.Algorithm != "NEXTN" ||
					s.Steps != 10 || s.TopK != 1 || s.DraftTokens != 11 || !s.EnableMetrics || s.DecodeLogInterval != 40 {
					t.Fatalf("%+v", s)
				}
				if s.SitePackages != "/opt/sglang/.venv/lib/python3.12/site-packages" {
					t.Fatalf("site packages %q", s.SitePackages)
				}
			}},
		{"equals and abbreviations", "--model=/m --tp=2 --speculative-algo EAGLE3 --speculative-draft /d --mem-frac=0.7 --disable-radix --decode-log-interval=5 --max-running-requests 64",
			func(t *testing.T, s Settings) {
				if s.Model != "/m" || s.TP != 2 || s.Algorithm != "EAGLE3" || s.DraftModelPath != "/d" || s.MemFractionStatic != 0.7 ||
					s.Args["disable_radix_cache"] != true || s.DecodeLogInterval != 5 || s.MaxRunningRequests != 64 {
					t.Fatalf("%+v", s)
				}
				if s.ServedModelName != "/m" || s.Args["speculative_num_steps"] != nil || s.Steps != 0 {
					t.Fatalf("defaults: %+v", s)
				}
			}},
		{"long alias and last wins", "--model-path /m --tensor-parallel-size 2 --tp-size 8 --port -1 --trust-remote-code --log-level warning",
			func(t *testing.T, s Settings) {
				if s.TP != 8 || s.Port != -1 || s.Args["trust_remote_code"] != true || s.Args["log_level"] != "warning" {
					t.Fatalf("%+v", s)
				}
			}},
		{"exact match beats prefix", "--model-path /m --enable-metrics",
			func(t *testing.T, s Settings) {
				if !s.EnableMetrics || s.Args["enable_metrics_for_all_schedulers"] != false {
					t.Fatalf("%+v", s.Args)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseArgv(sglangArgv(tc.flags))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func TestParseRejectsLikeArgparse(t *testing.T) {
	tests := []struct {
		argv []string
		last string
		exit int
	}{
		{sglangArgv("--model-path /m --speculative-num-stepz 3"), "launch_server.py: error: unrecognized arguments: --speculative-num-stepz 3", 2},
		{sglangArgv("--model-path /m stray"), "launch_server.py: error: unrecognized arguments: stray", 2},
		{sglangArgv("--model-path /m --speculative-num 3"), "launch_server.py: error: ambiguous option: --speculative-num could match --speculative-num-steps, --speculative-num-draft-tokens", 2},
		{sglangArgv("--model-path /m --speculative-num=3"), "launch_server.py: error: ambiguous option: --speculative-num=3 could match --speculative-num-steps, --speculative-num-draft-tokens", 2},
		{sglangArgv("--model-path /m --tp-size x"), "launch_server.py: error: argument --tensor-parallel-size/--tp-size: invalid int value: 'x'", 2},
		{sglangArgv("--model-path /m --mem-fraction-static high"), "launch_server.py: error: argument --mem-fraction-static: invalid float value: 'high'", 2},
		{sglangArgv("--model-path /m --port"), "launch_server.py: error: argument --port: expected one argument", 2},
		{sglangArgv("--model-path --tp 4"), "launch_server.py: error: argument --model-path/--model: expected one argument", 2},
		{sglangArgv("--tp 4"), "launch_server.py: error: the following arguments are required: --model-path/--model", 2},
		{sglangArgv("--model-path /m --speculative-algorithm MEDUSA"), "launch_server.py: error: argument --speculative-algorithm: invalid choice: 'MEDUSA' (choose from 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')", 2},
		{sglangArgv("--model-path /m --enable-metrics=yes"), "launch_server.py: error: argument --enable-metrics: ignored explicit argument 'yes'", 2},
		{[]string{"/opt/vllm/.venv/bin/vllm", "serve", "/m", "--foo", "1"}, "vllm serve: error: unrecognized arguments: --foo 1", 2},
		{[]string{"vllm", "serve", "/m", "--speculative-config", "{method: mtp}"}, "vllm serve: error: argument --speculative-config: invalid loads value: '{method: mtp}'", 2},
		{[]string{"vllm", "serve", "/m", "-tp", "four"}, "vllm serve: error: argument --tensor-parallel-size/-tp: invalid int value: 'four'", 2},
		{[]string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "extra"}, "api_server.py: error: unrecognized arguments: extra", 2},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.argv[2:], " "), func(t *testing.T) {
			_, err := ParseArgv(tc.argv)
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want *ArgError", err)
			}
			if ae.ExitStatus != tc.exit || ae.Lines[len(ae.Lines)-1] != tc.last || ae.Error() != tc.last {
				t.Fatalf("got exit %d lines\n%s\nwant last %q", ae.ExitStatus, strings.Join(ae.Lines, "\n"), tc.last)
			}
			if !strings.HasPrefix(ae.Lines[0], "usage: ") {
				t.Fatalf("first line %q is not the usage", ae.Lines[0])
			}
		})
	}
}

func TestSGLangUsageWrapsLikeArgparse(t *testing.T) {
	_, err := ParseArgv(sglangArgv("--bogus"))
	var ae *ArgError
	if !errors.As(err, &ae) {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ae.Lines[0], "usage: launch_server.py [-h] --model-path MODEL_PATH") {
		t.Fatalf("usage %q", ae.Lines[0])
	}
	indent := strings.Repeat(" ", len("usage: launch_server.py "))
	for _, l := range ae.Lines[1 : len(ae.Lines)-1] {
		if len(l) > 78 && strings.Count(l, "[") > 1 || !strings.HasPrefix(l, indent+"[") {
			t.Fatalf("usage line %q: not wrapped at 78 columns under the prog", l)
		}
	}
	if !strings.Contains(strings.Join(ae.Lines, "\n"), "[--tensor-parallel-size TP_SIZE]") {
		t.Fatal("usage lacks [--tensor-parallel-size TP_SIZE]")
	}
}

func TestParseVLLM(t *testing.T) {
	tests := []struct {
		argv  []string
		check func(t *testing.T, s Settings)
	}{
		{[]string{"/opt/vllm/.venv/bin/vllm", "serve", "/models/Qwen3.5-122B-A10B", "--served-model-name", "qwen", "--host", "0.0.0.0", "--port", "8000",
			"--tensor-parallel-size", "4", "--gpu-memory-utilization", "0.90", "--max-model-len", "32768", "--speculative-config", `{"method":"mtp","num_speculative_tokens":3}`},
			func(t *testing.T, s Settings) {
				if s.Flavor != "vllm" || s.Model != "/models/Qwen3.5-122B-A10B" || s.ServedModelName != "qwen" || s.Port != 8000 || s.TP != 4 ||
					s.MemFractionStatic != 0.9 || s.ContextLength != 32768 || s.Algorithm != "mtp" || s.Steps != 3 {
					t.Fatalf("%+v", s)
				}
			}},
		{[]string{"vllm", "serve", "/m", "-tp", "2", "--max_num_seqs=8", "--gpu-mem", "0.5", "--max-model-len", "32k", "--no-enable-prefix-caching",
			"--speculative-config={\"method\":\"qwen3_next_mtp\",\"num_speculative_tokens\":2}"},
			func(t *testing.T, s Settings) {
				if s.TP != 2 || s.MaxRunningRequests != 8 || s.MemFractionStatic != 0.5 || s.ContextLength != 32000 ||
					s.Args["enable_prefix_caching"] != false || s.Algorithm != "qwen3_next_mtp" || s.Steps != 2 {
					t.Fatalf("%+v", s)
				}
			}},
		{[]string{"python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--port=8001"},
			func(t *testing.T, s Settings) {
				if s.Flavor != "vllm" || s.Prog != "api_server.py" || s.Model != "/m" || s.Port != 8001 || s.Algorithm != "" {
					t.Fatalf("%+v", s)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.argv[:3], " "), func(t *testing.T) {
			s, err := ParseArgv(tc.argv)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func TestParseNotAnEngine(t *testing.T) {
	for _, argv := range [][]string{nil, {"sleep", "infinity"}, {"python3", "-m", "http.server"}, {"vllm", "bench"}} {
		_, err := ParseArgv(argv)
		var ae *ArgError
		if err == nil || errors.As(err, &ae) {
			t.Fatalf("%q: err = %v, want a plain error", argv, err)
		}
	}
}

func FuzzParseArgv(f *testing.F) {
	f.Add("--model-path /m --speculative-num 3")
	f.Add("--model=/m --tp=4 --speculative-algo NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1")
	f.Add("-- --x -1 --port -5 --cuda-graph-bs 1 2 3 --help")
	f.Add("--speculative-config {\"method\":\"mtp\",\"num_speculative_tokens\":1e9}")
	f.Fuzz(func(t *testing.T, flags string) {
		args := strings.Fields(flags)
		for _, prefix := range [][]string{{"python3", "-m", "sglang.launch_server"}, {"vllm", "serve"}} {
			s, err := ParseArgv(append(append([]string(nil), prefix...), args...))
			if err != nil {
				var ae *ArgError
				if errors.As(err, &ae) && (len(ae.Lines) == 0 || (ae.ExitStatus != 2 && ae.ExitStatus != 0)) {
					t.Fatalf("bad ArgError %+v", ae)
				}
				continue
			}
			Check(s) // must not panic either
		}
	})
}

func TestIsOptionNegativeNumbers(t *testing.T) {
	for a, want := range map[string]bool{"-1": false, "-0.5": false, "-.5": false, "-1.": true, "-x": true, "--1": true, "-": false, "5": false, "-1e3": true} {
		if got := isOption(a); got != want {
			t.Errorf("isOption(%q) = %v, want %v", a, got, want)
		}
	}
}
