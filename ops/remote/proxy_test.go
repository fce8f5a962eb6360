package remote_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections to target. It can cut them (both ends closed) or freeze them
// (bytes are swallowed, the sockets stay open: a peer that went silent).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	links  []*link
}

type link struct {
	a, b   net.Conn
	frozen atomic.Bool
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				a.Close()
				continue
			}
			l := &link{a: a, b: b}
			p.mu.Lock()
			p.links = append(p.links, l)
			p.mu.Unlock()
			go l.pump(a, b)
			go l.pump(b, a)
		}
	}()
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (l *link) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				dst.(*net.TCPConn).CloseWrite()
			}
			return
		}
	}
}

// cut closes every connection made so far.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.a.Close()
		l.b.Close()
	}
	p.links = nil
}

// freeze silences every connection made so far; later ones pass.
func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.frozen.Store(true)
	}
}
