package sshdtest

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestStartLogsInWithKey(t *testing.T) {
	s := Start(t)
	cb, err := knownhosts.New(s.KnownHostsFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{
		User: s.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(s.ClientSigner)},
		HostKeyCallback: cb, HostKeyAlgorithms: []string{ssh.KeyAlgoED25519}, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("dial %s as %s: %v\nsshd log:\n%s", s.Addr, s.User, err, s.Log())
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.Output("id -un; echo $0")
	if err != nil {
		t.Fatalf("id -un: %v", err)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[0] != s.User || got[1] != "sh" {
		t.Fatalf("id -un; echo $0: %q, want %s and sh", out, s.User)
	}
}

func TestStopOnCleanup(t *testing.T) {
	var addr string
	t.Run("server", func(t *testing.T) { addr = Start(t).Addr })
	if Banner(addr) {
		t.Fatalf("sshd still answers on %s after its test ended", addr)
	}
}
