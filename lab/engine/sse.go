package engine

import (
	"io"
	"net/http"
	"strconv"
)

// stream writes a request's output as server-sent events: one `data: {json}` chunk per verify
// step (carrying that step's tokens), finish_reason on the last content chunk, then, with
// include_usage, a chunk with "choices": [] and usage, then `data: [DONE]`. Chunks queued
// while the client was slow are written together and flushed once.
func (e *Engine) stream(w http.ResponseWriter, hr *http.Request, r *request, usage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	sglang := e.s.Flavor == "sglang"
	object := "text_completion"
	if r.chat {
		object = "chat.completion.chunk"
	}
	head := []byte(`data: {"id":"`)
	head = append(head, r.id...)
	head = append(head, `","object":"`...)
	head = append(head, object...)
	head = append(head, `","created":`...)
	head = strconv.AppendInt(head, r.created, 10)
	head = append(head, `,"model":`...)
	head = strconv.AppendQuote(head, r.model)
	head = append(head, `,"choices":`...)

	out := make([]byte, 0, 4096)
	if r.chat {
		out = append(out, head...)
		out = append(out, `[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n"...)
	}
	var buf []int
	total := 0
	for {
		steps, fin, reason := r.take(buf)
		buf = steps
		for i, n := range steps {
			total += n
			last := fin && i == len(steps)-1
			out = appendChunk(out, head, r, n, last, reason, sglang)
		}
		if fin {
			if len(steps) == 0 { // ended without tokens in this batch: finish_reason alone
				out = appendChunk(out, head, r, 0, true, reason, sglang)
			}
			if usage {
				out = append(out, head...)
				out = append(out, `[],"usage":{"prompt_tokens":`...)
				out = strconv.AppendInt(out, int64(r.prompt), 10)
				out = append(out, `,"total_tokens":`...)
				out = strconv.AppendInt(out, int64(r.prompt+total), 10)
				out = append(out, `,"completion_tokens":`...)
				out = strconv.AppendInt(out, int64(total), 10)
				out = append(out, `,"prompt_tokens_details":null}}`+"\n\n"...)
			}
			out = append(out, "data: [DONE]\n\n"...)
		}
		var more bool
		if out, more = e.sendAndWait(w, rc, hr, r, out, fin); !more {
			return
		}
	}
}

// sendAndWait writes and flushes out (when it holds anything) and, unless the
// stream is finished, waits for the request's next tokens. It returns out
// emptied for reuse, and false when the stream ends: finished, the client
// gone or a write failed (the request is marked aborted), or the engine
// stopping.
func (e *Engine) sendAndWait(w io.Writer, rc *http.ResponseController, hr *http.Request, r *request, out []byte, fin bool) ([]byte, bool) {
	if len(out) > 0 {
		if _, err := w.Write(out); err != nil {
			r.aborted.Store(true)
			return out, false
		}
		if err := rc.Flush(); err != nil {
			r.aborted.Store(true)
			return out, false
		}
		out = out[:0]
	}
	if fin {
		return out, false
	}
	select {
	case <-r.notify:
		return out, true
	case <-hr.Context().Done():
		r.aborted.Store(true)
		return out, false
	case <-e.done:
		return out, false
	}
}

// appendChunk appends one content chunk of n tokens.
func appendChunk(out, head []byte, r *request, n int, last bool, reason string, sglang bool) []byte {
	out = append(out, head...)
	if r.chat {
		out = append(out, `[{"index":0,"delta":{"role":null,"content":"`...)
	} else {
		out = append(out, `[{"index":0,"text":"`...)
	}
	out = appendWords(out, &r.text, n)
	if r.chat {
		out = append(out, `"},"logprobs":null,"finish_reason":`...)
	} else {
		out = append(out, `","logprobs":null,"finish_reason":`...)
	}
	if last {
		out = strconv.AppendQuote(out, reason)
	} else {
		out = append(out, "null"...)
	}
	if sglang {
		out = append(out, `,"matched_stop":`...)
		if last && reason == "stop" {
			out = strconv.AppendInt(out, eosToken, 10)
		} else {
			out = append(out, "null"...)
		}
	}
	return append(out, `}],"usage":null}`+"\n\n"...)
}
