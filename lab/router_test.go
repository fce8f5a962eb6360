package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// routedLab is the default lab (qwen on gpu1, coder on gpu2: two SGLang
// engines behind their units) with both engines ready behind a lab router.
func routedLab(t *testing.T, ro RouterOptions) (*Lab, *Router, []string) {
	t.Helper()
	l := startLab(t, fastOpts())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var urls []string
	for _, s := range l.Topology().Services {
		if err := l.WaitReady(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, s.URL)
	}
	ro.Workers = append(urls, ro.Workers...)
	r, err := StartRouter(ro)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return l, r, urls
}

// generate sends one short native request through base and reports its status.
func generate(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Post(base+"/generate", "application/json",
		strings.NewReader(`{"text": "hello", "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func routerJSON(t *testing.T, method, u, body string, into any) int {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s %s: %v in %q", method, u, err, b)
		}
	}
	return resp.StatusCode
}

type gwList struct {
	Workers []struct {
		ID        string `json:"id"`
		URL       string `json:"url"`
		IsHealthy bool   `json:"is_healthy"`
	} `json:"workers"`
}

func listedIDs(t *testing.T, r *Router) map[string]string {
	t.Helper()
	var l gwList
	if code := routerJSON(t, "GET", r.URL()+"/workers", "", &l); code != 200 {
		t.Fatalf("GET /workers: HTTP %d", code)
	}
	out := map[string]string{}
	for _, w := range l.Workers {
		out[w.URL] = w.ID
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRouterSpreadsRequests(t *testing.T) {
	t.Parallel()
	_, r, urls := routedLab(t, RouterOptions{})
	for range 10 {
		if code := generate(t, r.URL()); code != 200 {
			t.Fatalf("generate through the router: HTTP %d", code)
		}
	}
	// Chat and completions, streamed, go through too.
	for _, p := range []string{`/v1/completions {"prompt": "hi", "max_tokens": 4, "stream": true}`,
		`/v1/chat/completions {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true}`} {
		path, body, _ := strings.Cut(p, " ")
		resp, err := http.Post(r.URL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "data: [DONE]") {
			t.Fatalf("%s through the router: HTTP %d %q", path, resp.StatusCode, b)
		}
	}
	st := r.Stats()
	if st.Requests != 12 || st.Failures != 0 {
		t.Fatalf("router counted %d requests, %d failures; want 12, 0", st.Requests, st.Failures)
	}
	for _, u := range urls {
		if n := st.Workers[u].Requests; n != 6 {
			t.Errorf("worker %s got %d of 12 requests; round robin gives each 6", u, n)
		}
	}
}

func TestRouterRemoveDrainsAndAddBack(t *testing.T) {
	t.Parallel()
	_, r, urls := routedLab(t, RouterOptions{})
	gone, stays := urls[0], urls[1]
	ids := listedIDs(t, r)
	if ids[gone] == "" || ids[stays] == "" {
		t.Fatalf("GET /workers lists %v; want both engines", ids)
	}

	// A long stream runs on the worker about to go (round robin sends the
	// router's first request to its first worker), its first event come.
	resp, err := http.Post(r.URL()+"/generate", "application/json",
		strings.NewReader(`{"text": "a long one", "stream": true, "sampling_params": {"max_new_tokens": 400, "ignore_eos": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if n := r.Stats().Workers[gone].InFlight; n != 1 {
		t.Fatalf("the first request is not running on the first worker: in flight there %d", n)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	var acc struct {
		Status   string `json:"status"`
		WorkerID string `json:"worker_id"`
	}
	if code := routerJSON(t, "DELETE", r.URL()+"/workers/"+ids[gone], "", &acc); code != 202 || acc.Status != "accepted" {
		t.Fatalf("DELETE /workers/ID: HTTP %d %+v; want 202 accepted", code, acc)
	}
	waitFor(t, "the removal to show in GET /workers", func() bool { _, ok := listedIDs(t, r)[gone]; return !ok })
	before := r.Stats().Workers[gone].Requests
	for range 6 {
		if code := generate(t, r.URL()); code != 200 {
			t.Fatalf("generate after the removal: HTTP %d", code)
		}
	}
	st := r.Stats()
	if st.Workers[gone].Requests != before {
		t.Fatalf("the removed worker got %d new requests", st.Workers[gone].Requests-before)
	}
	if st.Workers[gone].InFlight != 1 {
		t.Fatalf("the removed worker's stream ended early: in flight %d", st.Workers[gone].InFlight)
	}
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), "data: [DONE]") {
		t.Fatalf("the in-flight stream did not finish after its worker was removed: %v, %q", err, tail(string(rest)))
	}
	if st := r.Stats(); st.Failures != 0 || st.Workers[gone].Failures != 0 {
		t.Fatalf("failures after a drain: %+v", st)
	}

	// Added back: POST /workers is accepted at once and listed after its job ran.
	var add struct {
		Status   string `json:"status"`
		WorkerID string `json:"worker_id"`
	}
	if code := routerJSON(t, "POST", r.URL()+"/workers", `{"url": "`+gone+`"}`, &add); code != 202 || add.WorkerID != ids[gone] {
		t.Fatalf("POST /workers: HTTP %d %+v; want 202 with the worker's old id %s", code, add, ids[gone])
	}
	waitFor(t, "the add to show in GET /workers", func() bool { _, ok := listedIDs(t, r)[gone]; return ok })
	before = r.Stats().Workers[gone].Requests
	for range 4 {
		generate(t, r.URL())
	}
	if got := r.Stats().Workers[gone].Requests - before; got != 2 {
		t.Fatalf("the worker added back got %d of 4 requests; want 2", got)
	}
}

func TestRouterWorkerAPIErrors(t *testing.T) {
	t.Parallel()
	r, err := StartRouter(RouterOptions{StartupTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var e struct {
		Error, Code string
	}
	if code := routerJSON(t, "DELETE", r.URL()+"/workers/http%3A%2F%2F127.0.0.1%3A1", "", &e); code != 400 || e.Code != "BAD_REQUEST" {
		t.Errorf("DELETE by URL: HTTP %d %+v; want 400 BAD_REQUEST (the id is a UUID)", code, e)
	}
	if code := routerJSON(t, "GET", r.URL()+"/workers/2f3a0c3e-3a7b-4c3f-8c70-1b7d4c3a6e1f", "", &e); code != 404 || e.Code != "WORKER_NOT_FOUND" {
		t.Errorf("GET an unknown id: HTTP %d %+v; want 404 WORKER_NOT_FOUND", code, e)
	}
	if code := generate(t, r.URL()); code != 503 {
		t.Errorf("a request with no worker: HTTP %d; want 503", code)
	}
	if st := r.Stats(); st.Failures != 1 {
		t.Errorf("a request with no worker counted %d failures; want 1", st.Failures)
	}
	// A worker whose /health never answers: the add's job fails, and says why.
	dead := testkit.ClosedURL(t)
	var add struct {
		WorkerID string `json:"worker_id"`
	}
	if code := routerJSON(t, "POST", r.URL()+"/workers", `{"url": "`+dead+`"}`, &add); code != 202 {
		t.Fatalf("POST /workers: HTTP %d", code)
	}
	var info struct {
		JobStatus *struct{ Status, Message string } `json:"job_status"`
	}
	waitFor(t, "the add's job to fail", func() bool {
		routerJSON(t, "GET", r.URL()+"/workers/"+add.WorkerID, "", &info)
		return info.JobStatus != nil && info.JobStatus.Status == "failed"
	})
	if !strings.Contains(info.JobStatus.Message, "health check") || len(r.Workers()) != 0 {
		t.Errorf("failed add: %q, workers %v", info.JobStatus.Message, r.Workers())
	}
}

func TestRouterCountsAFailingWorker(t *testing.T) {
	t.Parallel()
	dead := testkit.ClosedURL(t)
	_, r, urls := routedLab(t, RouterOptions{Workers: []string{dead}})
	failed := 0
	for range 6 {
		if generate(t, r.URL()) != 200 {
			failed++
		}
	}
	st := r.Stats()
	if failed != 2 || st.Failures != 2 || st.Workers[dead].Failures != 2 {
		t.Fatalf("with a dead worker among 3 and no retries: %d failed requests, stats %+v; want 2", failed, st)
	}
	// With retries (SGLang's default), the client sees none; the worker's failures are still counted.
	r2, err := StartRouter(RouterOptions{Workers: append(urls, dead), Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	for range 6 {
		if code := generate(t, r2.URL()); code != 200 {
			t.Fatalf("with a retry: HTTP %d", code)
		}
	}
	if st := r2.Stats(); st.Failures != 0 || st.Workers[dead].Failures != 2 {
		t.Fatalf("with a retry: stats %+v; want no failed request and 2 failures of the dead worker", st)
	}
}

func tail(s string) string {
	if len(s) > 200 {
		return "..." + s[len(s)-200:]
	}
	return s
}
