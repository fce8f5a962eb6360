package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy stands between a test's client and the cluster on loopback, so a
// test can take the database away (Cut: open connections are closed and new
// ones are refused at once, as when the server is down) and give it back
// (Restore), without stopping the cluster other tests share.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to the database dbURL names (a URL from Database)
// and returns it with the URL that reaches the database through it. It is
// stopped at t's cleanup.
func NewProxy(t testing.TB, dbURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	u.Host = ln.Addr().String()
	return p, u.String()
}

// Addr is the proxy's address (127.0.0.1:PORT).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = true
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

func (p *Proxy) pipe(c net.Conn) {
	defer func() {
		c.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		s.Close()
		return
	}
	p.conns[s] = true
	p.mu.Unlock()
	defer func() {
		s.Close()
		p.mu.Lock()
		delete(p.conns, s)
		p.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); s.Close(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); c.Close(); done <- struct{}{} }()
	<-done
	<-done
}

// Cut closes every connection through the proxy and refuses new ones until
// Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *Proxy) stop() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
