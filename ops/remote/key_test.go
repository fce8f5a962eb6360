package remote

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// writeKey writes a fresh ed25519 private key in OpenSSH format with mode.
func writeKey(t *testing.T, mode os.FileMode) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // exact, whatever the umask
		t.Fatal(err)
	}
	return path
}

// TestLoadSignerRefusesOpenKeys: a key others can read or write is refused
// as OpenSSH refuses it, with the file, its mode and the fix in the message.
func TestLoadSignerRefusesOpenKeys(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if _, err := LoadSigner(writeKey(t, mode)); err != nil {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660, 0o602, 0o700 | 0o007} {
		path := writeKey(t, mode)
		_, err := LoadSigner(path)
		var pe *KeyPermError
		if !errors.As(err, &pe) {
			t.Errorf("mode %04o: err %v, want a *KeyPermError", mode, err)
			continue
		}
		for _, want := range []string{path, "chmod 600 " + path, fmt.Sprintf("mode %04o", uint32(mode))} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("mode %04o: %q does not say %q", mode, err, want)
			}
		}
		if pe.Mode != mode.Perm() {
			t.Errorf("mode %04o: error reports %04o", mode, pe.Mode)
		}
	}
}

func TestLoadSignerNamesMissingAndBadFiles(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-key")
	if _, err := LoadSigner(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing key: %v", err)
	}
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigner(junk); err == nil || !strings.Contains(err.Error(), "parse ssh key "+junk) {
		t.Errorf("junk key: %v", err)
	}
	if err := CheckKnownHosts(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing known_hosts: %v", err)
	}
}
