package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The lab's router speaks the worker API of SGLang's router (SGLang Model
// Gateway) that opsbot's client (ops/router) speaks, and balances requests
// across its workers for real:
//
//	GET    /workers         {"workers": [{"id", "url", "is_healthy", "load", ...}], "total", "stats"}
//	POST   /workers         {"url": ...} -> 202 {"status": "accepted", "worker_id", "url", "location"};
//	                        the add runs as a job: after JobDelay it waits for the
//	                        worker's /health to answer 200 (StartupTimeout), then lists it
//	GET    /workers/{id}    the worker, or the job still adding it ("job_status")
//	DELETE /workers/{id}    202; the removal runs as a job, after JobDelay
//	POST   /generate, /v1/completions, /v1/chat/completions   proxied, streams included
//	GET    /v1/models       proxied to one worker
//	GET    /health, /liveness 200; /readiness 200 with a healthy worker, else 503
//
// {id} is the worker's UUID, as the gateway's is (anything else: 400, an
// unknown one: 404 WORKER_NOT_FOUND). The answers' shapes follow the
// gateway's sources cited in ops/router/sglang.go.
//
// Balancing is round robin over the listed workers. A removed worker gets
// no new request; a request already sent to it finishes there. A request
// whose worker fails (no connection, or an answer of 408, 429 or 5xx) is a
// failed request to its client, counted, unless RouterOptions.Retries lets
// the router try another worker first: SGLang's router retries by default
// (--retry-max-retries 5 for 408/429/500/502/503/504; its
// docs/advanced_features/sgl_model_gateway.md, "Retries"), the lab's does
// not unless asked, so that what a drain leaves failing shows as failures.
// A failure after the answer started (a broken stream) is never retried.
// Not modelled: the gateway's periodic health checks and circuit breaker
// (a worker that dies while listed keeps getting requests, each failing).

// RouterOptions configure a lab router.
type RouterOptions struct {
	Workers []string // listed (healthy) from the start
	// Retries is how many other workers a request is tried on after its
	// worker failed before the answer started (0 = none; SGLang's default
	// is 5).
	Retries int
	// JobDelay is how long a queued add or removal waits before it runs
	// (0 = 20ms): the API's asynchrony, so clients must poll.
	JobDelay time.Duration
	// StartupTimeout bounds an add's wait for the worker's /health (0 = 30s).
	StartupTimeout time.Duration
	// Addr is the address to listen on ("" = 127.0.0.1:0).
	Addr   string
	Logger *slog.Logger
}

// Router is a running lab router. Its methods are safe for concurrent use.
type Router struct {
	opts   RouterOptions
	log    *slog.Logger
	ln     net.Listener
	srv    *http.Server
	client *http.Client
	done   chan struct{}
	jobs   sync.WaitGroup
	rr     atomic.Uint64

	requests, failures atomic.Int64

	mu     sync.Mutex
	listed []*rworker           // in the order added
	all    map[string]*rworker  // every worker ever known, by URL: its counters and id
	status map[string]jobStatus // job status by URL, while a job runs or after it failed
	closed bool
}

type rworker struct {
	url, id                      string
	requests, failures, inflight atomic.Int64
}

type jobStatus struct {
	JobType   string `json:"job_type"`
	WorkerURL string `json:"worker_url"`
	Status    string `json:"status"` // pending, processing, failed
	Message   string `json:"message,omitempty"`
	Timestamp int64  `json:"timestamp"`
}

// RouterStats are a router's counters since it started.
type RouterStats struct {
	Requests int64 // requests its clients sent to the proxied paths
	Failures int64 // of those, answered with an error (no worker, a worker's failure) or broken off
	Workers  map[string]WorkerStats
}

// WorkerStats are one worker's counters (kept after it is removed).
type WorkerStats struct {
	Requests int64 // attempts sent to it
	Failures int64 // of those, failed (no connection, 408/429/5xx, a broken stream)
	InFlight int64 // running now
	Listed   bool  // among the router's workers now
}

// StartRouter starts a lab router listening on loopback. Close stops it.
func StartRouter(opts RouterOptions) (*Router, error) {
	if opts.JobDelay <= 0 {
		opts.JobDelay = 20 * time.Millisecond
	}
	if opts.StartupTimeout <= 0 {
		opts.StartupTimeout = 30 * time.Second
	}
	if opts.Retries < 0 {
		return nil, fmt.Errorf("start router: negative retries %d", opts.Retries)
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Router{opts: opts, log: opts.Logger, done: make(chan struct{}),
		all: map[string]*rworker{}, status: map[string]jobStatus{}}
	for _, u := range opts.Workers {
		if err := workerURL(u); err != nil {
			return nil, fmt.Errorf("start router: %w", err)
		}
		r.listed = append(r.listed, r.known(u))
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("start router: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.Proxy = nil
	r.client = &http.Client{Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r.ln = ln
	r.srv = &http.Server{Handler: r.handler(), ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

// URL is the router's base URL (http://127.0.0.1:PORT).
func (r *Router) URL() string { return "http://" + r.ln.Addr().String() }

// Close stops the router: its listener, its jobs and its connections.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	r.mu.Unlock()
	err := r.srv.Close()
	r.jobs.Wait()
	r.client.CloseIdleConnections()
	return err
}

// Workers lists the URLs of the router's workers now, in the order added.
func (r *Router) Workers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.listed))
	for i, w := range r.listed {
		out[i] = w.url
	}
	return out
}

// Stats returns the router's counters.
func (r *Router) Stats() RouterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := RouterStats{Requests: r.requests.Load(), Failures: r.failures.Load(), Workers: map[string]WorkerStats{}}
	for u, w := range r.all {
		s.Workers[u] = WorkerStats{Requests: w.requests.Load(), Failures: w.failures.Load(),
			InFlight: w.inflight.Load(), Listed: r.isListed(w)}
	}
	return s
}

// known returns the worker of url, made (with a new id) if it was never
// known: like the gateway, a URL keeps its id. r.mu held or not started.
func (r *Router) known(u string) *rworker {
	u = strings.TrimRight(u, "/")
	if w := r.all[u]; w != nil {
		return w
	}
	w := &rworker{url: u, id: newUUID()}
	r.all[u] = w
	return w
}

func (r *Router) isListed(w *rworker) bool {
	for _, x := range r.listed {
		if x == w {
			return true
		}
	}
	return false
}

func (r *Router) handler() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("OK")) }
	mux.HandleFunc("GET /health", ok)
	mux.HandleFunc("GET /liveness", ok)
	mux.HandleFunc("GET /readiness", r.readiness)
	mux.HandleFunc("GET /workers", r.listWorkers)
	mux.HandleFunc("POST /workers", r.createWorker)
	mux.HandleFunc("GET /workers/{id}", r.getWorker)
	mux.HandleFunc("DELETE /workers/{id}", r.deleteWorker)
	for _, p := range []string{"/generate", "/v1/completions", "/v1/chat/completions"} {
		mux.HandleFunc("POST "+p, r.proxy)
	}
	mux.HandleFunc("GET /v1/models", r.proxy)
	return mux
}

func (r *Router) readiness(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	n, total := len(r.listed), len(r.all)
	r.mu.Unlock()
	if n == 0 {
		writeRouterJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "insufficient healthy workers"})
		return
	}
	writeRouterJSON(w, http.StatusOK, map[string]any{"status": "ready", "healthy_workers": n, "total_workers": total})
}

// workerInfo is the gateway's WorkerInfo, the fields opsbot reads and a few more.
func workerInfo(w *rworker, healthy bool, js *jobStatus) map[string]any {
	m := map[string]any{"id": w.id, "url": w.url, "model_id": "unknown", "priority": 50, "cost": 1.0,
		"worker_type": "regular", "is_healthy": healthy, "load": w.inflight.Load(), "connection_mode": "Http"}
	if js != nil {
		m["job_status"] = js
	}
	return m
}

func (r *Router) listWorkers(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	ws := make([]map[string]any, 0, len(r.listed))
	for _, x := range r.listed {
		ws = append(ws, workerInfo(x, true, nil))
	}
	r.mu.Unlock()
	writeRouterJSON(w, http.StatusOK, map[string]any{"workers": ws, "total": len(ws),
		"stats": map[string]int{"prefill_count": 0, "decode_count": 0, "regular_count": len(ws)}})
}

func workerError(w http.ResponseWriter, code int, kind, msg string) {
	writeRouterJSON(w, code, map[string]string{"error": msg, "code": kind})
}

func (r *Router) createWorker(w http.ResponseWriter, req *http.Request) {
	var body struct {
		URL string `json:"url"`
	}
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&body); err != nil {
		workerError(w, http.StatusUnprocessableEntity, "BAD_REQUEST", "Failed to deserialize the JSON body: "+err.Error())
		return
	}
	if err := workerURL(body.URL); err != nil {
		workerError(w, http.StatusBadRequest, "BAD_REQUEST", err.Error())
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		workerError(w, http.StatusInternalServerError, "INTERNAL_SERVER_ERROR", "Job queue shutting down")
		return
	}
	x := r.known(body.URL)
	if !r.isListed(x) {
		r.status[x.url] = newJobStatus("AddWorker", x.url, "pending", "")
		r.jobs.Add(1)
		go r.addJob(x)
	}
	r.mu.Unlock()
	loc := "/workers/" + x.id
	w.Header().Set("Location", loc)
	writeRouterJSON(w, http.StatusAccepted, map[string]string{"status": "accepted", "worker_id": x.id, "url": x.url,
		"location": loc, "message": "Worker addition queued for background processing"})
}

// addJob waits JobDelay, then for the worker's /health, and lists it.
func (r *Router) addJob(x *rworker) {
	defer r.jobs.Done()
	if !r.sleep(r.opts.JobDelay) {
		return
	}
	r.setStatus(x, "AddWorker", "processing", "")
	deadline := time.Now().Add(r.opts.StartupTimeout)
	last := "no answer yet"
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, x.url+"/health", nil)
		resp, err := r.client.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				break
			}
			last = fmt.Sprintf("HTTP %d", resp.StatusCode)
		} else {
			last = err.Error()
		}
		cancel()
		if time.Now().After(deadline) {
			r.setStatus(x, "AddWorker", "failed", fmt.Sprintf("Worker %s failed health check within %s: %s", x.url, r.opts.StartupTimeout, last))
			r.log.Info("router: add failed", "worker", x.url, "last", last)
			return
		}
		if !r.sleep(50 * time.Millisecond) {
			return
		}
	}
	r.mu.Lock()
	if !r.isListed(x) {
		r.listed = append(r.listed, x)
	}
	delete(r.status, x.url)
	r.mu.Unlock()
	r.log.Info("router: worker added", "worker", x.url)
}

func (r *Router) setStatus(x *rworker, job, status, msg string) {
	r.mu.Lock()
	r.status[x.url] = newJobStatus(job, x.url, status, msg)
	r.mu.Unlock()
}

func newJobStatus(job, url, status, msg string) jobStatus {
	return jobStatus{JobType: job, WorkerURL: url, Status: status, Message: msg, Timestamp: time.Now().Unix()}
}

// sleep waits d; false when the router closed meanwhile.
func (r *Router) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.done:
		return false
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)

// byID finds the worker of a path's {id}, answering the error itself.
func (r *Router) byID(w http.ResponseWriter, raw string) *rworker {
	if !uuidRE.MatchString(raw) {
		workerError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("Invalid worker_id '%s' (expected UUID). Error: invalid character", raw))
		return nil
	}
	for _, x := range r.all {
		if strings.EqualFold(x.id, raw) {
			return x
		}
	}
	workerError(w, http.StatusNotFound, "WORKER_NOT_FOUND", fmt.Sprintf("Worker %s not found", raw))
	return nil
}

func (r *Router) getWorker(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.byID(w, req.PathValue("id"))
	if x == nil {
		return
	}
	var js *jobStatus
	if s, ok := r.status[x.url]; ok {
		js = &s
	}
	if !r.isListed(x) && js == nil {
		workerError(w, http.StatusNotFound, "WORKER_NOT_FOUND", fmt.Sprintf("Worker %s not found", x.id))
		return
	}
	writeRouterJSON(w, http.StatusOK, workerInfo(x, r.isListed(x), js))
}

func (r *Router) deleteWorker(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.byID(w, req.PathValue("id"))
	if x == nil {
		return
	}
	if !r.isListed(x) {
		workerError(w, http.StatusNotFound, "WORKER_NOT_FOUND", fmt.Sprintf("Worker %s not found", x.id))
		return
	}
	if r.closed {
		workerError(w, http.StatusInternalServerError, "INTERNAL_SERVER_ERROR", "Job queue shutting down")
		return
	}
	r.status[x.url] = newJobStatus("RemoveWorker", x.url, "pending", "")
	r.jobs.Add(1)
	go func() {
		defer r.jobs.Done()
		if !r.sleep(r.opts.JobDelay) {
			return
		}
		r.mu.Lock()
		for i, y := range r.listed {
			if y == x {
				r.listed = append(r.listed[:i:i], r.listed[i+1:]...)
				break
			}
		}
		delete(r.status, x.url)
		r.mu.Unlock()
		r.log.Info("router: worker removed", "worker", x.url)
	}()
	writeRouterJSON(w, http.StatusAccepted, map[string]string{"status": "accepted", "worker_id": x.id,
		"message": "Worker removal queued for background processing"})
}

// pick returns the next listed worker (round robin), skipping those in
// tried while others remain; nil when none is listed.
func (r *Router) pick(tried map[*rworker]bool) *rworker {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.listed)
	if n == 0 {
		return nil
	}
	start := int(r.rr.Add(1) - 1)
	for i := range n {
		if x := r.listed[(start+i)%n]; !tried[x] {
			return x
		}
	}
	return r.listed[start%n]
}

// retryable is the gateway's list of statuses worth another worker.
func retryable(code int) bool {
	switch code {
	case 408, 429, 500, 502, 503, 504:
		return true
	}
	return false
}

// proxy sends the request to a worker and streams its answer back.
func (r *Router) proxy(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		r.failures.Add(1)
		writeRouterJSON(w, http.StatusBadRequest, map[string]string{"error": "reading the request: " + err.Error()})
		return
	}
	tried := map[*rworker]bool{}
	var lastErr string
	for attempt := 0; attempt <= r.opts.Retries; attempt++ {
		x := r.pick(tried)
		if x == nil {
			r.failures.Add(1)
			writeRouterJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "No available workers"})
			return
		}
		tried[x] = true
		resp, err := r.send(req, x, body)
		last := attempt == r.opts.Retries
		if err != nil {
			x.inflight.Add(-1)
			if req.Context().Err() != nil {
				return // the client left: no one to answer, nothing the worker did
			}
			x.failures.Add(1)
			lastErr = fmt.Sprintf("worker %s: %v", x.url, err)
			if last {
				r.failures.Add(1)
				writeRouterJSON(w, http.StatusBadGateway, map[string]string{"error": "Failed to send request to worker " + lastErr})
				return
			}
			continue
		}
		if retryable(resp.StatusCode) && !last {
			x.failures.Add(1)
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			x.inflight.Add(-1)
			continue
		}
		r.relay(req.Context(), w, resp, x)
		return
	}
}

// send makes one attempt on x; on success x's in-flight count stays raised
// until relay ends (on error too, for the caller to lower).
func (r *Router) send(req *http.Request, x *rworker, body []byte) (*http.Response, error) {
	x.requests.Add(1)
	x.inflight.Add(1)
	out, err := http.NewRequestWithContext(req.Context(), req.Method, x.url+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Content-Type", "Accept", "Authorization"} {
		if v := req.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	return r.client.Do(out)
}

// relay streams resp to w, flushing as it comes, and counts the outcome.
// A stream its client left is no failure of the worker's.
func (r *Router) relay(ctx context.Context, w http.ResponseWriter, resp *http.Response, x *rworker) {
	defer x.inflight.Add(-1)
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	failed := resp.StatusCode >= 500 || resp.StatusCode == 408 || resp.StatusCode == 429
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				break // the client left: not the worker's failure
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			failed = ctx.Err() == nil
			break
		}
	}
	if failed {
		x.failures.Add(1)
		r.failures.Add(1)
	}
}

// workerURL checks a worker's URL: http(s) with a host.
func workerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("worker url %q: want http://HOST:PORT", s)
	}
	return nil
}

func writeRouterJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
