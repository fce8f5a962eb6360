package systemd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops/remote"
)

// Reason classifies why a systemctl or journalctl command failed, from its exit
// status and stderr. Callers branch on it with errors.As, or with errors.Is
// against the sentinel errors below.
type Reason int

// Reasons a command failed.
const (
	ReasonUnknown      Reason = iota
	ReasonStartLimit          // "start of the service was attempted too often"
	ReasonNotFound            // unit not found / not loaded / no files found
	ReasonJobFailed           // "Job for U failed because ..." (other than the start limit)
	ReasonAccessDenied        // interactive authentication required, access denied
	ReasonNoCommand           // systemctl/journalctl missing on the host (exit 127)
	ReasonKilled              // the command was killed by a signal (remote timeout)
)

func (r Reason) String() string {
	switch r {
	case ReasonStartLimit:
		return "start-limit"
	case ReasonNotFound:
		return "not-found"
	case ReasonJobFailed:
		return "job-failed"
	case ReasonAccessDenied:
		return "access-denied"
	case ReasonNoCommand:
		return "no-command"
	case ReasonKilled:
		return "killed"
	}
	return "unknown"
}

// Sentinels matched by errors.Is on a *CommandError of that Reason.
var (
	ErrStartLimit   = errors.New("start limit hit")
	ErrUnitNotFound = errors.New("unit not found")
	ErrJobFailed    = errors.New("job failed")
	ErrAccessDenied = errors.New("access denied")
)

// CommandError is a remote command that ran and exited non-zero (or was
// killed). It is not a transport error: the command did run, so retrying is a
// decision about the service, not about the connection.
type CommandError struct {
	Argv       []string
	ExitStatus int    // -1 when killed by a signal
	Signal     string // e.g. "KILL" when killed
	Stderr     string // trimmed
	Reason     Reason
}

func (e *CommandError) Error() string {
	var b strings.Builder
	b.WriteString(strings.Join(e.Argv, " "))
	if e.Signal != "" {
		fmt.Fprintf(&b, ": killed by signal %s", e.Signal)
	} else {
		fmt.Fprintf(&b, ": exit status %d", e.ExitStatus)
	}
	if line := firstLine(e.Stderr); line != "" {
		b.WriteString(": ")
		b.WriteString(line)
	}
	switch e.Reason {
	case ReasonStartLimit:
		b.WriteString(" (start limit hit: run reset-failed before starting again)")
	case ReasonNoCommand:
		b.WriteString(" (command not found on the host)")
	}
	return b.String()
}

// Is matches the sentinel of e.Reason.
func (e *CommandError) Is(target error) bool {
	switch target {
	case ErrStartLimit:
		return e.Reason == ReasonStartLimit
	case ErrUnitNotFound:
		return e.Reason == ReasonNotFound
	case ErrJobFailed:
		return e.Reason == ReasonJobFailed || e.Reason == ReasonStartLimit
	case ErrAccessDenied:
		return e.Reason == ReasonAccessDenied
	}
	return false
}

// commandError builds a *CommandError from a failed command's output, or
// returns nil when it exited 0.
func commandError(argv []string, out remote.Output) *CommandError {
	if out.ExitStatus == 0 && out.Signal == "" {
		return nil
	}
	stderr := strings.TrimSpace(string(out.Stderr))
	e := &CommandError{
		Argv:       append([]string(nil), argv...),
		ExitStatus: out.ExitStatus,
		Signal:     out.Signal,
		Stderr:     stderr,
		Reason:     classify(out.ExitStatus, out.Signal, stderr),
	}
	return e
}

func classify(status int, signal, stderr string) Reason {
	low := strings.ToLower(stderr)
	switch {
	case signal != "":
		return ReasonKilled
	case status == 127 && strings.Contains(low, "not found"):
		return ReasonNoCommand
	case strings.Contains(low, "attempted too often") || strings.Contains(low, "start-limit-hit"):
		return ReasonStartLimit
	case strings.Contains(low, "not found") || strings.Contains(low, "not loaded") ||
		strings.Contains(low, "no files found") || strings.Contains(low, "does not exist") ||
		status == 5 && strings.Contains(low, "unit"):
		return ReasonNotFound
	case strings.Contains(low, "access denied") || strings.Contains(low, "authentication is required") ||
		strings.Contains(low, "permission denied"):
		return ReasonAccessDenied
	case strings.Contains(low, "job for ") && strings.Contains(low, "failed"):
		return ReasonJobFailed
	}
	return ReasonUnknown
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	line, _, _ := strings.Cut(s, "\n")
	return truncate(strings.TrimSpace(line))
}
