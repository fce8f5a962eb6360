package engine

import (
	"errors"
	"net"
	"net/url"
	"strconv"
)

// Addr's errors, worded to follow the URL or its key: "services.qwen.url must have ...".
var (
	ErrNotBaseURL = errors.New("must be the engine's http(s) base URL")
	ErrPortRange  = errors.New("must have a port from 1 to 65535")
)

// Addr is the one address (host:port) an engine's base URL connects to: its
// port, or the scheme's (80, 443) when it names none. raw must be an http or
// https URL with a host, and its port a number from 1 to 65535; otherwise the
// error is ErrNotBaseURL or ErrPortRange. It is the home of both facts: the
// configuration's check of services.NAME.url and the one target a via_ssh
// tunnel may connect to.
func Addr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", ErrNotBaseURL
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", ErrPortRange
	}
	return net.JoinHostPort(u.Hostname(), strconv.Itoa(n)), nil
}
