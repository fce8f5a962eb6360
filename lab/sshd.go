package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// sshServer is one host's SSH server. It owns its accept loop, connections and sessions.
type sshServer struct {
	h     *SimHost
	cfg   *ssh.ServerConfig
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

func (h *SimHost) serveSSH() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("ssh listen for %s: %w", h.name, err)
	}
	want := h.lab.clientPub.Marshal()
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), want) {
				return &ssh.Permissions{}, nil
			}
			return nil, fmt.Errorf("unknown public key for %s", meta.User())
		},
		ServerVersion: "SSH-2.0-OpenSSH_9.6p1 opsbot-lab",
	}
	cfg.AddHostKey(h.hostKey)
	s := &sshServer{h: h, cfg: cfg, ln: ln, conns: map[net.Conn]struct{}{}}
	h.srv = s
	s.wg.Add(1)
	go s.acceptLoop()
	return nil
}

func (s *sshServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

func (h *SimHost) closeSSH() {
	s := h.srv
	if s == nil {
		return
	}
	s.mu.Lock()
	s.done = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *sshServer) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	sc, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := range reqs {
			if r.WantReply {
				r.Reply(r.Type == "keepalive@openssh.com", nil)
			}
		}
	}()
	for nc := range chans {
		if nc.ChannelType() == "direct-tcpip" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.forward(nc)
			}()
			continue
		}
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only session and direct-tcpip channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.session(c, ch, creqs)
		}()
	}
}

type execReq struct{ Command string }
type exitStatusMsg struct{ Status uint32 }
type exitSignalMsg struct {
	Signal     string
	CoreDumped bool
	Error      string
	Lang       string
}
type signalMsg struct{ Signal string }

// session serves one session channel: env, exec, subsystem sftp, signal.
func (s *sshServer) session(conn net.Conn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var started bool
	done := make(chan struct{})
	for {
		var r *ssh.Request
		var ok bool
		if started {
			select {
			case r, ok = <-reqs:
			case <-done:
				// The command finished; drain remaining requests until the client closes.
				go ssh.DiscardRequests(reqs)
				return
			}
		} else {
			r, ok = <-reqs
		}
		if !ok {
			cancel(errChannelClosed)
			if started {
				<-done
			}
			return
		}
		switch r.Type {
		case "env", "pty-req":
			r.Reply(r.Type == "env", nil)
		case "exec":
			var m execReq
			if started || ssh.Unmarshal(r.Payload, &m) != nil {
				r.Reply(false, nil)
				continue
			}
			started = true
			r.Reply(true, nil)
			go func() {
				defer close(done)
				s.runExec(ctx, conn, ch, m.Command)
			}()
		case "subsystem":
			var m execReq
			if started || ssh.Unmarshal(r.Payload, &m) != nil || m.Command != "sftp" {
				r.Reply(false, nil)
				continue
			}
			started = true
			r.Reply(true, nil)
			go func() {
				defer close(done)
				srv := sftp.NewRequestServer(ch, s.h.sftpHandlers(func() { conn.Close() }))
				go func() { <-ctx.Done(); srv.Close() }()
				err := srv.Serve()
				code := uint32(0)
				if err != nil && !errors.Is(err, io.EOF) {
					code = 1
				}
				srv.Close()
				ch.SendRequest("exit-status", false, ssh.Marshal(exitStatusMsg{code}))
			}()
		case "signal":
			var m signalMsg
			ssh.Unmarshal(r.Payload, &m)
			if sig, ok := parseSignal(m.Signal); ok {
				cancel(&signalCause{sig: sig})
			}
			if r.WantReply {
				r.Reply(true, nil)
			}
		default:
			if r.WantReply {
				r.Reply(false, nil)
			}
		}
	}
}

var errChannelClosed = errors.New("channel closed")

type signalCause struct{ sig syscall.Signal }

func (c *signalCause) Error() string { return "signal " + signalName(c.sig) }

// runExec runs one command string and reports its exit status.
func (s *sshServer) runExec(ctx context.Context, conn net.Conn, ch ssh.Channel, cmd string) {
	env := &cmdEnv{h: s.h, stdin: ch, stdout: ch, stderr: ch.Stderr(), drop: func() { conn.Close() }}
	code := env.runString(ctx, cmd)
	if env.dropped {
		return
	}
	var sc *signalCause
	if errors.As(context.Cause(ctx), &sc) && code == exitSignalled {
		ch.SendRequest("exit-signal", false, ssh.Marshal(exitSignalMsg{Signal: signalName(sc.sig)}))
		return
	}
	if code == exitSignalled {
		code = 130
	}
	ch.CloseWrite()
	ch.SendRequest("exit-status", false, ssh.Marshal(exitStatusMsg{uint32(code)}))
}
