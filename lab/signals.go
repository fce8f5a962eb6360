package lab

import (
	"strconv"
	"strings"
	"syscall"
)

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT", syscall.SIGILL: "ILL", syscall.SIGTRAP: "TRAP",
	syscall.SIGABRT: "ABRT", syscall.SIGBUS: "BUS", syscall.SIGFPE: "FPE", syscall.SIGKILL: "KILL", syscall.SIGUSR1: "USR1",
	syscall.SIGSEGV: "SEGV", syscall.SIGUSR2: "USR2", syscall.SIGPIPE: "PIPE", syscall.SIGALRM: "ALRM", syscall.SIGTERM: "TERM",
	syscall.SIGCHLD: "CHLD", syscall.SIGCONT: "CONT", syscall.SIGSTOP: "STOP", syscall.SIGTSTP: "TSTP",
}

// signalName is the name without SIG ("TERM"), or the number for unknown signals.
func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return strconv.Itoa(int(s))
}

// parseSignal accepts "TERM", "SIGTERM", "term", "15" (and "0" for an existence check).
func parseSignal(s string) (syscall.Signal, bool) {
	s = strings.ToUpper(strings.TrimPrefix(strings.ToUpper(s), "SIG"))
	if n, err := strconv.Atoi(s); err == nil {
		if n == 0 {
			return 0, true
		}
		_, ok := signalNames[syscall.Signal(n)]
		return syscall.Signal(n), ok
	}
	for sig, name := range signalNames {
		if name == s {
			return sig, true
		}
	}
	if s == "IOT" {
		return syscall.SIGABRT, true
	}
	return 0, false
}
