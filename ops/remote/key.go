package remote

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/crypto/ssh"
)

// KeyPermError refuses a private key file that others than its owner may
// read or write, as OpenSSH refuses it ("UNPROTECTED PRIVATE KEY FILE").
type KeyPermError struct {
	Path string
	Mode fs.FileMode // permission bits of the file
}

func (e *KeyPermError) Error() string {
	return fmt.Sprintf("ssh key %s has mode %04o: others than its owner can read it, and OpenSSH refuses such a key too; run: chmod 600 %s",
		e.Path, uint32(e.Mode.Perm()), e.Path)
}

// LoadSigner reads and parses the unencrypted private key at path, after the
// check OpenSSH makes: a key file owned by the user running opsbot must not
// be accessible to group or others (a *KeyPermError, naming the fix). A key
// owned by another user (root, say, readable by opsbot's group) is accepted,
// as OpenSSH accepts it. Errors name the file and are not worth retrying.
func LoadSigner(path string) (ssh.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read ssh key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read ssh key %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read ssh key %s: not a regular file", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o077 != 0 {
		return nil, &KeyPermError{Path: path, Mode: fi.Mode().Perm()}
	}
	pem, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read ssh key %s: %w", path, err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, fmt.Errorf("parse ssh key %s: %w", path, err)
	}
	return signer, nil
}

// CheckKnownHosts reads the known_hosts file at path as NewPool does, and
// reports a missing, unreadable or malformed file.
func CheckKnownHosts(path string) error {
	_, err := loadKnownHosts(path)
	return err
}
