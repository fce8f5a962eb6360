package remote_test

import (
	"testing"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/opsbot/opsbot/ops/remote"
)

// TestKeyscanCommand: -p only for a port other than 22 (whose entry is then [host]:port),
// -t when a key type is named, ssh-keyscan run on the jump host for a host behind one, and every
// word quoted for the shell.
func TestKeyscanCommand(t *testing.T) {
	for _, c := range []struct {
		addr, typ, path string
		via             []remote.HostConfig
		want            string
	}{
		{"gpu1.example.internal:22", "", "/etc/opsbot/known_hosts", nil,
			"ssh-keyscan gpu1.example.internal >> /etc/opsbot/known_hosts"},
		{"gpu1.example.internal:2222", "", "/etc/opsbot/known_hosts", nil,
			"ssh-keyscan -p 2222 gpu1.example.internal >> /etc/opsbot/known_hosts"},
		{"[::1]:2222", "ed25519", "/etc/opsbot/known_hosts", nil,
			"ssh-keyscan -t ed25519 -p 2222 ::1 >> /etc/opsbot/known_hosts"},
		{"10.0.0.9:22", "", "/etc/my hosts", []remote.HostConfig{{Addr: "pve.example.internal:2200", User: "root"}},
			"ssh -p 2200 root@pve.example.internal 'ssh-keyscan 10.0.0.9' >> '/etc/my hosts'"},
		{"gpu1;reboot:22", "", "kh", nil, "ssh-keyscan 'gpu1;reboot' >> kh"},
	} {
		if got := remote.KeyscanCommand(c.addr, c.typ, c.path, c.via...); got != c.want {
			t.Errorf("KeyscanCommand(%q, %q, %q, %v) = %q, want %q", c.addr, c.typ, c.path, c.via, got, c.want)
		}
	}
}

// TestKnownHostsHas: a key is found in each form ssh matches (plain on port 22, [host]:port,
// hashed, a wildcard pattern), and not for another host or another port of the same host.
func TestKnownHostsHas(t *testing.T) {
	k := otherKey(t)
	hashed := knownhosts.HashHostname(knownhosts.Normalize("10.1.2.3:2222"))
	text := knownhosts.Line([]string{"gpu1.example.internal"}, k) + "\n" +
		knownhosts.Line([]string{"[127.0.0.1]:2200"}, k) + "\n" +
		knownhosts.Line([]string{hashed}, k) + "\n" +
		knownhosts.Line([]string{"*.lab.example.internal"}, k) + "\n"
	path := writeFile(t, []byte(text))
	for addr, want := range map[string]bool{
		"gpu1.example.internal:22":      true,
		"gpu1.example.internal:2222":    false,
		"127.0.0.1:2200":                true,
		"127.0.0.1:22":                  false,
		"10.1.2.3:2222":                 true,
		"10.1.2.3:22":                   false,
		"node7.lab.example.internal:22": true,
		"pve.example.internal:22":       false,
	} {
		got, err := remote.KnownHostsHas(path, addr)
		if err != nil || got != want {
			t.Errorf("KnownHostsHas(%s) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := remote.KnownHostsHas(path, "no-port"); err == nil {
		t.Error("an address without a port: no error")
	}
}
