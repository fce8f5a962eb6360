package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

func TestHealthTurnsReady(t *testing.T) {
	for _, argv := range [][]string{sglangTestArgv(""), vllmTestArgv("")} {
		s, _ := ParseArgv(argv)
		e := New(s, Options{Physics: fastPhysics()})
		srv := httptest.NewServer(e.Handler())
		if code, _ := getBody(t, srv.URL+"/health"); code != 503 {
			t.Fatalf("%s: /health before ready = %d, want 503", s.Flavor, code)
		}
		e.SetReady(true)
		if code, _ := getBody(t, srv.URL+"/health"); code != 200 {
			t.Fatalf("%s: /health when ready = %d, want 200", s.Flavor, code)
		}
		code, _ := getBody(t, srv.URL+"/health_generate")
		if want := map[string]int{"sglang": 200, "vllm": 404}[s.Flavor]; code != want {
			t.Fatalf("%s: /health_generate = %d, want %d", s.Flavor, code, want)
		}
		e.Close()
		srv.Close()
	}
}

func TestStreamCompletionWithUsage(t *testing.T) {
	for _, chat := range []bool{false, true} {
		t.Run(fmt.Sprintf("chat=%v", chat), func(t *testing.T) {
			te := startEngine(t, sglangTestArgv(""), fastPhysics())
			path, in := "/v1/completions", `"prompt":[1,2,3,4,5,6,7,8]`
			if chat {
				path, in = "/v1/chat/completions", `"messages":[{"role":"user","content":"say something long"}]`
			}
			resp := postJSON(t, te.url+path, `{"model":"qwen",`+in+`,"max_tokens":200,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`)
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			res := readSSE(t, resp.Body)
			if !res.done {
				t.Fatal("no data: [DONE]")
			}
			last := res.chunks[len(res.chunks)-1]
			if len(last.Choices) != 0 || last.Usage == nil {
				t.Fatalf("last chunk %s: want choices [] and usage", res.raw[len(res.raw)-2])
			}
			words, multi, finishes := 0, 0, 0
			for _, c := range res.chunks[:len(res.chunks)-1] {
				text, ok := c.content()
				if !ok || c.Usage != nil {
					t.Fatalf("content chunk without a choice or with usage: %+v", c)
				}
				n := len(strings.Fields(text))
				words += n
				if n > 1 {
					multi++
				}
				if c.Choices[0].FinishReason != nil {
					finishes++
					if *c.Choices[0].FinishReason != "length" {
						t.Fatalf("finish_reason %q with ignore_eos, want length", *c.Choices[0].FinishReason)
					}
				}
				if n > 4 {
					t.Fatalf("a chunk carried %d tokens; steps 3 allows at most 4", n)
				}
			}
			if last.Usage.CompletionTokens != 200 || words != 200 || last.Usage.TotalTokens != last.Usage.PromptTokens+200 {
				t.Fatalf("usage %+v, tokens in chunks %d, want 200", *last.Usage, words)
			}
			if !chat && last.Usage.PromptTokens != 8 {
				t.Fatalf("prompt tokens %d, want 8", last.Usage.PromptTokens)
			}
			if multi == 0 || finishes != 1 {
				t.Fatalf("%d multi-token chunks (want some under speculation), %d finish reasons (want 1)", multi, finishes)
			}
			if tr := te.e.Truth(); tr.OutputTokens != 200 || tr.Requests != 1 || tr.VerifySteps == 0 {
				t.Fatalf("truth %+v", tr)
			}
		})
	}
}

func TestNonStreamAndEOS(t *testing.T) {
	te := startEngine(t, sglangTestArgv(""), fastPhysics())
	stops := 0
	for i := range 20 {
		resp := postJSON(t, te.url+"/v1/completions", fmt.Sprintf(`{"prompt":"hello there number %d","max_tokens":500}`, i))
		var out struct {
			Object  string
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
				MatchedStop  *int   `json:"matched_stop"`
			}
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		resp.Body.Close()
		c := out.Choices[0]
		if out.Object != "text_completion" || len(strings.Fields(c.Text)) != out.Usage.CompletionTokens || out.Usage.PromptTokens != 4 {
			t.Fatalf("%+v", out)
		}
		if c.FinishReason == "stop" {
			stops++
			if out.Usage.CompletionTokens >= 500 || c.MatchedStop == nil {
				t.Fatalf("stop at %d tokens, matched_stop %v", out.Usage.CompletionTokens, c.MatchedStop)
			}
		}
	}
	if stops < 15 {
		t.Fatalf("%d of 20 requests without ignore_eos stopped at EOS (mean 20 tokens), want most", stops)
	}
}

func TestBadRequests(t *testing.T) {
	te := startEngine(t, sglangTestArgv(""), fastPhysics())
	tv := startEngine(t, vllmTestArgv(""), fastPhysics())
	tests := []struct {
		url, path, body string
		code            int
		msg             string
	}{
		{te.url, "/v1/completions", `{"prompt":`, 400, "invalid JSON"},
		{te.url, "/v1/completions", `{"max_tokens":3}`, 400, "prompt"},
		{te.url, "/v1/completions", `{"prompt":[1,"x"]}`, 400, "token ids"},
		{te.url, "/v1/completions", `{"prompt":[]}`, 400, "empty"},
		{te.url, "/v1/completions", `{"prompt":"hi","max_tokens":-1}`, 400, "max_tokens"},
		{te.url, "/v1/completions", `{"prompt":"hi","max_tokens":40000}`, 400, "maximum context length of 32768"},
		{te.url, "/v1/chat/completions", `{"prompt":"hi"}`, 400, "messages"},
		{te.url, "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, 400, "role"},
		{tv.url, "/v1/completions", `{"model":"other","prompt":"hi"}`, 404, "The model `other` does not exist."},
	}
	for _, tc := range tests {
		resp := postJSON(t, tc.url+tc.path, tc.body)
		var e struct {
			Object, Message, Type string
			Code                  int
		}
		err := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.code || e.Object != "error" || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s %s: status %d %+v (%v), want %d with %q", tc.path, tc.body, resp.StatusCode, e, err, tc.code, tc.msg)
		}
	}
	if code, _ := getBody(t, te.url+"/v1/completions"); code != 405 {
		t.Errorf("GET /v1/completions = %d, want 405", code)
	}
}

// runConcurrent sends n streaming requests at once and returns the sum of usage tokens.
func runConcurrent(t *testing.T, url string, n int, body func(i int) string) int {
	t.Helper()
	total, err := streamConcurrent(url, n, body)
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// streamConcurrent runs n streaming completions at once and returns their completion tokens
// (from each stream's usage chunk), or the first failure.
func streamConcurrent(url string, n int, body func(i int) string) (int, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body(i)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				errs <- err
				return
			}
			events := strings.Split(strings.TrimSpace(string(raw)), "\n\n")
			if len(events) < 2 || events[len(events)-1] != "data: [DONE]" {
				errs <- fmt.Errorf("request %d: stream did not end with [DONE]", i)
				return
			}
			var c sseChunk
			if err := json.Unmarshal([]byte(strings.TrimPrefix(events[len(events)-2], "data: ")), &c); err != nil || c.Usage == nil {
				errs <- fmt.Errorf("request %d: no usage chunk: %v", i, err)
				return
			}
			mu.Lock()
			total += c.Usage.CompletionTokens
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return total, err
	}
	return total, nil
}

func TestTruthEqualsUsageAcrossConcurrentRequests(t *testing.T) {
	te := startEngine(t, sglangTestArgv("--max-running-requests 8 --decode-log-interval 5"), fastPhysics())
	total := runConcurrent(t, te.url, 40, func(i int) string {
		eos := "false"
		if i%2 == 0 {
			eos = "true"
		}
		return fmt.Sprintf(`{"prompt":"p %d","max_tokens":%d,"ignore_eos":%s,"stream":true,"stream_options":{"include_usage":true}}`, i, 30+i, eos)
	})
	tr := te.e.Truth()
	if tr.OutputTokens != int64(total) || tr.Requests != 40 {
		t.Fatalf("truth %+v, usage sum %d over 40 requests", tr, total)
	}
	if tr.DraftsAccepted != tr.OutputTokens-tr.VerifySteps || tr.DraftsProposed != 3*tr.VerifySteps ||
		tr.AcceptLen != float64(tr.OutputTokens)/float64(tr.VerifySteps) {
		t.Fatalf("truth inconsistent: %+v", tr)
	}
	// The cap on running requests held and the rest queued.
	lines := te.logs.matching("Decode batch, ")
	queued := false
	for _, l := range lines {
		var run, q int
		if _, err := fmt.Sscanf(l[strings.Index(l, "#running-req:"):], "#running-req: %d,", &run); err != nil || run > 8 {
			t.Fatalf("decode line %q: running %d > 8 (%v)", l, run, err)
		}
		fmt.Sscanf(l[strings.Index(l, "#queue-req:"):], "#queue-req: %d", &q)
		queued = queued || q > 0
	}
	if len(lines) == 0 || !queued {
		t.Fatalf("%d decode lines, queued seen %v", len(lines), queued)
	}
}

func TestDecodeLogAndGauges(t *testing.T) {
	te := startEngine(t, sglangTestArgv("--decode-log-interval 4"), fastPhysics())
	if _, info := getBody(t, te.url+"/server_info"); strings.Contains(string(info), "avg_spec_accept_length") {
		t.Fatal("avg_spec_accept_length before the first decode log line")
	}
	runConcurrent(t, te.url, 4, func(i int) string {
		return `{"prompt":"x","max_tokens":100,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	})
	lines := te.logs.matching("Decode batch, ")
	if len(lines) == 0 || len(te.logs.matching("Prefill batch, #new-seq: ")) == 0 {
		t.Fatalf("no decode or prefill lines")
	}
	l := lines[len(lines)-1]
	var y, mo, d, h, mi, sec, running, tok int
	var usage, acc, rate, tput float64
	var q int
	n, err := fmt.Sscanf(l, "[%d-%d-%d %d:%d:%d TP0 EP0] Decode batch, #running-req: %d, #token: %d, token usage: %f, accept len: %f, accept rate: %f, cuda graph: True, gen throughput (token/s): %f, #queue-req: %d",
		&y, &mo, &d, &h, &mi, &sec, &running, &tok, &usage, &acc, &rate, &tput, &q)
	if err != nil || n != 13 {
		t.Fatalf("decode line %q: %v", l, err)
	}
	if acc < 1 || acc > 4 || fmt.Sprintf("%.2f", (acc-1)/3) != fmt.Sprintf("%.2f", rate) && abs(rate-(acc-1)/3) > 0.006 || tput <= 0 {
		t.Fatalf("accept len %v rate %v tput %v", acc, rate, tput)
	}
	_, body := getBody(t, te.url+"/metrics")
	m := string(body)
	if !strings.Contains(m, `sglang:spec_accept_length{model_name="qwen",engine_type="unified",tp_rank="0",pp_rank="0"} `) {
		t.Fatalf("metrics:\n%s", m)
	}
	gauge := promValue(t, m, "sglang:spec_accept_length")
	if fmt.Sprintf("%.2f", gauge) != fmt.Sprintf("%.2f", acc) {
		t.Fatalf("gauge spec_accept_length %v, last decode line %v", gauge, acc)
	}
	if r := promValue(t, m, "sglang:spec_accept_rate"); abs(r-(gauge-1)/3) > 1e-9 {
		t.Fatalf("gauge accept rate %v, want (L-1)/k", r)
	}
	var info struct {
		Algorithm string `json:"speculative_algorithm"`
		Steps     int    `json:"speculative_num_steps"`
		TopK      int    `json:"speculative_eagle_topk"`
		Draft     int    `json:"speculative_num_draft_tokens"`
		TP        int    `json:"tp_size"`
		Model     string `json:"model_path"`
		MaxRun    int    `json:"max_running_requests"`
		States    []struct {
			Avg *float64 `json:"avg_spec_accept_length"`
		} `json:"internal_states"`
	}
	for _, p := range []string{"/server_info", "/get_server_info"} {
		_, b := getBody(t, te.url+p)
		if err := json.Unmarshal(b, &info); err != nil {
			t.Fatal(err)
		}
		if info.Algorithm != "EAGLE" || info.Steps != 3 || info.TopK != 1 || info.Draft != 4 || info.TP != 4 || info.MaxRun != 48 ||
			info.Model != "/models/Qwen3.5-122B-A10B" || len(info.States) != 1 || info.States[0].Avg == nil || *info.States[0].Avg < 1 || *info.States[0].Avg > 4 {
			t.Fatalf("%s: %s", p, b)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// promValue sums the samples of name.
func promValue(t *testing.T, text, name string) float64 {
	t.Helper()
	sum, found := 0.0, false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			var v float64
			if _, err := fmt.Sscanf(l[strings.LastIndexByte(l, ' ')+1:], "%g", &v); err != nil {
				t.Fatalf("sample %q: %v", l, err)
			}
			sum, found = sum+v, true
		}
	}
	if !found {
		t.Fatalf("no %s in\n%s", name, text)
	}
	return sum
}

func TestVLLMMetricsDeltasMatchTruth(t *testing.T) {
	te := startEngine(t, vllmTestArgv(""), fastPhysics())
	for _, p := range []string{"/server_info", "/get_server_info", "/health_generate"} {
		if code, _ := getBody(t, te.url+p); code != 404 {
			t.Fatalf("vLLM %s = %d, want 404", p, code)
		}
	}
	read := func() (map[string]float64, Truth) {
		_, b := getBody(t, te.url+"/metrics")
		m := map[string]float64{}
		for _, n := range []string{"vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
			"vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total", "vllm:generation_tokens_total"} {
			m[n] = promValue(t, string(b), n)
		}
		if !strings.Contains(string(b), `vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="2"}`) {
			t.Fatalf("no per-position counter for position 2:\n%s", b)
		}
		return m, te.e.Truth()
	}
	runConcurrent(t, te.url, 3, func(int) string {
		return `{"prompt":"a","max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}`
	})
	m0, t0 := read()
	total := runConcurrent(t, te.url, 10, func(i int) string {
		return fmt.Sprintf(`{"model":"qwen","prompt":[1,2,3],"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, 50+i)
	})
	m1, t1 := read()
	d := func(n string) float64 { return m1[n] - m0[n] }
	steps := float64(t1.VerifySteps - t0.VerifySteps)
	out := float64(t1.OutputTokens - t0.OutputTokens)
	if out != float64(total) || d("vllm:generation_tokens_total") != out || d("vllm:spec_decode_num_drafts_total") != steps ||
		d("vllm:spec_decode_num_draft_tokens_total") != 3*steps || d("vllm:spec_decode_num_accepted_tokens_total") != out-steps ||
		d("vllm:spec_decode_num_accepted_tokens_per_pos_total") != out-steps {
		t.Fatalf("deltas %v %v; truth out %v steps %v usage %d", m0, m1, out, steps, total)
	}
	testkit.WaitFor(t, 10*time.Second, "a SpecDecoding log line", func() bool { return len(te.logs.matching("SpecDecoding metrics: Mean acceptance length: ")) > 0 })
	l := te.logs.matching("SpecDecoding metrics: ")[0]
	if !strings.HasPrefix(l, "INFO ") || !strings.Contains(l, "Per-position acceptance rate: ") || !strings.Contains(l, "Avg Draft acceptance rate: ") {
		t.Fatalf("line %q", l)
	}
}

func TestSGLangMetricsNeedFlag(t *testing.T) {
	s := sglangTestArgv("")
	s = s[:len(s)-1] // drop --enable-metrics
	if s[len(s)-1] == "--enable-metrics" {
		t.Fatal("argv helper changed")
	}
	te := startEngine(t, s, fastPhysics())
	if code, _ := getBody(t, te.url+"/metrics"); code != 404 {
		t.Fatalf("/metrics without --enable-metrics = %d, want 404", code)
	}
	code, b := getBody(t, te.url+"/v1/models")
	if code != 200 || !strings.Contains(string(b), `"id":"qwen"`) {
		t.Fatalf("/v1/models %d %s", code, b)
	}
	code, b = getBody(t, te.url+"/lab/truth")
	for _, k := range []string{"output_tokens", "verify_steps", "requests", "accept_len", "drafts_proposed", "drafts_accepted", "completion_tokens", "settings"} {
		if code != 200 || !strings.Contains(string(b), `"`+k+`":`) {
			t.Fatalf("/lab/truth %d %s lacks %s", code, b, k)
		}
	}
}

func TestCloseEndsOpenStreams(t *testing.T) {
	s, _ := ParseArgv(sglangTestArgv(""))
	e := New(s, Options{Physics: fastPhysics()})
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	resp := postJSON(t, srv.URL+"/v1/completions", `{"prompt":"x","max_tokens":30000,"ignore_eos":true,"stream":true}`)
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "tokens to flow", func() bool { return e.Truth().OutputTokens > 0 })
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	rest, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(rest), "[DONE]") {
		t.Fatal("a stream cut by Close ended with [DONE]")
	}
	out := e.Truth().OutputTokens
	if out >= 30000 {
		t.Fatal("request ran to completion")
	}
	e.Close() // twice is fine
}
