package remote

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyError is an unknown or changed host key: the connection was refused before
// authenticating. Its message names the host, the address, the key's SHA256 fingerprint, whether
// the key is unknown or CHANGED, and how to trust it after verifying the fingerprint out of band.
type HostKeyError struct {
	Host, Addr  string
	Fingerprint string // SHA256:... of the key the server offered
	KeyType     string // e.g. ssh-ed25519
	KnownHosts  string // the known_hosts file checked
	Changed     bool   // known_hosts holds another key for this address
	KnownLine   int    // when Changed: the line of a known key for this address
}

func (e *HostKeyError) Error() string {
	add := KeyscanCommand(e.Addr, keyscanType(e.KeyType), e.KnownHosts)
	if e.Changed {
		return fmt.Sprintf("host key of %s (%s) CHANGED: it offers %s %s, but %s line %d holds another key "+
			"(someone may be intercepting the connection, or the host was reinstalled); "+
			"verify %s out of band, then remove the old key with `ssh-keygen -R '%s' -f %s` and trust the new one with `%s`",
			e.Host, e.Addr, e.KeyType, e.Fingerprint, e.KnownHosts, e.KnownLine,
			e.Fingerprint, knownhosts.Normalize(e.Addr), e.KnownHosts, add)
	}
	return fmt.Sprintf("host key of %s (%s) is unknown: it offers %s %s, which is not in %s; "+
		"verify the fingerprint out of band (on the host: `ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub`), then trust it with `%s`",
		e.Host, e.Addr, e.KeyType, e.Fingerprint, e.KnownHosts, keyscanType(e.KeyType), add)
}

// KeyscanCommand is the shell command that appends addr's (host:port) host key of keyType (an
// ssh-keyscan -t name such as ed25519; "" for every type) to the known_hosts file at path: the
// one home of that advice. Port 22 needs no -p; on another port the entry ssh-keyscan writes is
// [host]:port, which is what opsbot looks up. With via (the jump host's address and user, for
// a host reached through it) ssh-keyscan runs there, where addr resolves. Every word is
// shell-quoted.
func KeyscanCommand(addr, keyType, path string, via ...HostConfig) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "22"
	}
	argv := []string{"ssh-keyscan"}
	if keyType != "" {
		argv = append(argv, "-t", keyType)
	}
	if port != "22" {
		argv = append(argv, "-p", port)
	}
	argv = append(argv, host)
	if len(via) > 0 {
		jhost, jport, err := net.SplitHostPort(via[0].Addr)
		if err != nil {
			jhost, jport = via[0].Addr, "22"
		}
		ssh := []string{"ssh"}
		if jport != "22" {
			ssh = append(ssh, "-p", jport)
		}
		argv = append(ssh, via[0].User+"@"+jhost, Quote(argv))
	}
	return Quote(argv) + " >> " + Quote([]string{path})
}

// keyscanType is the ssh-keyscan -t (and ssh_host_TYPE_key) name of a key type.
func keyscanType(keyType string) string {
	switch {
	case strings.HasPrefix(keyType, "ecdsa-"):
		return "ecdsa"
	case keyType == ssh.KeyAlgoRSA:
		return "rsa"
	}
	return strings.TrimPrefix(keyType, "ssh-")
}

// knownHosts is the known_hosts file. Every dial checks it as it is then, so keys added after
// the Pool was made are honoured: the file is parsed again whenever it changed (its size,
// modification time or inode), and once for all the dials in between, so that dialling N hosts
// parses it once, not N times.
type knownHosts struct {
	path string

	mu     sync.Mutex
	parsed *knownHostsFile // nil until the first dial
}

// knownHostsFile is one version of the file, parsed.
type knownHostsFile struct {
	version fileVersion
	check   ssh.HostKeyCallback // knownhosts' callback over this version
	entries []knownEntry        // its host key lines, in file order
}

// knownEntry is one host key line: its host patterns and its key's type.
type knownEntry struct {
	hosts   []string
	keyType string
}

// fileVersion tells one version of a file from another without reading it.
type fileVersion struct {
	size    int64
	modTime time.Time
	ino     uint64
}

// settleTime is how long after its last modification a known_hosts version is kept parsed.
const settleTime = 2 * time.Second

func versionOf(path string) (fileVersion, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileVersion{}, err
	}
	v := fileVersion{size: fi.Size(), modTime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.ino = st.Ino
	}
	return v, nil
}

func loadKnownHosts(path string) (*knownHosts, error) {
	kh := &knownHosts{path: path}
	if _, err := kh.current(); err != nil {
		return nil, err
	}
	return kh, nil
}

// current returns the file as it is now, parsing it only when it changed since it was last
// parsed. A version that changed while it was parsed is used once and not kept; so is one
// modified within settleTime of now, whose next change could keep its modification time (the
// file system's clock is coarse) and its size.
func (kh *knownHosts) current() (*knownHostsFile, error) {
	before, err := versionOf(kh.path)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", kh.path, err)
	}
	kh.mu.Lock()
	defer kh.mu.Unlock()
	if kh.parsed != nil && kh.parsed.version == before {
		return kh.parsed, nil
	}
	check, err := knownhosts.New(kh.path)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", kh.path, err)
	}
	data, err := os.ReadFile(kh.path)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", kh.path, err)
	}
	f := &knownHostsFile{version: before, check: check}
	for _, line := range bytes.Split(data, []byte("\n")) {
		marker, hosts, key, _, _, err := ssh.ParseKnownHosts(line)
		if err != nil {
			continue // blank, comment or malformed line (knownhosts reports malformed ones)
		}
		if marker != "" {
			continue // @revoked and @cert-authority lines name no host key to prefer
		}
		f.entries = append(f.entries, knownEntry{hosts: hosts, keyType: key.Type()})
	}
	if after, err := versionOf(kh.path); err == nil && after == before && time.Since(before.modTime) > settleTime {
		kh.parsed = f
	}
	return f, nil
}

// callback returns the host key callback for one host and the host key algorithms to offer:
// those of the keys known_hosts lists for addr, so that a server with several host keys shows
// the one we know (otherwise an ed25519-only entry reads as a mismatch). The callback turns a
// knownhosts refusal into a *HostKeyError stored in *refused.
func (kh *knownHosts) callback(name, addr string, refused **HostKeyError) (ssh.HostKeyCallback, []string, error) {
	f, err := kh.current()
	if err != nil {
		return nil, nil, err
	}
	cb := f.check
	algos := f.algorithms(addr)
	check := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			e := &HostKeyError{Host: name, Addr: addr, Fingerprint: ssh.FingerprintSHA256(key),
				KeyType: key.Type(), KnownHosts: kh.path, Changed: len(ke.Want) > 0}
			if e.Changed {
				e.KnownLine = ke.Want[0].Line
			}
			*refused = e
			return e
		}
		if err != nil {
			return fmt.Errorf("check host key of %s (%s): %w", name, addr, err)
		}
		return nil
	}
	return check, algos, nil
}

// algorithms lists the host key algorithms of the known_hosts keys for addr, in file order.
// Nil (no restriction) when none is known: the server's key is then refused as unknown.
func (f *knownHostsFile) algorithms(addr string) []string {
	want := knownhosts.Normalize(addr)
	host, _, _ := net.SplitHostPort(addr)
	var algos []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, x := range a {
			if !seen[x] {
				seen[x] = true
				algos = append(algos, x)
			}
		}
	}
	for _, e := range f.entries {
		if !matchesHost(e.hosts, want, host) {
			continue
		}
		switch e.keyType {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(e.keyType)
		}
	}
	return algos
}

// matchesHost reports whether a known_hosts host list names want (normalized "[h]:p" or "h"),
// plainly or hashed (|1|salt|hash). Wildcard patterns are left to knownhosts itself.
func matchesHost(hosts []string, want, host string) bool {
	for _, h := range hosts {
		if strings.HasPrefix(h, "!") {
			continue
		}
		if strings.HasPrefix(h, "|1|") {
			if hashMatches(h, want) {
				return true
			}
			continue
		}
		if knownhosts.Normalize(h) == want || h == host && want == host {
			return true
		}
	}
	return false
}

func hashMatches(entry, want string) bool {
	parts := strings.Split(entry[len("|1|"):], "|")
	if len(parts) != 2 {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[0])
	sum, err2 := base64.StdEncoding.DecodeString(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	m := hmac.New(sha1.New, salt)
	m.Write([]byte(want))
	return bytes.Equal(m.Sum(nil), sum)
}

// KnownHostsHas reports whether the known_hosts file at path holds a host key for addr
// (host:port) in any form ssh itself matches: plain, [host]:port, hashed or a wildcard pattern.
// A host without one is refused at its first connection (a *HostKeyError): KeyscanCommand says
// how to add it. The error is for a file that cannot be read or parsed.
func KnownHostsHas(path, addr string) (bool, error) {
	cb, err := knownhosts.New(path)
	if err != nil {
		return false, fmt.Errorf("read known_hosts %s: %w", path, err)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return false, fmt.Errorf("look up %q in known_hosts %s: %w", addr, path, err)
	}
	// No real key equals probeKey: a host with any key known answers with the keys it wants.
	err = cb(addr, &net.TCPAddr{IP: net.IPv4zero}, probeKey)
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) {
		return len(ke.Want) > 0, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up %s in known_hosts %s: %w", addr, path, err)
	}
	return true, nil
}

// probeKey is an ed25519 public key of all zero bytes: the point no real host key has.
var probeKey = func() ssh.PublicKey {
	k, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		panic(err)
	}
	return k
}()
