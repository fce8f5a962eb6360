// Package router talks to the router in front of a replicated service's
// replicas: it lists the router's workers, removes a replica before its
// engine stops (a drain) and adds it back once it serves.
package router

import (
	"context"
	"fmt"
	"net/http"
)

// KindSGLang is SGLang's router (SGLang Model Gateway) and its worker API.
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
	// there is no error.
	Add(ctx context.Context, url string) error
	// Remove takes url out of the router's workers, so that it gets no new
	// request; removing one not there is no error.
	Remove(ctx context.Context, url string) error
}

// New returns the client for a router of kind at base (its base URL),
// making its requests with hc.
func New(kind, base string, hc *http.Client) (Client, error) {
	switch kind {
	case KindSGLang, "":
		return nil, fmt.Errorf("router kind %q: not built yet", kind)
	}
	return nil, fmt.Errorf("router kind %q: opsbot speaks %q", kind, KindSGLang)
}
