package engine

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fastPhysics keeps tests quick: 1ms steps, high acceptance so chunks carry several tokens.
func fastPhysics() Physics {
	return Physics{Accept: 0.8, T0: time.Millisecond, C: 20 * time.Microsecond, BatchC: 2 * time.Microsecond,
		PrefillTok: 100 * time.Nanosecond, EOSMean: 20, Seed: 7}
}

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *logSink) matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			out = append(out, s)
		}
	}
	return out
}

type testEngine struct {
	e    *Engine
	url  string
	logs *logSink
}

// startEngine parses argv, checks it and serves a ready engine on loopback.
func startEngine(t *testing.T, argv []string, p Physics) *testEngine {
	t.Helper()
	s, err := ParseArgv(argv)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err = Check(s)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	e := New(s, Options{Physics: p, Log: logs.add, StatsInterval: 50 * time.Millisecond})
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		e.Close()
		srv.Close()
	})
	e.SetReady(true)
	return &testEngine{e: e, url: srv.URL, logs: logs}
}

func sglangTestArgv(extra string) []string {
	return sglangArgv("--model-path /models/Qwen3.5-122B-A10B --served-model-name qwen --tp 4 --speculative-algorithm NEXTN " +
		"--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-metrics " + extra)
}

func vllmTestArgv(extra string) []string {
	return append([]string{"/opt/vllm/.venv/bin/vllm", "serve", "/models/Qwen3.5-122B-A10B", "--served-model-name", "qwen",
		"--speculative-config", `{"method":"mtp","num_speculative_tokens":3}`}, strings.Fields(extra)...)
}

func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

type sseChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

type sseResult struct {
	chunks []sseChunk
	raw    []string // data payloads
	done   bool     // saw [DONE]
}

// readSSE reads an event stream: every event must be `data: ...` followed by a blank line.
func readSSE(t *testing.T, body io.Reader) sseResult {
	t.Helper()
	var res sseResult
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				t.Fatalf("event not followed by a blank line: %q", line)
			}
			expectBlank = false
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not an SSE data line", line)
		}
		if res.done {
			t.Fatalf("data after [DONE]: %q", line)
		}
		expectBlank = true
		res.raw = append(res.raw, data)
		if data == "[DONE]" {
			res.done = true
			continue
		}
		var c sseChunk
		dec := json.NewDecoder(bytes.NewReader([]byte(data)))
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		res.chunks = append(res.chunks, c)
	}
	return res
}

// content returns a chunk's text and whether it has a choice.
func (c sseChunk) content() (string, bool) {
	if len(c.Choices) == 0 {
		return "", false
	}
	ch := c.Choices[0]
	if ch.Text != nil {
		return *ch.Text, true
	}
	if ch.Delta != nil && ch.Delta.Content != nil {
		return *ch.Delta.Content, true
	}
	return "", true
}
