package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestProbePhases(t *testing.T) {
	var code atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			t.Errorf("probe asked %s", r.URL.Path)
		}
		w.WriteHeader(int(code.Load()))
		w.Write([]byte("engine says hi"))
	}))
	defer srv.Close()
	c := New(srv.URL + "/v1/")
	if c.BaseURL != srv.URL {
		t.Fatalf("BaseURL %q, want %q", c.BaseURL, srv.URL)
	}
	for _, tc := range []struct {
		code    int
		want    Phase
		wantErr bool
	}{{200, PhaseReady, false}, {503, PhaseLoading, false}, {500, PhaseError, true}, {404, PhaseError, true}} {
		code.Store(int32(tc.code))
		ph, err := c.Probe(context.Background())
		if ph != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("HTTP %d: got %s, %v; want %s (error %v)", tc.code, ph, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "engine says hi") {
			t.Errorf("HTTP %d: error %q does not quote the body", tc.code, err)
		}
	}
}

func TestProbeRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ph, err := New("http://" + addr).Probe(context.Background())
	if ph != PhaseRefused || err != nil {
		t.Fatalf("closed port: got %s, %v; want refused, nil", ph, err)
	}
}

func TestProbeTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := New(srv.URL)
	c.ProbeTimeout = 50 * time.Millisecond
	t0 := time.Now()
	ph, err := c.Probe(context.Background())
	if ph != PhaseError || err == nil {
		t.Fatalf("hung server: got %s, %v; want error", ph, err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("probe took %s despite a 50ms timeout", d)
	}
}

// refusingDialer refuses connections while refuse is set, then dials for real.
func refusingClient(srv *httptest.Server, refuse *atomic.Bool) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	return &Client{BaseURL: srv.URL, HTTP: &http.Client{Transport: tr}}
}

func TestWaitReadyGoesThroughPhases(t *testing.T) {
	var probes atomic.Int32
	var refuse atomic.Bool
	refuse.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probes.Add(1) < 4 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	}))
	defer srv.Close()
	c := refusingClient(srv, &refuse)
	var mu sync.Mutex
	var seen []Phase
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	err := c.WaitReady(ctx, time.Millisecond, func(p Phase, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, p)
		n++
		if p == PhaseRefused {
			refuse.Store(false)
		}
	})
	if err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	want := []Phase{PhaseRefused, PhaseLoading, PhaseReady}
	if len(seen) != len(want) {
		t.Fatalf("phases %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("phases %v, want %v", seen, want)
		}
	}
}

func TestWaitReadyCtxEndNamesPhase(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := New(srv.URL).WaitReady(ctx, 5*time.Millisecond, nil)
	var nr *NotReadyError
	if !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want *NotReadyError wrapping DeadlineExceeded", err)
	}
	if nr.Phase != PhaseLoading || nr.For <= 0 || !strings.Contains(err.Error(), "loading for the last") {
		t.Fatalf("error %q (phase %s for %s) does not name the loading phase and its length", err, nr.Phase, nr.For)
	}
}

func TestServerInfo(t *testing.T) {
	newInfo := `{"speculative_algorithm":"EAGLE","speculative_num_steps":"3","speculative_eagle_topk":1,
	  "speculative_num_draft_tokens":4.0,"internal_states":[{"avg_spec_accept_length":"2.75"}],"tp_size":2}`
	for _, tc := range []struct {
		name, path string
	}{{"new", "/server_info"}, {"old", "/get_server_info"}} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked = append(asked, r.URL.Path)
				if r.URL.Path != tc.path {
					http.NotFound(w, r)
					return
				}
				w.Write([]byte(newInfo))
			}))
			defer srv.Close()
			info, err := New(srv.URL).ServerInfo(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.Algorithm != "EAGLE" || info.Steps != 3 || info.TopK != 1 || info.DraftTokens != 4 || info.AvgAcceptLen != 2.75 {
				t.Fatalf("got %+v", info)
			}
			if info.Raw["tp_size"] == nil {
				t.Fatalf("Raw lacks tp_size: %v", info.Raw)
			}
			if tc.name == "new" && len(asked) != 1 {
				t.Fatalf("asked %v, want only /server_info", asked)
			}
		})
	}
}

func TestServerInfoNullsAndErrors(t *testing.T) {
	info, err := ParseServerInfo([]byte(`{"speculative_algorithm":null,"speculative_num_steps":null,"internal_states":[{}]}`))
	if err != nil || info.Algorithm != "" || info.Steps != 0 || info.AvgAcceptLen != 0 {
		t.Fatalf("nulls: %+v, %v", info, err)
	}
	for _, bad := range []string{`{"speculative_num_steps":"three"}`, `{"speculative_num_steps":2.5}`, `[1]`, `null`, `{"speculative_algorithm":3}`} {
		if _, err := ParseServerInfo([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }))
	defer srv.Close()
	_, err = New(srv.URL).ServerInfo(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 500 {
		t.Fatalf("500: got %v", err)
	}
}

func TestModels(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model"},{"id":"draft"}]}`))
	}))
	defer srv.Close()
	ids, err := New(srv.URL).Models(context.Background())
	if err != nil || len(ids) != 2 || ids[0] != "Qwen/Qwen3-8B" || ids[1] != "draft" {
		t.Fatalf("got %v, %v", ids, err)
	}
}

// TestFlushCache: 200 is a flush, 400 (SGLang busy) is ErrFlushRefused, anything else a
// *StatusError naming POST; the request is a POST to /flush_cache, or a GET where the POST
// is not allowed.
func TestFlushCache(t *testing.T) {
	code, getOnly := http.StatusOK, false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/flush_cache" {
			http.Error(w, "want /flush_cache", http.StatusTeapot)
			return
		}
		if getOnly && r.Method != http.MethodGet || !getOnly && r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.WriteHeader(code)
		io.WriteString(w, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
	}))
	defer srv.Close()
	c := New(srv.URL)
	ctx := context.Background()
	if err := c.FlushCache(ctx); err != nil {
		t.Fatalf("flushed: %v", err)
	}
	code = http.StatusBadRequest
	if err := c.FlushCache(ctx); !errors.Is(err, ErrFlushRefused) {
		t.Fatalf("busy: %v", err)
	}
	code = http.StatusNotFound
	var se *StatusError
	if err := c.FlushCache(ctx); !errors.As(err, &se) || se.Code != 404 || !strings.Contains(err.Error(), "POST "+srv.URL+"/flush_cache: HTTP 404") {
		t.Fatalf("no endpoint: %v", err)
	}
	code, getOnly = http.StatusOK, true
	if err := c.FlushCache(ctx); err != nil {
		t.Fatalf("GET only: %v", err)
	}
}

// The steps SGLang runs now (its adaptive mode changes them with the batch)
// are internal_states[0].speculative_num_steps; 0 is speculation off, and an
// engine that does not say leaves them unknown, never 0.
func TestServerInfoRunningSteps(t *testing.T) {
	for _, tc := range []struct {
		body  string
		steps int
		has   bool
	}{
		{`{"speculative_num_steps":11,"internal_states":[{"speculative_num_steps":1,"avg_spec_accept_length":1.8}]}`, 1, true},
		{`{"speculative_num_steps":11,"internal_states":[{"speculative_num_steps":0}]}`, 0, true},
		{`{"speculative_num_steps":11,"internal_states":[{"speculative_num_steps":"3"}]}`, 3, true},
		{`{"speculative_num_steps":11,"internal_states":[{"avg_spec_accept_length":1.8}]}`, 0, false},
		{`{"speculative_num_steps":11,"internal_states":[{"speculative_num_steps":null}]}`, 0, false},
		{`{"speculative_num_steps":11}`, 0, false},
	} {
		info, err := ParseServerInfo([]byte(tc.body))
		if err != nil || info.RunningSteps != tc.steps || info.HasRunningSteps != tc.has || info.Steps != 11 {
			t.Errorf("%s: running steps %d (known %v), err %v; want %d (known %v)", tc.body, info.RunningSteps, info.HasRunningSteps, err, tc.steps, tc.has)
		}
	}
	for _, bad := range []string{`{"internal_states":[{"speculative_num_steps":1.5}]}`, `{"internal_states":[{"speculative_num_steps":-1}]}`,
		`{"internal_states":[{"speculative_num_steps":"many"}]}`} {
		if _, err := ParseServerInfo([]byte(bad)); err == nil || !strings.Contains(err.Error(), "internal_states[0].speculative_num_steps") {
			t.Errorf("%s: err %v, want one naming the field", bad, err)
		}
	}
}
