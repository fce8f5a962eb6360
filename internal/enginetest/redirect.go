// Package enginetest has servers that stand where an engine should, for tests of opsbot's
// engine clients: Redirect, a server on the engine's port that answers every request with a
// redirect to another loopback server holding a secret (the probe of an engine's port taken
// over while the engine was down). They are real HTTP servers on 127.0.0.1.
package enginetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Secret is what the redirect's target answers: what opsbot must never fetch nor quote.
const Secret = `{"AccessKeyId":"AKIA-METADATA-SECRET"}`

// MetaPath is the path the redirect points at on its target.
const MetaPath = "/latest/meta-data/iam"

// Redirect is a server on an engine's port (Engine) answering every request "302 Found" with
// Location: Target's URL + MetaPath, and the target, which answers Secret to anything. Each of
// Engine's answers closes its connection, so every request to it is one connection (one
// direct-tcpip channel through a via_ssh tunnel). Both stop with the test.
type Redirect struct {
	Engine, Target *httptest.Server
	Location       string // the Location Engine sends

	engineHits, targetHits atomic.Int64
}

// StartRedirect starts a Redirect.
func StartRedirect(t testing.TB) *Redirect {
	t.Helper()
	r := &Redirect{}
	r.Target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.targetHits.Add(1)
		io.WriteString(w, Secret)
	}))
	t.Cleanup(r.Target.Close)
	r.Location = r.Target.URL + MetaPath
	r.Engine = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.engineHits.Add(1)
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Connection", "close")
		w.Header().Set("Location", r.Location)
		w.WriteHeader(http.StatusFound)
		io.WriteString(w, "moved")
	}))
	t.Cleanup(r.Engine.Close)
	return r
}

// EngineHits is how many requests Engine answered.
func (r *Redirect) EngineHits() int64 { return r.engineHits.Load() }

// TargetHits is how many requests reached the target: opsbot must make none.
func (r *Redirect) TargetHits() int64 { return r.targetHits.Load() }

// TargetAddr is the target's host:port.
func (r *Redirect) TargetAddr() string { return strings.TrimPrefix(r.Target.URL, "http://") }

// EngineAddr is Engine's host:port.
func (r *Redirect) EngineAddr() string { return strings.TrimPrefix(r.Engine.URL, "http://") }

// CheckRefused fails t unless text (an error, opsbot's output) names the 302 and its Location
// and quotes nothing of the secret, and the target got no request.
func (r *Redirect) CheckRefused(t testing.TB, what, text string) {
	t.Helper()
	for _, want := range []string{"302", r.Location} {
		if !strings.Contains(text, want) {
			t.Errorf("%s: %q does not name %q", what, text, want)
		}
	}
	if strings.Contains(text, "AKIA") || strings.Contains(text, "AccessKeyId") {
		t.Errorf("%s quotes the redirect target's secret: %q", what, text)
	}
	if n := r.TargetHits(); n != 0 {
		t.Errorf("%s: the redirect's target got %d requests, want none", what, n)
	}
}
