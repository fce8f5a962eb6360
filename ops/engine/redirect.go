package engine

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// RedirectError is an engine's answer in the 3xx range. opsbot follows no
// redirect from an engine: a server on the engine's port (the engine's, or
// whatever bound the port while the engine was down) must not be able to
// point opsbot, or the host's SSH server through a via_ssh tunnel, at any
// other address, nor get what another address answers quoted in chat. The
// answer's body is never read into the error. Do returns it inside a
// *url.Error that names the method and the URL asked.
type RedirectError struct {
	Code     int    // the HTTP status, 300 to 399
	Location string // an Excerpt of the Location header; "" when there was none
}

func (e *RedirectError) Error() string {
	to := "with no Location"
	if e.Location != "" {
		to = "to " + e.Location
	}
	return fmt.Sprintf("HTTP %d redirect %s, not followed: opsbot follows no redirect from an engine "+
		"(is something other than the engine listening on its port?)", e.Code, to)
}

// refuseRedirect is the CheckRedirect of every HTTP client opsbot uses
// toward an engine: the 3xx answer comes back unfollowed, and Do turns it
// into a *RedirectError.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// NewHTTPClient is the HTTP client for an engine over t: it follows no
// redirect. The engine Client's (NewVia) and the benchmark's are made here.
func NewHTTPClient(t http.RoundTripper) *http.Client {
	return &http.Client{Transport: t, CheckRedirect: refuseRedirect}
}

// Do sends req with hc (nil: http.DefaultClient) and follows no redirect,
// whatever hc's own CheckRedirect says, so a client handed in from elsewhere
// cannot widen the policy. An answer in the 3xx range is a *url.Error
// wrapping a *RedirectError, its body drained (a little, so the connection
// may be reused) and closed; any other answer is returned as it came. Every
// request of opsbot's to an engine goes through Do.
func Do(hc *http.Client, req *http.Request) (*http.Response, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	c := *hc
	c.CheckRedirect = refuseRedirect
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode < 300 || resp.StatusCode > 399 {
		return resp, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	re := &RedirectError{Code: resp.StatusCode, Location: Excerpt(resp.Header.Get("Location"))}
	return nil, &url.Error{Op: opName(req.Method), URL: req.URL.String(), Err: re}
}

// opName is net/http's spelling of a method in a *url.Error ("Get", "Post").
func opName(m string) string {
	if m == "" {
		return "Get"
	}
	return m[:1] + strings.ToLower(m[1:])
}
