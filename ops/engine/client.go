// Package engine is an HTTP client of an LLM inference engine (SGLang, vLLM):
// readiness probes, server info, model list and Prometheus metrics, and parsers
// of the engines' text formats (metrics exposition, decode log lines).
//
// A Client is safe for concurrent use. Every call that does I/O takes a
// context and ends promptly when it ends.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// DefaultProbeTimeout bounds one Probe when Client.ProbeTimeout is 0.
const DefaultProbeTimeout = 3 * time.Second

// DefaultPoll is WaitReady's interval when it is given 0.
const DefaultPoll = 200 * time.Millisecond

// DefaultReadyTimeout is how long a started engine gets to serve (a large
// model loads for minutes) when its service's configuration sets no bound:
// the runbook's wait for WaitReady, and opsbot's
// services.NAME.ready_timeout when unset.
const DefaultReadyTimeout = 15 * time.Minute

// Client talks to one engine at BaseURL (scheme://host:port, no trailing
// slash). HTTP is the client used for every request (nil:
// http.DefaultClient), always through Do, so no redirect is followed
// whatever its CheckRedirect; ProbeTimeout bounds one Probe (0 =
// DefaultProbeTimeout). Other requests are bounded by their ctx.
type Client struct {
	BaseURL      string
	HTTP         *http.Client
	ProbeTimeout time.Duration
}

// New returns a Client for baseURL (a trailing "/" or "/v1" is dropped) with
// its own keep-alive HTTP client, connecting directly over TCP.
func New(baseURL string) *Client { return NewVia(baseURL, nil) }

// DialFunc opens a connection to addr (host:port); net.Dialer.DialContext
// has its signature.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// NewVia is New with connections opened by dial (for example through an SSH
// connection to the engine's host); nil dial connects directly over TCP. No
// proxy from the environment applies to a dialled client: dial decides. The
// client follows no redirect (NewHTTPClient).
func NewVia(baseURL string, dial DialFunc) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	if dial != nil {
		t.DialContext, t.Proxy = dial, nil
	}
	return &Client{BaseURL: TrimBase(baseURL), HTTP: NewHTTPClient(t)}
}

// TrimBase drops trailing slashes and a trailing "/v1" from an engine URL, so
// that "http://h:30000/v1/" and "http://h:30000" name the same server.
func TrimBase(u string) string {
	u = strings.TrimRight(u, "/")
	u = strings.TrimSuffix(u, "/v1")
	return strings.TrimRight(u, "/")
}

// Phase is what a health probe saw.
type Phase int

// Phases of an engine coming up: the port refuses while weights load, /health
// answers 503 while warming up, 200 when it serves. PhaseError is any other
// answer or transport failure.
const (
	PhaseRefused Phase = iota
	PhaseLoading
	PhaseReady
	PhaseError
)

// String is "refused", "loading", "ready" or "error".
func (p Phase) String() string {
	switch p {
	case PhaseRefused:
		return "refused"
	case PhaseLoading:
		return "loading"
	case PhaseReady:
		return "ready"
	case PhaseError:
		return "error"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// Probe sends one GET /health bounded by ProbeTimeout. Connection refused is
// PhaseRefused, 503 PhaseLoading, 200 PhaseReady, with a nil error. Anything
// else is PhaseError with an error saying what was seen (status and an
// Excerpt of the body, a redirect not followed (*RedirectError), or the
// transport error); ctx's end is PhaseError wrapping ctx.Err().
func (c *Client) Probe(ctx context.Context) (Phase, error) {
	to := c.ProbeTimeout
	if to <= 0 {
		to = DefaultProbeTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, c.BaseURL+"/health", nil)
	if err != nil {
		return PhaseError, fmt.Errorf("probe %s: %w", c.BaseURL, err)
	}
	resp, err := Do(c.HTTP, req)
	if err != nil {
		if ctx.Err() != nil {
			return PhaseError, fmt.Errorf("probe %s/health: %w", c.BaseURL, ctx.Err())
		}
		if isRefused(err) {
			return PhaseRefused, nil
		}
		return PhaseError, fmt.Errorf("probe %s/health: %w", c.BaseURL, err)
	}
	snippet := readSnippet(resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return PhaseReady, nil
	case http.StatusServiceUnavailable:
		return PhaseLoading, nil
	}
	return PhaseError, fmt.Errorf("probe %s/health: HTTP %d: %s", c.BaseURL, resp.StatusCode, snippet)
}

func isRefused(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && strings.Contains(op.Err.Error(), "refused")
}

// readSnippet drains body (up to 64 KiB, so the connection can be reused) and
// returns an Excerpt of it for error messages.
func readSnippet(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	s := Excerpt(string(b))
	if s == "" {
		s = "(empty body)"
	}
	return s
}

// NotReadyError is WaitReady's error when ctx ends first: the last phase seen,
// how long it lasted, and how long the whole wait took.
type NotReadyError struct {
	URL     string
	Phase   Phase
	For     time.Duration // time spent in Phase at the end
	Waited  time.Duration
	LastErr error // the last probe error, if the last phase was PhaseError
	Err     error // ctx.Err()
}

func (e *NotReadyError) Error() string {
	s := fmt.Sprintf("%s not ready after %s: %s for the last %s", e.URL, e.Waited.Round(10*time.Millisecond),
		e.Phase, e.For.Round(10*time.Millisecond))
	if e.LastErr != nil {
		s += " (" + e.LastErr.Error() + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// WaitReady probes every poll (0 = DefaultPoll) until the engine answers 200.
// Refused, 503 and errors are all "not yet": the wait goes on. progress (may
// be nil) is called with each new phase and the time since the wait began.
// When ctx ends first the error is a *NotReadyError wrapping ctx.Err().
func (c *Client) WaitReady(ctx context.Context, poll time.Duration, progress func(Phase, time.Duration)) error {
	if poll <= 0 {
		poll = DefaultPoll
	}
	t0 := time.Now()
	last, since := Phase(-1), t0
	var lastErr error
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			if last == -1 {
				last = PhaseRefused
			}
			return &NotReadyError{URL: c.BaseURL, Phase: last, For: time.Since(since), Waited: time.Since(t0), LastErr: lastErr, Err: ctx.Err()}
		case <-timer.C:
		}
		ph, err := c.Probe(ctx)
		if ctx.Err() != nil {
			continue // reported by the select above with the phase before
		}
		lastErr = err
		if ph != last {
			last, since = ph, time.Now()
			if progress != nil {
				progress(ph, time.Since(t0))
			}
		}
		if ph == PhaseReady {
			return nil
		}
		timer.Reset(poll)
	}
}

// get GETs path and returns the body of a 200 answer (up to max bytes). A
// non-200 answer is a *StatusError.
func (c *Client) get(ctx context.Context, path string, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s%s: %w", c.BaseURL, path, err)
	}
	resp, err := Do(c.HTTP, req)
	if err != nil {
		return nil, err // a *url.Error: it names the method and URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{URL: c.BaseURL + path, Code: resp.StatusCode, Body: readSnippet(resp.Body)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s%s: reading body: %w", c.BaseURL, path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("GET %s%s: body larger than %d bytes", c.BaseURL, path, max)
	}
	return b, nil
}

// StatusError is a non-200 answer.
type StatusError struct {
	Method string // "" = GET
	URL    string
	Code   int
	Body   string // an Excerpt of the body
}

func (e *StatusError) Error() string {
	m := e.Method
	if m == "" {
		m = http.MethodGet
	}
	return fmt.Sprintf("%s %s: HTTP %d: %s", m, e.URL, e.Code, e.Body)
}

// ErrFlushRefused is FlushCache's error when the engine answered but did not
// flush: SGLang flushes only when no request is running or waiting.
var ErrFlushRefused = errors.New("the engine did not flush its cache: requests were running or waiting")

// FlushCache asks SGLang to flush its cache (POST /flush_cache). SGLang does
// it only when idle; besides the prefix cache it then restarts the cumulative
// acceptance /server_info reports (avg_spec_accept_length) and its count of
// decode iterations, so decode log windows start at the flush. An answer of
// 400 is ErrFlushRefused (wrapped; retry when idle); other answers are a
// *StatusError; vLLM has no such endpoint (404). A 405 to the POST is tried
// again as a GET (early SGLang). Early SGLang also answered 200 when it did
// not flush: a caller that relies on the restart checks /server_info after.
func (c *Client) FlushCache(ctx context.Context) error {
	err := c.flush(ctx, http.MethodPost)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusMethodNotAllowed {
		err = c.flush(ctx, http.MethodGet) // early SGLang served GET only
	}
	return err
}

func (c *Client) flush(ctx context.Context, method string) error {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+"/flush_cache", nil)
	if err != nil {
		return fmt.Errorf("flush cache of %s: %w", c.BaseURL, err)
	}
	resp, err := Do(c.HTTP, req)
	if err != nil {
		return fmt.Errorf("flush cache: %w", err)
	}
	defer resp.Body.Close()
	body := readSnippet(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusBadRequest:
		return fmt.Errorf("flush cache of %s: %w", c.BaseURL, ErrFlushRefused)
	}
	return fmt.Errorf("flush cache: %w", &StatusError{Method: method, URL: c.BaseURL + "/flush_cache", Code: resp.StatusCode, Body: body})
}
