package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

type nativeAnswer struct {
	Text     string `json:"text"`
	MetaInfo struct {
		ID           string          `json:"id"`
		FinishReason json.RawMessage `json:"finish_reason"`
		Prompt       int             `json:"prompt_tokens"`
		Completion   int             `json:"completion_tokens"`
		VerifyCt     *int            `json:"spec_verify_ct"`
		E2E          *float64        `json:"e2e_latency"`
	} `json:"meta_info"`
}

// TestNativeGenerateStream: POST /generate as bench_serving's sglang backend sends it: the
// stream carries the whole text so far and meta_info.completion_tokens on every event, and
// the last event has finish_reason, spec_verify_ct and e2e_latency, matching the engine's
// per-request truth.
func TestNativeGenerateStream(t *testing.T) {
	te := startEngine(t, sglangTestArgv(""), fastPhysics())
	resp := postJSON(t, te.url+"/generate", `{"input_ids":[1001,1002,1003,1004,1005],"sampling_params":{"temperature":0.0,"max_new_tokens":60,"ignore_eos":true},"stream":true,"return_logprob":false,"logprob_start_len":-1}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	raw, _ := io.ReadAll(resp.Body)
	events := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", raw)
	}
	prev, prevTok := "", 0
	var last nativeAnswer
	for i, ev := range events[:len(events)-1] {
		var a nativeAnswer
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ev, "data: ")), &a); err != nil {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
		if !strings.HasPrefix(a.Text, prev) || a.MetaInfo.Completion <= prevTok || len(strings.Fields(a.Text)) != a.MetaInfo.Completion {
			t.Fatalf("event %d: text %q (%d tokens) after %q (%d): want the whole text so far, one word a token", i, a.Text, a.MetaInfo.Completion, prev, prevTok)
		}
		final := i == len(events)-2
		if (string(a.MetaInfo.FinishReason) != "null") != final || (a.MetaInfo.VerifyCt != nil) != final || (a.MetaInfo.E2E != nil) != final {
			t.Fatalf("event %d of %d: finish_reason %s, spec_verify_ct %v, e2e_latency %v", i, len(events)-1, a.MetaInfo.FinishReason, a.MetaInfo.VerifyCt, a.MetaInfo.E2E)
		}
		prev, prevTok, last = a.Text, a.MetaInfo.Completion, a
	}
	if last.MetaInfo.Completion != 60 || last.MetaInfo.Prompt != 5 || string(last.MetaInfo.FinishReason) != `{"type":"length","length":60}` {
		t.Fatalf("last event meta_info %+v", last.MetaInfo)
	}
	reqs := te.e.Requests()
	if len(reqs) != 1 || reqs[0].ID != last.MetaInfo.ID || reqs[0].OutputTokens != 60 || reqs[0].VerifySteps != *last.MetaInfo.VerifyCt ||
		len(events)-1 != reqs[0].VerifySteps {
		t.Fatalf("truth %+v, spec_verify_ct %d, %d events", reqs, *last.MetaInfo.VerifyCt, len(events)-1)
	}
	r := reqs[0]
	if r.Received.After(r.Admitted) || r.Admitted.After(r.FirstToken) || r.FirstToken.After(r.LastToken) || !r.FirstToken.Before(r.LastToken) {
		t.Fatalf("truth times out of order: %+v", r)
	}
}

func TestNativeGenerateNonStreamAndErrors(t *testing.T) {
	te := startEngine(t, sglangTestArgv(""), fastPhysics())
	resp := postJSON(t, te.url+"/generate", `{"text":"the quick brown fox","sampling_params":{"max_new_tokens":7,"ignore_eos":true},"rid":"r1"}`)
	var a nativeAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if a.MetaInfo.ID != "r1" || a.MetaInfo.Prompt != 4 || a.MetaInfo.Completion != 7 || len(strings.Fields(a.Text)) != 7 || a.MetaInfo.VerifyCt == nil {
		t.Fatalf("answer %+v", a)
	}
	for _, body := range []string{`{}`, `{"text":"a","input_ids":[1]}`, `{"text":["a","b"]}`, `{"input_ids":[[1],[2]]}`,
		`{"text":"a","sampling_params":{"max_new_tokens":-1}}`, `{"text":"a","sampling_params":{"max_new_tokens":40000}}`, `not json`} {
		resp := postJSON(t, te.url+"/generate", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), `"error":{"message":`) {
			t.Errorf("%s: status %d %s", body, resp.StatusCode, b)
		}
	}
	v := startEngine(t, vllmTestArgv(""), fastPhysics())
	if resp := postJSON(t, v.url+"/generate", `{"text":"a"}`); resp.StatusCode != 404 {
		t.Fatalf("vLLM /generate: %d", resp.StatusCode)
	}
}

// TestServerInfoAcceptLenMovesAtDecodeLines: avg_spec_accept_length is the windows closed by
// decode log lines, as in SGLang: at concurrency 1 every window is decode-log-interval verify
// steps, so it is the mean of the lines' accept len, and the steps after the last line are
// not in it.
func TestServerInfoAcceptLenMovesAtDecodeLines(t *testing.T) {
	te := startEngine(t, sglangTestArgv("--decode-log-interval 4"), fastPhysics())
	for range 3 {
		runConcurrent(t, te.url, 1, func(int) string {
			return `{"prompt":"x","max_tokens":37,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
		})
	}
	lines := te.logs.matching("Decode batch, ")
	sum := 0.0
	for _, l := range lines {
		var v float64
		if _, err := fmt.Sscanf(l[strings.Index(l, "accept len: "):], "accept len: %f", &v); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		sum += v
	}
	avg := serverInfoAvg(t, te.url)
	tr := te.e.Truth()
	if avg == nil || abs(*avg-sum/float64(len(lines))) > 1e-9 || tr.VerifySteps != tr.BatchSteps || int(tr.BatchSteps) < 4*len(lines) {
		t.Fatalf("avg_spec_accept_length %v, mean of %d lines %v, truth %+v", avg, len(lines), sum/float64(len(lines)), tr)
	}
	if tail := int(tr.BatchSteps) - 4*len(lines); tail > 0 && *avg == tr.AcceptLen {
		t.Logf("the %d steps after the last line happened to leave the average unchanged", tail)
	}
}

func serverInfoAvg(t *testing.T, url string) *float64 {
	t.Helper()
	_, b := getBody(t, url+"/get_server_info")
	var info struct {
		States []struct {
			Avg *float64 `json:"avg_spec_accept_length"`
		} `json:"internal_states"`
	}
	if err := json.Unmarshal(b, &info); err != nil || len(info.States) != 1 {
		t.Fatalf("server info %s: %v", b, err)
	}
	return info.States[0].Avg
}

// TestFlushCache: /flush_cache is refused (400, nothing changed) while a request runs; once
// idle it restarts the cumulative acceptance and the decode-log count, so that afterwards
// avg_spec_accept_length covers only what ran since, in windows counted from the flush.
func TestFlushCache(t *testing.T) {
	te := startEngine(t, sglangTestArgv("--decode-log-interval 4"), fastPhysics())
	runConcurrent(t, te.url, 2, func(int) string {
		return `{"prompt":"x","max_tokens":50,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	})
	if serverInfoAvg(t, te.url) == nil {
		t.Fatal("no avg_spec_accept_length after a run")
	}
	// a long request in flight: the flush is refused
	resp := postJSON(t, te.url+"/v1/completions", `{"prompt":"x","max_tokens":3000,"ignore_eos":true,"stream":true}`)
	defer resp.Body.Close()
	testkit.WaitFor(t, 10*time.Second, "the long request running", func() bool {
		return te.e.Truth().BatchSteps > 0 && len(te.e.Requests()) == 2 && te.e.runningForTest() > 0
	})
	before := serverInfoAvg(t, te.url)
	code, body := post(t, te.url+"/flush_cache")
	if code != 400 || !strings.Contains(body, "When there are running or waiting requests") || len(te.logs.matching("Cache not flushed because there are pending requests. #queue-req: 0, #running-req: 1")) != 1 {
		t.Fatalf("flush while busy: %d %q", code, body)
	}
	if after := serverInfoAvg(t, te.url); after == nil || before == nil {
		t.Fatal("a refused flush reset the average")
	}
	io.Copy(io.Discard, resp.Body)
	testkit.WaitFor(t, 10*time.Second, "idle", func() bool { return te.e.runningForTest() == 0 })
	code, body = post(t, te.url+"/flush_cache")
	if code != 200 || !strings.HasPrefix(body, "Cache flushed.\n") || len(te.logs.matching("Cache flushed successfully!")) != 1 {
		t.Fatalf("flush when idle: %d %q", code, body)
	}
	if avg := serverInfoAvg(t, te.url); avg != nil {
		t.Fatalf("avg_spec_accept_length %v right after a flush: want none until the next decode line", *avg)
	}
	t0 := te.e.Truth()
	nLines := len(te.logs.matching("Decode batch, "))
	runConcurrent(t, te.url, 1, func(int) string {
		return `{"prompt":"x","max_tokens":200,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	})
	t1 := te.e.Truth()
	steps := t1.BatchSteps - t0.BatchSteps
	if got := len(te.logs.matching("Decode batch, ")) - nLines; int64(got) != steps/4 {
		t.Fatalf("%d decode lines for %d decode iterations since the flush: want one every 4 from the flush", got, steps)
	}
	avg := serverInfoAvg(t, te.url)
	truth := float64(t1.OutputTokens-t0.OutputTokens) / float64(t1.VerifySteps-t0.VerifySteps)
	if avg == nil || abs(*avg-truth)/truth > 0.1 {
		t.Fatalf("avg after flush %v, window truth %v", avg, truth)
	}
	if resp := mustGet(t, te.url+"/flush_cache"); resp != 200 {
		t.Fatalf("GET /flush_cache: %d", resp)
	}
}

func post(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func mustGet(t *testing.T, url string) int {
	code, _ := getBody(t, url)
	return code
}

// runningForTest is the scheduler's batch plus the queue.
func (e *Engine) runningForTest() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.active + len(e.waiting)
}

// TestGreedyRequestsAcceptWhatTheirPromptFixes: a greedy request (temperature 0) takes the
// same verify steps every time its prompt is sent, through /generate and /v1/completions
// alike, as a real engine's greedy output does; sampled requests (temperature absent: 1.0)
// draw their own.
func TestGreedyRequestsAcceptWhatTheirPromptFixes(t *testing.T) {
	te := startEngine(t, sglangTestArgv(""), fastPhysics())
	verifyCt := func(body string) int {
		t.Helper()
		resp := postJSON(t, te.url+"/generate", body)
		defer resp.Body.Close()
		var a nativeAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 || a.MetaInfo.VerifyCt == nil {
			t.Fatalf("%s: status %d, %+v, %v", body, resp.StatusCode, a, err)
		}
		return *a.MetaInfo.VerifyCt
	}
	steps := func(id string) int {
		t.Helper()
		for _, r := range te.e.Requests() {
			if r.ID == id {
				return r.VerifySteps
			}
		}
		t.Fatalf("no request %s in %+v", id, te.e.Requests())
		return 0
	}
	greedy := `{"input_ids":[1001,1002,1003,1004,1005],"sampling_params":{"temperature":0,"max_new_tokens":300,"ignore_eos":true}}`
	first := verifyCt(greedy)
	for range 3 {
		if n := verifyCt(greedy); n != first {
			t.Fatalf("one greedy prompt took %d verify steps, then %d", first, n)
		}
	}
	other := verifyCt(`{"input_ids":[2001,2002,2003,2004,2005],"sampling_params":{"temperature":0,"max_new_tokens":300,"ignore_eos":true}}`)
	sampled := map[int]bool{}
	for range 6 {
		sampled[verifyCt(`{"input_ids":[1001,1002,1003,1004,1005],"sampling_params":{"max_new_tokens":300,"ignore_eos":true}}`)] = true
	}
	if len(sampled) == 1 && sampled[first] {
		t.Fatalf("six sampled requests all took the greedy prompt's %d verify steps", first)
	}
	// /v1/completions with the same body shape twice: the same steps.
	ids := make([]string, 2)
	for i := range ids {
		resp := postJSON(t, te.url+"/v1/completions", `{"model":"qwen","prompt":[7,8,9],"max_tokens":300,"temperature":0,"ignore_eos":true}`)
		var c struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 {
			t.Fatalf("completions: status %d, %v", resp.StatusCode, err)
		}
		resp.Body.Close()
		ids[i] = c.ID
	}
	if a, b := steps(ids[0]), steps(ids[1]); a != b {
		t.Fatalf("one greedy completions prompt took %d verify steps, then %d", a, b)
	}
	t.Logf("greedy prompt: %d verify steps each time; another prompt %d; sampled: %v", first, other, sampled)
}
