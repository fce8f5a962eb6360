package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
)

// stream is what one streamed response gave. Tokens come only from usage.
type stream struct {
	first, last  time.Time       // first and last non-empty content chunk
	itl          []time.Duration // gaps between consecutive content chunks
	chunks       int             // content chunks
	hasUsage     bool
	promptTokens int
	outTokens    int
	done         bool // data: [DONE] seen
}

// chunk is the part of a completion chunk the benchmark needs; it is decoded
// only for the rare payloads the byte scan cannot settle (usage, errors).
type chunk struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Object  string          `json:"object"`
	Message string          `json:"message"`
}

// StreamError is an error object the server sent inside the stream; Message
// is an engine.Excerpt of its message.
type StreamError struct{ Message string }

func (e *StreamError) Error() string { return "error in stream: " + e.Message }

var (
	dataPrefix = []byte("data:")
	doneWord   = []byte("[DONE]")
	keyError   = []byte(`"error"`)
	keyUsage   = []byte(`"usage"`)
	keyContent = []byte(`content"`) // "content" and "reasoning_content"
	keyText    = []byte(`"text"`)
)

// readStream reads an SSE body until [DONE] or EOF. It handles ":" comments,
// blank lines, other SSE fields (ignored), several tokens per chunk, the final
// usage chunk with empty choices, and an error object (returned as
// *StreamError). Each "data:" line is one event (engines never split JSON
// over several data lines). scratch holds lines longer than r's buffer.
func readStream(r *bufio.Reader, s *stream, scratch *[]byte) error {
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			buf := append((*scratch)[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			*scratch = buf
			line = buf
		}
		if len(line) > 0 {
			if perr := s.line(line); perr != nil {
				return perr
			}
			if s.done {
				return nil
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("reading the stream after %d content chunks: %w", s.chunks, err)
		}
	}
}

func (s *stream) line(line []byte) error {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 || line[0] == ':' || !bytes.HasPrefix(line, dataPrefix) {
		return nil // blank (event end), comment, or event:/id:/retry:
	}
	p := bytes.TrimLeft(line[len(dataPrefix):], " \t")
	if bytes.Equal(p, doneWord) {
		s.done = true
		return nil
	}
	if len(p) == 0 {
		return nil
	}
	if needsDecode(p) {
		return s.decode(p)
	}
	if hasContent(p, keyContent) || hasContent(p, keyText) {
		s.content(time.Now())
	}
	return nil
}

func (s *stream) content(now time.Time) {
	if s.chunks == 0 {
		s.first = now
	} else {
		s.itl = append(s.itl, now.Sub(s.last))
	}
	s.last = now
	s.chunks++
}

// needsDecode: the payload mentions an error, or has a usage that is not null.
func needsDecode(p []byte) bool {
	if bytes.Contains(p, keyError) {
		return true
	}
	for off := 0; ; {
		i := bytes.Index(p[off:], keyUsage)
		if i < 0 {
			return false
		}
		j := skipColon(p, off+i+len(keyUsage))
		if j < 0 {
			off += i + len(keyUsage)
			continue
		}
		return j >= len(p) || p[j] != 'n'
	}
}

// skipColon returns the index after `\s*:\s*` at i, or -1 when there is no colon.
func skipColon(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t') {
		i++
	}
	if i >= len(p) || p[i] != ':' {
		return -1
	}
	i++
	for i < len(p) && (p[i] == ' ' || p[i] == '\t') {
		i++
	}
	return i
}

// hasContent reports whether some key (as JSON key: followed by a colon) has a
// non-empty string value. Quotes inside JSON strings are escaped, so a raw
// `"text"` followed by a colon is a key.
func hasContent(p, key []byte) bool {
	for off := 0; ; {
		i := bytes.Index(p[off:], key)
		if i < 0 {
			return false
		}
		off += i + len(key)
		j := skipColon(p, off)
		if j >= 0 && j+1 < len(p) && p[j] == '"' && p[j+1] != '"' {
			return true
		}
	}
}

func (s *stream) decode(p []byte) error {
	var c chunk
	if err := json.Unmarshal(p, &c); err != nil {
		return fmt.Errorf("bad chunk after %d content chunks: %w: %s", s.chunks, err, engine.Excerpt(string(p)))
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		return &StreamError{Message: engine.Excerpt(errorMessage(c.Error))}
	}
	if c.Object == "error" {
		return &StreamError{Message: engine.Excerpt(c.Message)}
	}
	for _, ch := range c.Choices {
		if nonEmpty(ch.Text) || nonEmpty(ch.Delta.Content) || nonEmpty(ch.Delta.ReasoningContent) {
			s.content(time.Now())
			break
		}
	}
	if c.Usage != nil {
		s.hasUsage = true
		s.promptTokens = c.Usage.PromptTokens
		s.outTokens = c.Usage.CompletionTokens
	}
	return nil
}

func nonEmpty(p *string) bool { return p != nil && *p != "" }

// errorMessage reads {"message": ...} or a plain string.
func errorMessage(raw json.RawMessage) string {
	var o struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Message != "" {
		return o.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	return string(raw)
}
