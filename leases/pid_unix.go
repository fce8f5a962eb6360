//go:build unix

package leases

import (
	"errors"
	"syscall"
)

// pidAlive reports whether a process with this pid exists here (a process
// of another user counts: signal 0 is refused, not missing).
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
