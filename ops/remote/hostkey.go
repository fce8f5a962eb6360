package remote

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

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
	host, port, err := net.SplitHostPort(e.Addr)
	if err != nil {
		host, port = e.Addr, "22"
	}
	add := fmt.Sprintf("ssh-keyscan -t %s -p %s %s >> %s", keyscanType(e.KeyType), port, host, e.KnownHosts)
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

// knownHosts is the known_hosts file. It is read again at every dial, so keys added after the
// Pool was made are honoured.
type knownHosts struct{ path string }

func loadKnownHosts(path string) (*knownHosts, error) {
	kh := &knownHosts{path: path}
	if _, err := knownhosts.New(path); err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", path, err)
	}
	return kh, nil
}

// callback returns the host key callback for one host and the host key algorithms to offer:
// those of the keys known_hosts lists for addr, so that a server with several host keys shows
// the one we know (otherwise an ed25519-only entry reads as a mismatch). The callback turns a
// knownhosts refusal into a *HostKeyError stored in *refused.
func (kh *knownHosts) callback(name, addr string, refused **HostKeyError) (ssh.HostKeyCallback, []string, error) {
	cb, err := knownhosts.New(kh.path)
	if err != nil {
		return nil, nil, fmt.Errorf("read known_hosts %s: %w", kh.path, err)
	}
	algos, err := kh.algorithms(addr)
	if err != nil {
		return nil, nil, err
	}
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
func (kh *knownHosts) algorithms(addr string) ([]string, error) {
	data, err := os.ReadFile(kh.path)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", kh.path, err)
	}
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
	for _, line := range bytes.Split(data, []byte("\n")) {
		marker, hosts, key, _, _, err := ssh.ParseKnownHosts(line)
		if err != nil {
			continue // blank, comment or malformed line (knownhosts reports malformed ones)
		}
		if marker != "" {
			continue // @revoked and @cert-authority lines name no host key to prefer
		}
		if !matchesHost(hosts, want, host) {
			continue
		}
		switch t := key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return algos, nil
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
