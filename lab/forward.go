package lab

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
)

// directTCPIPMsg is the payload of a "direct-tcpip" channel open (RFC 4254 §7.2): where the
// client wants the server to connect, and where the connection came from on the client's side.
type directTCPIPMsg struct {
	Host     string
	Port     uint32
	OrigAddr string
	OrigPort uint32
}

// forward serves one direct-tcpip channel the way sshd does for a client forwarding a local
// port: the target is resolved on this host, so 127.0.0.1, localhost, ::1 and the host's own
// name are the host itself, and the only thing listening there is the engine of one of its
// units, on that unit's port. It is refused as sshd refuses: administratively prohibited when
// the no-forwarding fault is on (sshd's AllowTcpForwarding no, message "open failed"), connect
// failed ("Connection refused") when no engine listens on that port of this host, and connect
// failed with a message naming what the lab reaches for any other address (the lab never
// connects outside itself). An accepted channel is copied both ways until either side ends.
func (s *sshServer) forward(nc ssh.NewChannel) {
	var m directTCPIPMsg
	if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil {
		nc.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	h := s.h
	h.w.lock()
	prohibited := h.lab.faults.noForwarding
	h.w.unlock()
	if prohibited {
		nc.Reject(ssh.Prohibited, "open failed")
		return
	}
	target := net.JoinHostPort(m.Host, strconv.FormatUint(uint64(m.Port), 10))
	if !h.isSelf(m.Host) {
		nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("the lab host %s forwards only to its own loopback (127.0.0.1:PORT), not to %s", h.name, target))
		return
	}
	addr := h.engineAddr(int(m.Port))
	if addr == "" {
		nc.Reject(ssh.ConnectionFailed, "Connection refused")
		return
	}
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "Connection refused")
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		conn.Close()
		return
	}
	h.forwards.Add(1)
	go ssh.DiscardRequests(reqs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(conn, ch)
		conn.Close()
	}()
	io.Copy(ch, conn)
	ch.CloseWrite()
	ch.Close()
	conn.Close()
	<-done
}

// isSelf reports whether name, resolved on this host, is the host itself.
func (h *SimHost) isSelf(name string) bool {
	switch name {
	case "127.0.0.1", "localhost", "::1", "0.0.0.0", h.name:
		return true
	}
	return false
}

// engineAddr is where the engine of this host's unit serving port listens on the machine that
// runs the lab ("" when no unit of the host has that port or its engine does not accept
// connections now: loading, stopped).
func (h *SimHost) engineAddr(port int) string {
	h.w.lock()
	defer h.w.unlock()
	for _, u := range h.sd.units {
		if u.port == port && port > 0 && u.run != nil && u.run.ln != nil {
			return u.run.ln.Addr().String()
		}
	}
	return ""
}

// Forwarded is how many direct-tcpip channels this host's SSH server has opened so far (each a
// TCP connection made on the client's behalf to one of its engines).
func (h *SimHost) Forwarded() int { return int(h.forwards.Load()) }
