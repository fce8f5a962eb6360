package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure the HTTP handler.
type Options struct {
	// Ready returns nil when opsbot takes requests: the store is open and
	// every enabled adapter is connected; else the reason, which /readyz
	// answers with 503.
	Ready func(ctx context.Context) error
	// Metrics are served on /metrics; nil serves none.
	Metrics *Metrics
	// Routes are the adapters' handlers by ServeMux pattern ("POST /slack/events").
	Routes map[string]http.Handler
	// Rejects counts the requests refused before they reach the bot; nil
	// counts nothing.
	Rejects *Rejects
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// a request counts against (http.trusted_proxies; see clientOf).
	TrustedProxies []netip.Prefix
}

// Handler serves GET /healthz (200 while the process is alive), GET /readyz
// (200 "ready", or 503 with the reason), GET /metrics and the adapters'
// routes. A route that clashes with another is an error.
func Handler(o Options) (_ http.Handler, err error) {
	return handler(o, &defaultLimits)
}

// handler is Handler with the gate's and the pace's limits.
func handler(o Options, lim *limits) (_ http.Handler, err error) {
	mux := http.NewServeMux()
	defer func() {
		// ServeMux panics on a conflicting pattern: say which instead.
		if p := recover(); p != nil {
			err = fmt.Errorf("mount HTTP routes: %v", p)
		}
	}()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if o.Ready != nil {
			if err := o.Ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	if o.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Metrics.reg, promhttp.HandlerOpts{ErrorLog: nil}))
	}
	for pattern, h := range o.Routes {
		mux.Handle(pattern, h)
	}
	return limitBodies(mux, newBodyGate(lim), o.TrustedProxies, o.Rejects), nil
}

// Listen opens the listener for http.listen (HOST:PORT).
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (http.listen): %w", addr, err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends, then lets requests in flight finish
// for up to 5 s. It returns nil after ctx ends, or why serving stopped.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout,
		IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve HTTP on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("stop HTTP on %s: %w", ln.Addr(), err)
	}
	return nil
}
