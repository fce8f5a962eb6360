package sshdtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/opsbot/opsbot/internal/testkit"
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

// TestForwardTargetsListsChannelsAskedFor: with DebugLog, every direct-tcpip channel a client
// asks for is listed by its target, in order, whether the server could connect or not.
func TestForwardTargetsListsChannelsAskedFor(t *testing.T) {
	s := StartWith(t, Options{DebugLog: true})
	c, err := ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{
		User: s.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(s.ClientSigner)},
		HostKeyCallback: ssh.FixedHostKey(s.HostKey.PublicKey()), Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("dial %s: %v", s.Addr, err)
	}
	defer c.Close()
	for _, target := range []string{"127.0.0.1:1", "127.0.0.1:2"} {
		if conn, err := c.Dial("tcp", target); err == nil {
			conn.Close()
		}
	}
	testkit.WaitFor(t, 5*time.Second, "both channels in sshd's log", func() bool { return len(s.ForwardTargets()) >= 2 })
	if got, want := fmt.Sprint(s.ForwardTargets()), "[127.0.0.1:1 127.0.0.1:2]"; got != want {
		t.Errorf("targets %s, want %s\n%s", got, want, s.Log())
	}
}
