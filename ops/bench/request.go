package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
)

// Token ids of random prompts are drawn from [idLow, idHigh): inside every
// common vocabulary, clear of the special tokens at the bottom.
const idLow, idHigh = 1000, 30000

// words of text prompts: common words, about one token each with a leading space.
var words = strings.Fields(`the of and to in is was for that on as with by at from his her
an be this which or had not are but have were one all their has been if more when will
would who so no time day way man year work life part home end city line name world state`)

// RequestRow is one measured request, kept raw in the result.
type RequestRow struct {
	Index        int     `json:"index"`
	OK           bool    `json:"ok"`
	Error        string  `json:"error,omitempty"`
	StartMs      float64 `json:"start_ms"` // since the first dispatch
	TTFTMs       float64 `json:"ttft_ms"`
	E2EMs        float64 `json:"e2e_ms"`
	TPOTMs       float64 `json:"tpot_ms"`
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Chunks       int     `json:"chunks"` // content chunks (not tokens)

	itl  []time.Duration
	end  time.Time
	sent bool
}

// client sends the benchmark's requests. Safe for concurrent use.
type client struct {
	http     *http.Client
	url      string // endpoint
	model    string
	chat     bool
	in, out  int
	seed     int64
	timeout  time.Duration
	textMode atomic.Bool // the server refused token ids: send text from now on
	readers  sync.Pool
}

var errNoUsage = errors.New("no usage in the stream: the server ignored stream_options.include_usage, " +
	"so its tokens cannot be counted (chunks are not tokens)")

// body builds request i's JSON: a random prompt of exactly in token ids (or
// about in words as text), deterministic in (seed, i).
func (c *client) body(i int, text bool) []byte {
	rng := rand.New(rand.NewPCG(uint64(c.seed), uint64(i)))
	b := make([]byte, 0, 160+c.in*7)
	b = append(b, `{"model":`...)
	b = appendJSONString(b, c.model)
	if c.chat {
		b = append(b, `,"messages":[{"role":"user","content":`...)
		b = appendJSONString(b, textPrompt(rng, c.in))
		b = append(b, `}]`...)
	} else if text {
		b = append(b, `,"prompt":`...)
		b = appendJSONString(b, textPrompt(rng, c.in))
	} else {
		b = append(b, `,"prompt":[`...)
		for k := 0; k < c.in; k++ {
			if k > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(idLow+rng.IntN(idHigh-idLow)), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(c.out), 10)
	b = append(b, `,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`...)
	return b
}

func textPrompt(rng *rand.Rand, n int) string {
	var sb strings.Builder
	for k := 0; k < n; k++ {
		if k > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[rng.IntN(len(words))])
	}
	return sb.String()
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// do runs request i and fills row. t0 is the first dispatch of the run.
// A refused token-id prompt (HTTP 400) is retried once as text, and the
// client stays in text mode.
func (c *client) do(ctx context.Context, i int, t0 time.Time, row *RequestRow) {
	row.Index = i
	text := c.chat || c.textMode.Load()
	err := c.attempt(ctx, i, text, t0, row)
	var he *httpError
	if !text && errors.As(err, &he) && he.code == http.StatusBadRequest {
		c.textMode.Store(true)
		*row = RequestRow{Index: i}
		err = c.attempt(ctx, i, true, t0, row)
	}
	if err != nil {
		row.OK, row.Error = false, err.Error()
		return
	}
	row.OK = true
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

func (c *client) attempt(ctx context.Context, i int, text bool, t0 time.Time, row *RequestRow) error {
	body := c.body(i, text)
	parent := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("request to %s: %w", c.url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	row.StartMs = ms(start.Sub(t0))
	s := stream{itl: make([]time.Duration, 0, c.out)}
	err = c.send(ctx, req, &s)
	row.end = time.Now()
	row.E2EMs = ms(row.end.Sub(start))
	row.Chunks = s.chunks
	if s.chunks > 0 {
		row.TTFTMs = ms(s.first.Sub(start))
	}
	row.PromptTokens, row.OutputTokens = s.promptTokens, s.outTokens
	if err != nil {
		if parent.Err() != nil {
			return fmt.Errorf("cancelled after %d content chunks: %w", s.chunks, parent.Err())
		}
		if ctx.Err() != nil {
			return fmt.Errorf("timed out after %s (%d content chunks received)", c.timeout, s.chunks)
		}
		return err
	}
	if !s.hasUsage {
		return errNoUsage
	}
	row.itl = s.itl
	if s.outTokens > 1 {
		row.TPOTMs = (row.E2EMs - row.TTFTMs) / float64(s.outTokens-1)
	}
	return nil
}

func (c *client) send(ctx context.Context, req *http.Request, s *stream) error {
	resp, err := engine.Do(c.http, req) // no redirect is followed
	if err != nil {
		return err // a *url.Error: it names the method and URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return &httpError{code: resp.StatusCode, body: engine.Excerpt(string(b))}
	}
	br, _ := c.readers.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(resp.Body, 16<<10)
	} else {
		br.Reset(resp.Body)
	}
	var scratch []byte
	err = readStream(br, s, &scratch)
	br.Reset(nil)
	c.readers.Put(br)
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
