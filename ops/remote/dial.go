package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// conn is one established SSH connection. done is closed once the connection has ended.
type conn struct {
	client    *ssh.Client
	done      chan struct{}
	closeOnce sync.Once
}

func (c *conn) close() {
	c.closeOnce.Do(func() { c.client.Close() })
}

func (c *conn) dead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// client returns the host's live connection, dialling it when there is none. Only one dial per
// host runs at a time; callers waiting for it give up when ctx ends.
func (h *Host) client(ctx context.Context) (*conn, error) {
	p := h.p
	if c, err := p.cached(h.cfg.Name); c != nil || err != nil {
		return c, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", h.cfg.Name, err)
	}
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for connection to %s: %w", h.cfg.Name, ctx.Err())
	}
	defer func() { <-h.sem }()
	if c, err := p.cached(h.cfg.Name); c != nil || err != nil {
		return c, err
	}
	c, err := h.dial(ctx)
	if err != nil {
		p.mu.Lock()
		if p.dialErrs == nil {
			p.dialErrs = map[string]int{}
		}
		p.dialErrs[h.cfg.Name]++
		p.mu.Unlock()
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return nil, ErrClosed
	}
	p.conns[h.cfg.Name] = c
	p.dials++
	p.mu.Unlock()
	go h.watch(c)
	return c, nil
}

func (p *Pool) cached(name string) (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	c := p.conns[name]
	if c != nil && c.dead() {
		delete(p.conns, name)
		c = nil
	}
	return c, nil
}

// forget removes c from the cache (if it is still the cached one) and closes it.
func (h *Host) forget(c *conn) {
	p := h.p
	p.mu.Lock()
	if p.conns[h.cfg.Name] == c {
		delete(p.conns, h.cfg.Name)
	}
	p.mu.Unlock()
	c.close()
}

// dial makes a new connection: TCP (or a channel through the jump host), then the SSH
// handshake bounded by HandshakeTimeout and ctx.
func (h *Host) dial(ctx context.Context) (*conn, error) {
	p, name, addr := h.p, h.cfg.Name, h.cfg.Addr
	var raw net.Conn
	cctx, cancel := context.WithTimeout(ctx, p.cfg.ConnectTimeout)
	defer cancel()
	via := ""
	if h.cfg.Jump != "" {
		jh := p.hosts[h.cfg.Jump]
		jc, err := jh.client(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect to %s (%s) through %s: %w", name, addr, jh.cfg.Name, err)
		}
		via = " through " + jh.cfg.Name
		raw, err = jc.client.DialContext(cctx, "tcp", addr)
		if err != nil {
			if cctx.Err() != nil {
				err = errors.Join(err, cctx.Err())
			}
			return nil, fmt.Errorf("connect to %s (%s)%s: %w", name, addr, via, err)
		}
	} else {
		var d net.Dialer
		var err error
		raw, err = d.DialContext(cctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("connect to %s (%s): %w", name, addr, err)
		}
		if tc, ok := raw.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
	}

	var refused *HostKeyError
	check, algos, err := p.kh.callback(name, addr, &refused)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("connect to %s (%s): %w", name, addr, err)
	}
	cfg := &ssh.ClientConfig{
		User:              h.cfg.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(p.cfg.Signer)},
		HostKeyCallback:   check,
		HostKeyAlgorithms: algos,
		Timeout:           p.cfg.ConnectTimeout,
	}
	// The handshake has no context: a deadline on the conn (where supported) and a watchdog
	// closing it on timeout or ctx end bound it.
	hctx, hcancel := context.WithTimeout(ctx, p.cfg.HandshakeTimeout)
	defer hcancel()
	deadline, _ := hctx.Deadline()
	raw.SetDeadline(deadline)
	stop := context.AfterFunc(hctx, func() { raw.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(raw, addr, cfg)
	killed := !stop()
	if err != nil {
		raw.Close()
		if refused != nil {
			return nil, refused
		}
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		case passed(ctx):
			// The conn's deadline (ctx's) fired before ctx's own timer did.
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		case hctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded):
			err = fmt.Errorf("no handshake within %v: %w (%w)", p.cfg.HandshakeTimeout, context.DeadlineExceeded, err)
		}
		return nil, fmt.Errorf("ssh handshake with %s (%s)%s as %s: %w", name, addr, via, h.cfg.User, err)
	}
	if killed {
		sc.Close()
		return nil, fmt.Errorf("ssh handshake with %s (%s)%s: %w", name, addr, via, hctx.Err())
	}
	raw.SetDeadline(time.Time{})
	c := &conn{client: ssh.NewClient(sc, chans, reqs), done: make(chan struct{})}
	p.log.Debug("ssh connected", "host", name, "addr", addr, "via", h.cfg.Jump, "user", h.cfg.User)
	return c, nil
}

// passed reports whether ctx's deadline, if any, has come: true a moment
// before ctx.Err() says so when a conn deadline taken from it fired first.
func passed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// watch runs for the life of c: it sends keep-alives and, when one fails or is not answered
// within the interval, closes c; when c ends it leaves the cache.
func (h *Host) watch(c *conn) {
	go func() {
		err := c.client.Wait()
		close(c.done)
		h.p.log.Debug("ssh connection ended", "host", h.cfg.Name, "err", err)
		h.forget(c)
	}()
	every := h.p.cfg.KeepAlive
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		replied := make(chan error, 1)
		go func() {
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			replied <- err
		}()
		var err error
		select {
		case err = <-replied:
		case <-time.After(every):
			err = fmt.Errorf("no reply within %v", every)
		case <-c.done:
			return
		}
		if err != nil {
			h.p.log.Warn("ssh keep-alive failed: closing connection", "host", h.cfg.Name, "err", err)
			h.forget(c)
			return
		}
	}
}
