package bench

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/internal/enginetest"
	"github.com/opsbot/opsbot/ops/engine"
)

// TestRedirectNotFollowed: a server on the engine's port answering every request with a 302 to
// another loopback port fails the benchmark, model lookup or requests, with errors naming the
// 302 and the Location; the other port gets nothing and its answer is quoted nowhere. So does
// the acceptance measure's flush and /server_info or /metrics. It holds with the client Run
// makes and with one handed in that follows redirects itself.
func TestRedirectNotFollowed(t *testing.T) {
	r := enginetest.StartRedirect(t)
	for _, c := range []struct {
		name  string
		model string
		hc    *http.Client
		acc   Acceptance
	}{
		{"model from /v1/models", "", nil, nil},
		{"model given, SGLang acceptance", "m", nil, SGLangAcceptance(engine.New(r.Engine.URL), nil)},
		{"model given, vLLM acceptance", "m", nil, VLLMAcceptance(engine.New(r.Engine.URL))},
		{"a following client", "m", &http.Client{}, nil},
	} {
		o := opts(r.Engine.URL)
		o.Model, o.HTTP, o.Acceptance = c.model, c.hc, c.acc
		res, err := run(t, o)
		if err == nil {
			t.Fatalf("%s: the benchmark of a redirecting server succeeded: %+v", c.name, res)
		}
		text := err.Error()
		if c.model != "" {
			if !errors.Is(err, ErrMostFailed) || res == nil || res.RequestsFailed != o.Prompts {
				t.Errorf("%s: %v, %+v; want every request failed", c.name, err, res)
			}
			text += "\n" + strings.Join(res.Errors, "\n")
		}
		r.CheckRefused(t, c.name, text)
		if c.acc != nil && !strings.Contains(text, "acceptance: ") {
			t.Errorf("%s: no acceptance error in %q", c.name, text)
		}
	}
}
