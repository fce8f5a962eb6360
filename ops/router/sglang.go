package router

// The SGLang router's worker API, as SGLang Model Gateway serves it (the
// Rust router shipped as sglang-router, "smg"), read at these versions of
// github.com/sgl-project/sglang:
//
//   - sgl-model-gateway/src/server.rs, commit
//     049026958a37dfa6ac39a5ea150853aca1cbc07b (build_app): the worker
//     routes are `POST /workers` and `GET /workers`, and
//     `GET|PUT|DELETE /workers/{worker_id}`. The legacy
//     `POST /add_worker?url=`, `POST /remove_worker?url=` and
//     `GET /list_workers` of the older sgl-router (sgl-router/src/server.rs,
//     commit 00eb5eb7213c7b75984ef44eae80bda2228d4cfd) are gone there, so
//     opsbot speaks only the /workers API.
//   - sgl-model-gateway/src/core/worker_service.rs, commit
//     7ea79ef81de0d79966f919798ab071a8d6deb408: POST /workers with
//     {"url": ...} answers 202 Accepted with {"status": "accepted",
//     "worker_id": UUID, "url", "location": "/workers/UUID"}; GET /workers
//     answers {"workers": [{"id", "url", "is_healthy", "load", ...}],
//     "total", "stats"}; {worker_id} is the worker's UUID, never its URL
//     (anything else is 400 "Invalid worker_id ... (expected UUID)"), an
//     unknown one 404 {"error", "code": "WORKER_NOT_FOUND"}; DELETE answers
//     202 Accepted; GET /workers/{id} of a worker still being added carries
//     its "job_status" {"status": "pending"|"processing"|"failed",
//     "message"}.
//   - sgl-model-gateway/src/core/job_queue.rs (commit
//     046ed665927fef15969f34e06a2552b721edd063): adding and removing are
//     jobs run in the background (adding waits for the worker's health
//     check, up to worker_startup_timeout_secs + 30 s; removing up to 30 s).
//
// So a 202 promises nothing: Add and Remove poll GET /workers until the
// change shows (Add: listed and healthy; Remove: not listed), within ctx
// and the client's Wait, and an add whose job failed is reported with the
// router's message as soon as GET /workers/{id} shows it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
)

// DefaultWait bounds how long Add and Remove wait for the router to show
// the change (ctx may end it sooner).
const DefaultWait = 2 * time.Minute

// DefaultPoll is how often Add and Remove ask the router again.
const DefaultPoll = 200 * time.Millisecond

// maxBody bounds how much of a router's answer is read.
const maxBody = 4 << 20

// SGLang is the client of an SGLang router (Model Gateway) at Base.
type SGLang struct {
	Base string       // http://host:port, no trailing slash
	HTTP *http.Client // nil: a plain client; never follows a redirect (engine.Do)
	Wait time.Duration
	Poll time.Duration
}

// NewSGLang returns the client of the SGLang router at base, an http or
// https URL with a host; its requests go through hc.
func NewSGLang(base string, hc *http.Client) (*SGLang, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("router url %q: want http://HOST:PORT", engine.Excerpt(base))
	}
	return &SGLang{Base: strings.TrimRight(base, "/"), HTTP: hc, Wait: DefaultWait, Poll: DefaultPoll}, nil
}

// gwWorker is one worker of GET /workers.
type gwWorker struct {
	ID        string       `json:"id"`
	URL       string       `json:"url"`
	IsHealthy *bool        `json:"is_healthy"`
	JobStatus *gwJobStatus `json:"job_status"`
}

type gwJobStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// Workers lists the router's workers (GET /workers).
func (c *SGLang) Workers(ctx context.Context) ([]Worker, error) {
	ws, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Worker, 0, len(ws))
	for _, w := range ws {
		out = append(out, Worker{URL: w.URL, Healthy: w.IsHealthy == nil || *w.IsHealthy})
	}
	return out, nil
}

func (c *SGLang) list(ctx context.Context) ([]gwWorker, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/workers", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, c.answerErr("list workers", http.MethodGet, "/workers", code, body)
	}
	var v struct {
		Workers *[]gwWorker `json:"workers"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Workers == nil {
		return nil, fmt.Errorf("router %s: list workers: GET /workers answered %q: not the worker list of SGLang's router (is it an SGLang router of the /workers API?)",
			c.Base, engine.Excerpt(string(body)))
	}
	return *v.Workers, nil
}

// Add asks the router to add u (POST /workers) and waits until it lists u
// as healthy.
func (c *SGLang) Add(ctx context.Context, u string) error {
	ws, err := c.list(ctx)
	if err != nil {
		return fmt.Errorf("add %s: %w", u, err)
	}
	if w, ok := findGW(ws, u); ok && (w.IsHealthy == nil || *w.IsHealthy) {
		return nil
	}
	req, _ := json.Marshal(map[string]string{"url": u, "worker_type": "regular"})
	code, body, err := c.do(ctx, http.MethodPost, "/workers", req)
	if err != nil {
		return fmt.Errorf("add %s: %w", u, err)
	}
	if code != http.StatusAccepted && code != http.StatusOK {
		return fmt.Errorf("add %s: %w", u, c.answerErr("add worker", http.MethodPost, "/workers", code, body))
	}
	var acc struct {
		WorkerID string `json:"worker_id"`
	}
	_ = json.Unmarshal(body, &acc) // the id only sharpens the error of a failed job
	return c.await(ctx, "add "+u, func(ctx context.Context) (bool, error) {
		ws, err := c.list(ctx)
		if err != nil {
			return false, err
		}
		if w, ok := findGW(ws, u); ok && (w.IsHealthy == nil || *w.IsHealthy) {
			return true, nil
		}
		if acc.WorkerID == "" {
			return false, nil
		}
		return false, c.jobFailed(ctx, acc.WorkerID)
	})
}

// jobFailed is an error quoting the router's message when the job of the
// worker id failed; nil while it is pending, processing or unknown.
func (c *SGLang) jobFailed(ctx context.Context, id string) error {
	path := "/workers/" + url.PathEscape(id)
	code, body, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil || code != http.StatusOK {
		return nil
	}
	var w gwWorker
	if json.Unmarshal(body, &w) != nil || w.JobStatus == nil || w.JobStatus.Status != "failed" {
		return nil
	}
	return fmt.Errorf("the router's job failed: %q", engine.Excerpt(w.JobStatus.Message))
}

// Remove asks the router to remove u (DELETE /workers/{id}, the id taken
// from GET /workers) and waits until it no longer lists u.
func (c *SGLang) Remove(ctx context.Context, u string) error {
	ws, err := c.list(ctx)
	if err != nil {
		return fmt.Errorf("remove %s: %w", u, err)
	}
	w, ok := findGW(ws, u)
	if !ok {
		return nil
	}
	if w.ID == "" {
		return fmt.Errorf("remove %s: router %s lists it with no id: not the /workers API opsbot speaks", u, c.Base)
	}
	path := "/workers/" + url.PathEscape(w.ID)
	code, body, err := c.do(ctx, http.MethodDelete, path, nil)
	if err != nil {
		return fmt.Errorf("remove %s: %w", u, err)
	}
	// 404: gone between the list and the delete, which is what was asked.
	if code != http.StatusAccepted && code != http.StatusOK && code != http.StatusNotFound {
		return fmt.Errorf("remove %s: %w", u, c.answerErr("remove worker", http.MethodDelete, path, code, body))
	}
	return c.await(ctx, "remove "+u, func(ctx context.Context) (bool, error) {
		ws, err := c.list(ctx)
		if err != nil {
			return false, err
		}
		_, still := findGW(ws, u)
		return !still, nil
	})
}

// await polls done until it is true, fails, or the wait ends.
func (c *SGLang) await(ctx context.Context, what string, done func(context.Context) (bool, error)) error {
	wait, poll := c.Wait, c.Poll
	if wait <= 0 {
		wait = DefaultWait
	}
	if poll <= 0 {
		poll = DefaultPoll
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	for {
		ok, err := done(ctx)
		if ok {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			why := fmt.Sprintf("router %s accepted it but did not show the change within %s", c.Base, time.Since(start).Round(time.Millisecond))
			if err != nil {
				why += fmt.Sprintf(" (last answer: %v)", err)
			}
			return fmt.Errorf("%s: %s: see its GET /workers", what, why)
		case <-t.C:
		}
	}
}

// do sends one request and reads a bounded answer; it follows no redirect.
func (c *SGLang) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("router %s: %w", c.Base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := engine.Do(c.HTTP, req)
	if err != nil {
		var re *engine.RedirectError
		if errors.As(err, &re) {
			return 0, nil, fmt.Errorf("router %s: %s %s: HTTP %d redirect, not followed: opsbot follows no redirect from a router (is something other than the router listening there?)",
				c.Base, method, path, re.Code)
		}
		return 0, nil, fmt.Errorf("router %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("router %s: %s %s: reading the answer: %w", c.Base, method, path, err)
	}
	return resp.StatusCode, b, nil
}

// answerErr quotes an unexpected answer of the router.
func (c *SGLang) answerErr(what, method, path string, code int, body []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	msg := string(body)
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return fmt.Errorf("router %s: %s: %s %s answered HTTP %d: %q", c.Base, what, method, path, code, engine.Excerpt(msg))
}

func findGW(ws []gwWorker, u string) (gwWorker, bool) {
	for _, w := range ws {
		if Same(w.URL, u) {
			return w, true
		}
	}
	return gwWorker{}, false
}
