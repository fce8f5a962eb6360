// Package router talks to the router in front of a replicated service's
// replicas: it lists the router's workers, removes a replica before its
// engine stops (a drain) and adds it back once it serves.
package router

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// KindSGLang is SGLang's router (SGLang Model Gateway) and its worker API
// (sglang.go says which version and where).
const KindSGLang = "sglang"

// Worker is one worker a router balances requests to.
type Worker struct {
	URL     string
	Healthy bool // as the router reports it; true where it reports nothing
}

// Client is a router's worker API.
type Client interface {
	// Workers lists the workers the router sends requests to now.
	Workers(ctx context.Context) ([]Worker, error)
	// Add puts url back among the router's workers; adding one already
	// there is no error. It returns once the router lists url as healthy,
	// or with an error (the router's answer quoted) at ctx's end or the
	// client's own deadline.
	Add(ctx context.Context, url string) error
	// Remove takes url out of the router's workers, so that it gets no new
	// request; removing one not there is no error. It returns once the
	// router no longer lists url; requests already sent to it are the
	// router's to finish.
	Remove(ctx context.Context, url string) error
}

// New returns the client for a router of kind ("" is KindSGLang) at base
// (its base URL), making its requests with hc (nil: a plain client). No
// client follows a redirect, whatever hc says.
func New(kind, base string, hc *http.Client) (Client, error) {
	switch kind {
	case KindSGLang, "":
		return NewSGLang(base, hc)
	}
	return nil, fmt.Errorf("router kind %q: opsbot speaks %q", kind, KindSGLang)
}

// Same reports whether a and b name the same worker: routers keep a
// worker's URL as it was given, and a trailing slash is not a difference.
func Same(a, b string) bool {
	return strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
}

// Find returns the worker of ws that is url, if any.
func Find(ws []Worker, url string) (Worker, bool) {
	for _, w := range ws {
		if Same(w.URL, url) {
			return w, true
		}
	}
	return Worker{}, false
}
