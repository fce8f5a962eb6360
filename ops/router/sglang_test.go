package router_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops/router"
)

// routed starts the default lab (two SGLang engines) with both behind the
// lab's router, which speaks SGLang Model Gateway's worker API.
func routed(t *testing.T) (*lab.Router, []string) {
	t.Helper()
	l := labtest.Start(t, lab.Options{TimeScale: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var urls []string
	for _, s := range l.Topology().Services {
		if err := l.WaitReady(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, s.URL)
	}
	// A job delay long enough that a client not polling would return before the change.
	r, err := lab.StartRouter(lab.RouterOptions{Workers: urls, JobDelay: 100 * time.Millisecond, StartupTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, urls
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestSGLangRemoveAndAdd(t *testing.T) {
	r, urls := routed(t)
	c, err := router.New(router.KindSGLang, r.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.Workers(ctx(t))
	if err != nil || len(ws) != 2 || !ws[0].Healthy || !ws[1].Healthy {
		t.Fatalf("Workers: %+v, %v; want both engines, healthy", ws, err)
	}

	if err := c.Remove(ctx(t), urls[0]+"/"); err != nil {
		t.Fatal(err)
	}
	// Remove returned only once the router stopped listing it (its job runs 100ms later).
	if got := r.Workers(); len(got) != 1 || got[0] != urls[1] {
		t.Fatalf("after Remove the router lists %v; want only %s", got, urls[1])
	}
	if err := c.Remove(ctx(t), urls[0]); err != nil {
		t.Fatalf("removing a worker not there: %v; want no error", err)
	}

	if err := c.Add(ctx(t), urls[0]); err != nil {
		t.Fatal(err)
	}
	if got := r.Workers(); len(got) != 2 {
		t.Fatalf("after Add the router lists %v; want both", got)
	}
	if err := c.Add(ctx(t), urls[0]); err != nil {
		t.Fatalf("adding a worker already there: %v; want no error", err)
	}

	// An add the router's job fails: the error quotes the router's reason, at once.
	dead := testkit.ClosedURL(t)
	start := time.Now()
	err = c.Add(ctx(t), dead)
	if err == nil || !strings.Contains(err.Error(), "failed health check") {
		t.Fatalf("adding a dead worker: %v; want the router's job failure quoted", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the failed add took %s: the client waited past the job's failure", d)
	}
}

func TestSGLangWaitEnds(t *testing.T) {
	r, _ := routed(t)
	c, err := router.NewSGLang(r.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The router accepts the add but its job never finishes within the client's wait.
	c.Wait = 50 * time.Millisecond
	err = c.Add(ctx(t), testkit.ClosedURL(t))
	if err == nil || !strings.Contains(err.Error(), "did not show the change") {
		t.Fatalf("Add past its wait: %v", err)
	}
}

// The answers below come from httptest servers standing where a router
// should: a router that answers an error or a redirect cannot be made of
// the lab's.
func TestSGLangQuotesAnswers(t *testing.T) {
	long := strings.Repeat("x", 5000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/workers":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error": "Job queue full\u001b[31m ` + long + `", "code": "INTERNAL_SERVER_ERROR"}`))
		default:
			http.Redirect(w, r, "http://elsewhere.example/", http.StatusFound)
		}
	}))
	defer srv.Close()
	c, _ := router.New("", srv.URL, nil)
	_, err := c.Workers(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "HTTP 500") || !strings.Contains(err.Error(), "Job queue full") {
		t.Fatalf("Workers on a 500: %v", err)
	}
	if len(err.Error()) > 400 || strings.Contains(err.Error(), "\x1b") {
		t.Fatalf("the router's answer is not quoted bounded and printable: %d bytes: %q", len(err.Error()), err)
	}

	c2, _ := router.New("sglang", srv.URL+"/elsewhere", nil)
	_, err = c2.Workers(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "redirect, not followed") {
		t.Fatalf("Workers on a redirect: %v", err)
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := router.New("nginx", "http://127.0.0.1:1", nil); err == nil || !strings.Contains(err.Error(), `"sglang"`) {
		t.Errorf("an unknown kind: %v", err)
	}
	if _, err := router.New("sglang", "127.0.0.1:30080", nil); err == nil {
		t.Error("a URL with no scheme: no error")
	}
}
