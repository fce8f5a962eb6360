package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

type genRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	Temperature         *float64        `json:"temperature"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// promptTokens counts a completions prompt: a string (about one token per word) or an array
// of token ids.
func promptTokens(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, fmt.Errorf("field required: prompt")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("prompt: %w", err)
		}
		if strings.TrimSpace(s) == "" {
			return 0, fmt.Errorf("prompt is empty")
		}
		return len(strings.Fields(s)), nil
	}
	var ids []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&ids); err != nil {
		return 0, fmt.Errorf("prompt must be a string or an array of token ids")
	}
	if len(ids) == 0 {
		return 0, fmt.Errorf("prompt is empty")
	}
	for i, id := range ids {
		if n, err := id.Int64(); err != nil || n < 0 || n > math.MaxInt32 {
			return 0, fmt.Errorf("prompt[%d] = %s is not a token id", i, id)
		}
	}
	return len(ids), nil
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatTokens counts chat messages: words of text content plus template overhead.
func chatTokens(raw json.RawMessage) (int, error) {
	var msgs []chatMessage
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return 0, fmt.Errorf("field required: messages")
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return 0, fmt.Errorf("messages must be an array of {role, content}")
	}
	if len(msgs) == 0 {
		return 0, fmt.Errorf("messages is empty")
	}
	n := 2
	for i, m := range msgs {
		if m.Role == "" {
			return 0, fmt.Errorf("messages[%d].role: field required", i)
		}
		n += 4
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || string(c) == "null":
		case c[0] == '"':
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return 0, fmt.Errorf("messages[%d].content: %w", i, err)
			}
			n += len(strings.Fields(s))
		default:
			var parts []struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(c, &parts); err != nil {
				return 0, fmt.Errorf("messages[%d].content must be a string or an array of parts", i)
			}
			for _, p := range parts {
				n += len(strings.Fields(p.Text))
			}
		}
	}
	return n, nil
}

// generate serves /v1/completions (chat false) and /v1/chat/completions.
func (e *Engine) generate(w http.ResponseWriter, hr *http.Request, chat bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, hr.Body, 64<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "read request body: "+err.Error())
		return
	}
	var q genRequest
	if err := json.Unmarshal(body, &q); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: "+err.Error())
		return
	}
	if e.s.Flavor == "vllm" && q.Model != "" && q.Model != e.s.ServedModelName {
		apiError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", q.Model))
		return
	}
	var prompt int
	if chat {
		prompt, err = chatTokens(q.Messages)
	} else {
		prompt, err = promptTokens(q.Prompt)
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	maxTok := 16
	if chat {
		maxTok = e.s.ContextLength - prompt
	}
	for _, m := range []*int{q.MaxTokens, q.MaxCompletionTokens} {
		if m != nil {
			maxTok = *m
		}
	}
	if maxTok < 0 {
		apiError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("max_tokens must be at least 0, got %d.", maxTok))
		return
	}
	if prompt+maxTok > e.s.ContextLength {
		apiError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf(
			"Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
			e.s.ContextLength, prompt+maxTok, prompt, maxTok))
		return
	}
	r := e.newRequest(chat, prompt, maxTok, q.IgnoreEOS)
	if q.Temperature != nil && *q.Temperature == 0 {
		content := q.Prompt
		if chat {
			content = q.Messages
		}
		r.accept = greedyDraws(e.phys.Seed, content)
	}
	if r.limit() == 0 {
		r.finished, r.finish = true, "length"
	} else {
		e.submit(r)
	}
	if q.Stream {
		e.stream(w, hr, r, q.StreamOptions != nil && q.StreamOptions.IncludeUsage)
		return
	}
	e.complete(w, hr, r)
}

func (e *Engine) newRequest(chat bool, prompt, maxTok int, ignoreEOS bool) *request {
	n := e.seq.Add(1)
	r := &request{chat: chat, model: e.s.ServedModelName, prompt: prompt, maxTokens: maxTok,
		created: unixNow(), notify: make(chan struct{}, 1), received: time.Now()}
	r.draws = rng(e.phys.Seed ^ (n * 0x9e3779b97f4a7c15))
	r.accept = draws{seed: r.draws.next()}
	r.text = rng(r.draws.next())
	r.id = fmt.Sprintf("%016x%016x", r.draws.next(), n)
	if e.s.Flavor == "vllm" {
		r.id = "cmpl-" + r.id
		if chat {
			r.id = "chat" + r.id
		}
	}
	if !ignoreEOS && e.phys.EOSMean > 0 {
		u := r.draws.float()
		r.eosAt = 1 + int(-math.Log(1-u)*float64(e.phys.EOSMean))
	}
	return r
}

// greedyDraws is the acceptance of a greedy request: seeded by its prompt's content as sent
// (the completions prompt or the chat messages, JSON as written), so that the same prompt
// accepts the same output positions whatever runs it.
func greedyDraws(seed uint64, content []byte) draws {
	h := fnv.New64a()
	h.Write(bytes.TrimSpace(content))
	return draws{seed: seed ^ h.Sum64()}
}

// complete waits for a non-stream request and writes the whole response.
func (e *Engine) complete(w http.ResponseWriter, hr *http.Request, r *request) {
	total, reason, ok := e.finish(hr, r)
	if !ok {
		if e.closed() {
			apiError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the server is shutting down")
		}
		return
	}
	text := string(appendWords(nil, &r.text, total))
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": reason}
	object := "text_completion"
	if r.chat {
		object = "chat.completion"
		choice["message"] = map[string]any{"role": "assistant", "content": text, "reasoning_content": nil, "tool_calls": nil}
	} else {
		choice["text"] = text
	}
	if e.s.Flavor == "sglang" {
		choice["matched_stop"] = matchedStop(reason)
	}
	writeJSON(w, 200, map[string]any{"id": r.id, "object": object, "created": r.created, "model": r.model,
		"choices": []any{choice}, "usage": map[string]any{"prompt_tokens": r.prompt,
			"completion_tokens": total, "total_tokens": r.prompt + total, "prompt_tokens_details": nil}})
}

// finish waits until r is finished and returns its tokens and finish
// reason; ok is false when the client went (r is marked aborted) or the
// engine is shutting down (closed reports it) first.
func (e *Engine) finish(hr *http.Request, r *request) (total int, reason string, ok bool) {
	var buf []int
	for {
		steps, fin, why := r.take(buf)
		buf = steps
		for _, n := range steps {
			total += n
		}
		if fin {
			return total, why, true
		}
		select {
		case <-r.notify:
		case <-hr.Context().Done():
			r.aborted.Store(true)
			return total, "", false
		case <-e.done:
			return total, "", false
		}
	}
}

// closed reports whether the engine is shutting down.
func (e *Engine) closed() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// eosToken is the id SGLang reports as matched_stop when a request ends at EOS.
const eosToken = 151645

func matchedStop(reason string) any {
	if reason == "stop" {
		return eosToken
	}
	return nil
}

// words are the simulated output vocabulary: one token each.
var words = strings.Fields("the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were her she there been one all we their has would when if so no will can more who out up said into what do them time could about than only")

func appendWords(b []byte, r *rng, n int) []byte {
	for range n {
		b = append(b, ' ')
		b = append(b, words[r.next()%uint64(len(words))]...)
	}
	return b
}
