package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// nativeRequest is the part of SGLang's GenerateReqInput the lab serves: one prompt, as
// text or token ids.
type nativeRequest struct {
	Text           json.RawMessage `json:"text"`
	InputIDs       json.RawMessage `json:"input_ids"`
	Stream         bool            `json:"stream"`
	RID            *string         `json:"rid"`
	SamplingParams struct {
		MaxNewTokens *int     `json:"max_new_tokens"`
		IgnoreEOS    bool     `json:"ignore_eos"`
		Temperature  *float64 `json:"temperature"`
	} `json:"sampling_params"`
}

// nativeDefaultMaxNewTokens is SGLang's default max_new_tokens.
const nativeDefaultMaxNewTokens = 128

// native serves SGLang's POST /generate: the answer is {"text", "meta_info"}; with stream,
// one `data: {json}` event per verify step carrying the text so far (SGLang streams the
// whole text by default), then `data: [DONE]`. meta_info has id, finish_reason (null, or
// {"type": "length", "length": N} / {"type": "stop", "matched": ID}), prompt_tokens,
// completion_tokens, cached_tokens, and on the last event e2e_latency and, with speculative
// decoding, spec_verify_ct (the request's verify steps).
func (e *Engine) native(w http.ResponseWriter, hr *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, hr.Body, 64<<20))
	if err != nil {
		nativeError(w, http.StatusBadRequest, "read request body: "+err.Error())
		return
	}
	var q nativeRequest
	if err := json.Unmarshal(body, &q); err != nil {
		nativeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	hasText := len(bytes.TrimSpace(q.Text)) > 0 && string(bytes.TrimSpace(q.Text)) != "null"
	hasIDs := len(bytes.TrimSpace(q.InputIDs)) > 0 && string(bytes.TrimSpace(q.InputIDs)) != "null"
	var prompt int
	switch {
	case hasText == hasIDs:
		nativeError(w, http.StatusBadRequest, "Either text, input_ids or input_embeds should be provided.")
		return
	case hasText && bytes.TrimSpace(q.Text)[0] != '"', hasIDs && bytes.HasPrefix(bytes.TrimSpace(q.InputIDs), []byte("[[")):
		nativeError(w, http.StatusBadRequest, "the lab serves one prompt per /generate request, not a batch")
		return
	case hasText:
		prompt, err = promptTokens(q.Text)
	default:
		prompt, err = promptTokens(q.InputIDs)
	}
	if err != nil {
		nativeError(w, http.StatusBadRequest, err.Error())
		return
	}
	maxTok := nativeDefaultMaxNewTokens
	if m := q.SamplingParams.MaxNewTokens; m != nil {
		maxTok = *m
	}
	if maxTok < 0 {
		nativeError(w, http.StatusBadRequest, fmt.Sprintf("max_new_tokens must be at least 0, got %d.", maxTok))
		return
	}
	if prompt+maxTok > e.s.ContextLength {
		nativeError(w, http.StatusBadRequest, fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion.",
			e.s.ContextLength, prompt+maxTok, prompt, maxTok))
		return
	}
	r := e.newRequest(false, prompt, maxTok, q.SamplingParams.IgnoreEOS)
	if q.RID != nil && *q.RID != "" {
		r.id = *q.RID
	}
	if t := q.SamplingParams.Temperature; t != nil && *t == 0 {
		content := q.Text
		if !hasText {
			content = q.InputIDs
		}
		r.accept = greedyDraws(e.phys.Seed, content)
	}
	if r.limit() == 0 {
		r.finished, r.finish = true, "length"
	} else {
		e.submit(r)
	}
	if q.Stream {
		e.nativeStream(w, hr, r)
		return
	}
	e.nativeComplete(w, hr, r)
}

func nativeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg}})
}

// nativeMeta appends meta_info's JSON for r after total tokens; fin adds the end fields.
func (e *Engine) nativeMeta(b []byte, r *request, total int, fin bool, reason string) []byte {
	b = append(b, `"meta_info":{"id":`...)
	b = strconv.AppendQuote(b, r.id)
	b = append(b, `,"finish_reason":`...)
	switch {
	case !fin:
		b = append(b, "null"...)
	case reason == "stop":
		b = append(b, `{"type":"stop","matched":`...)
		b = strconv.AppendInt(b, eosToken, 10)
		b = append(b, '}')
	default:
		b = append(b, `{"type":"length","length":`...)
		b = strconv.AppendInt(b, int64(total), 10)
		b = append(b, '}')
	}
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(r.prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, `,"cached_tokens":0`...)
	if fin {
		if e.s.Speculative() {
			// steps is the scheduler's: it wrote it before delivering the end, which the
			// handler saw through r.mu.
			b = append(b, `,"spec_verify_ct":`...)
			b = strconv.AppendInt(b, int64(r.steps), 10)
		}
		b = append(b, `,"e2e_latency":`...)
		b = strconv.AppendFloat(b, time.Since(r.received).Seconds(), 'g', -1, 64)
	}
	return append(b, '}')
}

// nativeStream writes r's output as SGLang's native stream.
func (e *Engine) nativeStream(w http.ResponseWriter, hr *http.Request, r *request) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var text, out []byte
	var buf []int
	total := 0
	for {
		steps, fin, reason := r.take(buf)
		buf = steps
		for i, n := range steps {
			total += n
			text = appendWords(text, &r.text, n)
			last := fin && i == len(steps)-1
			out = e.nativeEvent(out, r, text, total, last, reason)
		}
		if fin {
			if len(steps) == 0 {
				out = e.nativeEvent(out, r, text, total, true, reason)
			}
			out = append(out, "data: [DONE]\n\n"...)
		}
		var more bool
		if out, more = e.sendAndWait(w, rc, hr, r, out, fin); !more {
			return
		}
	}
}

func (e *Engine) nativeEvent(out []byte, r *request, text []byte, total int, fin bool, reason string) []byte {
	out = append(out, `data: {"text":`...)
	out = strconv.AppendQuote(out, string(text))
	out = append(out, ',')
	out = e.nativeMeta(out, r, total, fin, reason)
	return append(out, "}\n\n"...)
}

// nativeComplete waits for r and writes the whole answer.
func (e *Engine) nativeComplete(w http.ResponseWriter, hr *http.Request, r *request) {
	total, reason, ok := e.finish(hr, r)
	if !ok {
		if e.closed() {
			nativeError(w, http.StatusServiceUnavailable, "the server is shutting down")
		}
		return
	}
	b := []byte(`{"text":`)
	b = strconv.AppendQuote(b, string(appendWords(nil, &r.text, total)))
	b = append(b, ',')
	b = e.nativeMeta(b, r, total, true, reason)
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
