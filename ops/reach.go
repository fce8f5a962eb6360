package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/remote"
)

// engineDial is how a service's engine URL is reached, decided here once for
// every use of it (readiness, /server_info, /flush_cache, /metrics, the
// benchmark, the watchdog through the pipelines, `opsbot bench --service`):
// with ViaSSH, a tunnel through the pooled SSH connection to the service's
// host whose one target is the URL's host:port (engine.Addr), dialled from
// the host's side (so 127.0.0.1 is that host's loopback) and nothing else
// ever; otherwise nil, a direct TCP connection from opsbot's machine. Either
// way no redirect is followed (engine.Do).
func engineDial(sc ServiceConfig, h *remote.Host) (engine.DialFunc, error) {
	if !sc.ViaSSH {
		return nil, nil
	}
	addr, err := engine.Addr(sc.URL)
	if err != nil {
		return nil, fmt.Errorf("url %q %w", sc.URL, err)
	}
	tn, err := h.Tunnel(addr)
	if err != nil {
		return nil, err
	}
	return tn.DialContext, nil
}

// EngineDial returns how service's engine URL is reached: nil for directly
// over TCP, or a dial through the SSH connection to its host (via_ssh). It
// is for benchmarks run outside jobs, so that they reach the engine the
// way jobs do. An unknown service is an error wrapping ErrUnknownService.
func (r *Runbook) EngineDial(service string) (engine.DialFunc, error) {
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	return t.dial, nil
}

// forwardProhibited returns the *remote.ForwardError in err when the host's
// SSH server refuses to forward at all (AllowTcpForwarding no): no waiting
// makes such an engine reachable, so a wait ends at once with it.
func forwardProhibited(err error) *remote.ForwardError {
	var fe *remote.ForwardError
	if errors.As(err, &fe) && fe.Prohibited() {
		return fe
	}
	return nil
}

// checkReach, for a service reached through SSH, asks the host's SSH server
// for one channel to the engine's address before a job changes anything, so
// that a server refusing to forward fails the job while the service still
// runs as it did (the error says how to allow it). An engine not listening
// (stopped, loading) is fine here, and so is any other failure: the job's
// own steps meet and report those. Direct services are not checked.
func (r *Runbook) checkReach(ctx context.Context, t *target) error {
	if t.dial == nil {
		return nil
	}
	addr, err := engine.Addr(t.cfg.URL)
	if err != nil {
		return nil // config validation reports a bad URL
	}
	c, err := t.dial(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return nil
	}
	if fe := forwardProhibited(err); fe != nil {
		return fmt.Errorf("cannot reach %s's engine (%s) through SSH, so nothing was changed: %w", t.name, t.cfg.URL, fe)
	}
	return nil
}
