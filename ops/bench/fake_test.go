package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is an OpenAI-compatible streaming server with knobs for every way a
// real one differs.
type fake struct {
	Model          string
	TokensPerChunk int           // default 1
	Comments       bool          // ": keep-alive" lines and SSE "event:" fields
	NoUsage        bool          // ignore include_usage
	UsageNull      bool          // "usage": null on every content chunk (SGLang)
	ErrorAfter     int           // send an error object after this many chunks (0 = never)
	Status         int           // answer this status instead of streaming (0 = stream)
	StatusEvery    int           // ...only on every n-th request (0 = all)
	FirstDelay     time.Duration // before the first content chunk
	ChunkDelay     time.Duration // between content chunks
	Hang           bool          // after the first chunk, wait for the client to go
	RefuseIDs      bool          // 400 for token-id prompts
	NoDone         bool          // end without data: [DONE]

	t         testing.TB
	requests  atomic.Int64
	idPrompts atomic.Int64
	tokens    atomic.Int64 // completion tokens sent
	mu        sync.Mutex
	bad       []string
}

type fakeReq struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Messages      []struct{}      `json:"messages"`
	MaxTokens     int             `json:"max_tokens"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	Stream        bool            `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (f *fake) complain(format string, a ...any) {
	f.mu.Lock()
	f.bad = append(f.bad, fmt.Sprintf(format, a...))
	f.mu.Unlock()
}

func (f *fake) start(t testing.TB) *httptest.Server {
	f.t = t
	if f.Model == "" {
		f.Model = "test-model"
	}
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, b := range f.bad {
			t.Errorf("fake server: %s", b)
		}
	})
	return srv
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q}]}`, f.Model)
		return
	case "/v1/completions", "/v1/chat/completions":
	default:
		http.NotFound(w, r)
		return
	}
	n := f.requests.Add(1)
	body, _ := io.ReadAll(r.Body)
	var req fakeReq
	if err := json.Unmarshal(body, &req); err != nil {
		f.complain("bad request JSON: %v", err)
		http.Error(w, "bad json", 400)
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	if req.Model != f.Model || !req.Stream || !req.IgnoreEOS || !req.StreamOptions.IncludeUsage || req.MaxTokens < 1 {
		f.complain("request lacks model/stream/ignore_eos/include_usage/max_tokens: %s", body[:min(len(body), 200)])
	}
	prompt := 0
	if chat {
		if len(req.Messages) != 1 {
			f.complain("chat request with %d messages", len(req.Messages))
		}
		prompt = 20
	} else if len(req.Prompt) > 0 && req.Prompt[0] == '[' {
		var ids []int
		json.Unmarshal(req.Prompt, &ids)
		f.idPrompts.Add(1)
		if f.RefuseIDs {
			http.Error(w, `{"error":{"message":"token ids not supported"}}`, 400)
			return
		}
		prompt = len(ids)
	} else {
		var s string
		json.Unmarshal(req.Prompt, &s)
		prompt = len(strings.Fields(s))
	}
	if f.Status != 0 && (f.StatusEvery == 0 || n%int64(f.StatusEvery) == 0) {
		http.Error(w, `{"error":"overloaded"}`, f.Status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	per := max(f.TokensPerChunk, 1)
	usage := ""
	if f.UsageNull {
		usage = `,"usage":null`
	}
	if f.Comments {
		io.WriteString(w, ": ping\n\nevent: message\n")
	}
	if chat {
		io.WriteString(w, `data: {"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n")
	}
	fl.Flush()
	sent, chunks := 0, 0
	for sent < req.MaxTokens {
		d := f.ChunkDelay
		if chunks == 0 {
			d = f.FirstDelay
		}
		if d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		k := min(per, req.MaxTokens-sent)
		text := strings.Repeat("tok ", k)
		if chat {
			fmt.Fprintf(w, "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]%s}\n\n", text, usage)
		} else {
			fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":%q,\"logprobs\":null,\"finish_reason\":null}]%s}\n\n", text, usage)
		}
		if f.Comments {
			io.WriteString(w, ": comment between chunks\n")
		}
		fl.Flush()
		sent += k
		chunks++
		f.tokens.Add(int64(k))
		if f.ErrorAfter > 0 && chunks == f.ErrorAfter {
			io.WriteString(w, `data: {"error":{"message":"CUDA out of memory","type":"InternalServerError","code":500}}`+"\n\n")
			fl.Flush()
			return
		}
		if f.Hang {
			<-r.Context().Done()
			return
		}
	}
	if !f.NoUsage {
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n", prompt, prompt+sent, sent)
	}
	if !f.NoDone {
		io.WriteString(w, "data: [DONE]\n\n")
	}
	fl.Flush()
}
