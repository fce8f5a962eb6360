package remote

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"strconv"
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

// KeyAccessError is a private key file the process may not read: it names
// the user opsbot runs as and the one recipe (README "Point it at a real
// host"): the key 0640 root:GROUP in a directory 0750 root:GROUP, GROUP being
// the group opsbot runs as.
type KeyAccessError struct {
	Path  string
	User  string // "opsbot (uid 998)", or "uid 65532" for a uid with no name
	Group string // the group's name, or its gid
	Err   error
}

func (e *KeyAccessError) Error() string {
	return fmt.Sprintf("ssh key %s: opsbot runs as %s and may not read it (%v): run: chown root:%s %s && chmod 0640 %s, and let that group into its directory (chgrp %s DIR && chmod 0750 DIR)",
		e.Path, e.User, e.Err, e.Group, e.Path, e.Path, e.Group)
}

func (e *KeyAccessError) Unwrap() error { return e.Err }

// runningAs names the process's user and group for a message.
func runningAs() (who, group string) {
	uid, gid := os.Getuid(), os.Getgid()
	who = "uid " + strconv.Itoa(uid)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		who = fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	group = strconv.Itoa(gid)
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	return who, group
}

// LoadSigner reads and parses the unencrypted private key at path, after the
// check OpenSSH makes: a key file owned by the user running opsbot must not
// be accessible to group or others (a *KeyPermError, naming the fix). A key
// owned by another user (root, say, readable by opsbot's group) is accepted,
// as OpenSSH accepts it. A key the process may not read is a *KeyAccessError.
// Errors name the file and are not worth retrying.
func LoadSigner(path string) (ssh.Signer, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrPermission) {
		who, group := runningAs()
		return nil, &KeyAccessError{Path: path, User: who, Group: group, Err: errors.Unwrap(err)}
	}
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
