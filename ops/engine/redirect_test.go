package engine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/enginetest"
	"github.com/opsbot/opsbot/internal/testkit"
)

// TestNoRedirectFollowed: a server on the engine's port answering every request "302 Location:
// <another loopback port>/latest/meta-data/iam" makes each engine call an error that names the
// 302 and the Location; the other port gets no request and nothing of what it holds is quoted.
// It holds for the client New makes and for one handed in that follows redirects itself.
func TestNoRedirectFollowed(t *testing.T) {
	r := enginetest.StartRedirect(t)
	ctx := testkit.Context(t, 20*time.Second)
	for name, c := range map[string]*Client{
		"New":                New(r.Engine.URL),
		"a following client": {BaseURL: r.Engine.URL, HTTP: &http.Client{}},
		"http.DefaultClient": {BaseURL: r.Engine.URL},
	} {
		ph, err := c.Probe(ctx)
		if ph != PhaseError {
			t.Errorf("%s: probe is %s, want error", name, ph)
		}
		calls := map[string]error{"probe": err}
		_, calls["server info"] = c.ServerInfo(ctx)
		_, calls["metrics"] = c.Metrics(ctx)
		_, calls["models"] = c.Models(ctx)
		calls["flush cache"] = c.FlushCache(ctx)
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		calls["wait ready"] = c.WaitReady(wctx, 20*time.Millisecond, nil)
		cancel()
		for call, err := range calls {
			var re *RedirectError
			if !errors.As(err, &re) && call != "wait ready" {
				t.Errorf("%s: %s: %v (%T), want a *RedirectError", name, call, err, err)
			}
			if err == nil {
				continue
			}
			r.CheckRefused(t, name+": "+call, err.Error())
		}
	}
}

// TestRedirectStatusesAndLocation: every answer in 300..399 is refused, named with its status
// and an Excerpt of its Location (none: "with no Location"); 200 and 404 are not redirects.
func TestRedirectStatusesAndLocation(t *testing.T) {
	var code int
	var loc string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if loc != "" {
			w.Header().Set("Location", loc)
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	long := "http://127.0.0.1:1/" + strings.Repeat("a", 500)
	for _, c := range []struct {
		code      int
		loc, want string
	}{
		{301, "http://127.0.0.1:1/x", "HTTP 301 redirect to http://127.0.0.1:1/x, not followed"},
		{307, "/elsewhere", "HTTP 307 redirect to /elsewhere, not followed"},
		{308, long, "HTTP 308 redirect to " + long[:ExcerptRunes] + "..., not followed"},
		{300, "", "HTTP 300 redirect with no Location, not followed"},
		{304, "", "HTTP 304 redirect with no Location, not followed"},
		{303, "http://127.0.0.1:1/\u202eevil\xff", "HTTP 303 redirect to http://127.0.0.1:1/ evil, not followed"},
	} {
		code, loc = c.code, c.loc
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/health", nil)
		resp, err := Do(&http.Client{}, req)
		var re *RedirectError
		if resp != nil || !errors.As(err, &re) || re.Code != c.code || !strings.Contains(err.Error(), c.want) ||
			!strings.HasPrefix(err.Error(), `Get "`+srv.URL+`/health": `) {
			t.Errorf("HTTP %d Location %q: %v, want a *RedirectError saying %q", c.code, c.loc, err, c.want)
		}
	}
	loc = ""
	for _, code = range []int{200, 404} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		resp, err := Do(nil, req)
		if err != nil || resp.StatusCode != code {
			t.Errorf("HTTP %d: %v, want the answer as it came", code, err)
			continue
		}
		resp.Body.Close()
	}
}

// TestExcerpt: an engine's text is quoted short and printable.
func TestExcerpt(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"  engine says hi \n", "engine says hi"},
		{"line one\r\nline two\t\tend", "line one line two end"},
		{"bell\x07 esc\x1b[2J nul\x00", "bell esc [2J nul"},
		{"bad \xff\xfe utf8", "bad utf8"},
		{"bidi \u202eevil\u202c ok", "bidi evil ok"},
		{"schön ünïcode 日本", "schön ünïcode 日本"},
		{strings.Repeat("x", ExcerptRunes), strings.Repeat("x", ExcerptRunes)},
		{strings.Repeat("x", ExcerptRunes+1), strings.Repeat("x", ExcerptRunes) + "..."},
		{strings.Repeat("é", 300), strings.Repeat("é", ExcerptRunes) + "..."},
		{strings.Repeat("x", ExcerptRunes-1) + "   y", strings.Repeat("x", ExcerptRunes-1) + "..."},
	} {
		if got := Excerpt(c.in); got != c.want {
			t.Errorf("Excerpt(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestAddr: an engine URL's one address, and the URLs that are not an engine's.
func TestAddr(t *testing.T) {
	for _, c := range []struct{ url, want, err string }{
		{"http://127.0.0.1:30000", "127.0.0.1:30000", ""},
		{"http://127.0.0.1:30000/v1/", "127.0.0.1:30000", ""},
		{"http://gpu1.example.internal", "gpu1.example.internal:80", ""},
		{"https://gpu1.example.internal", "gpu1.example.internal:443", ""},
		{"http://[::1]:8000", "[::1]:8000", ""},
		{"http://127.0.0.1:1", "127.0.0.1:1", ""},
		{"http://127.0.0.1:65535", "127.0.0.1:65535", ""},
		{"http://127.0.0.1:0", "", "must have a port from 1 to 65535"},
		{"http://127.0.0.1:99999", "", "must have a port from 1 to 65535"},
		{"http://127.0.0.1:65536", "", "must have a port from 1 to 65535"},
		{"gpu1:30000", "", "must be the engine's http(s) base URL"},
		{"ftp://gpu1:30000", "", "must be the engine's http(s) base URL"},
		{"http://", "", "must be the engine's http(s) base URL"},
		{"http://:30000", "", "must be the engine's http(s) base URL"},
	} {
		got, err := Addr(c.url)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && err.Error() != c.err {
			t.Errorf("Addr(%q) = %q, %v; want %q, %q", c.url, got, err, c.want, c.err)
		}
	}
}
