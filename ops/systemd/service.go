package systemd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/opsbot/opsbot/ops/remote"
)

// Runner runs one argv on a host. *remote.Host satisfies it. A non-zero exit
// is reported in Output, not as an error; err is a transport failure or the
// end of ctx.
type Runner interface {
	Run(ctx context.Context, stdin []byte, argv ...string) (remote.Output, error)
}

// DefaultPoll is the polling interval of the waits when Service.Poll is 0.
const DefaultPoll = 50 * time.Millisecond

// Service is one systemd unit on the host R reaches. The zero Poll means
// DefaultPoll. A Service is a value: safe for concurrent use as long as R is.
type Service struct {
	R    Runner
	Unit string        // e.g. "sglang-qwen.service"
	Poll time.Duration // interval of WaitFor, WaitStopped and WatchStart
}

func (s Service) poll() time.Duration {
	if s.Poll <= 0 {
		return DefaultPoll
	}
	return s.Poll
}

// CheckUnitName reports a unit name that must not reach systemctl: empty,
// starting with '-' (it would read as an option), or holding spaces or
// control characters.
func CheckUnitName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("unit name is empty")
	case strings.HasPrefix(name, "-"):
		return fmt.Errorf("unit name %q starts with '-'", truncate(name))
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("unit name %q holds spaces or control characters", truncate(name))
	}
	return nil
}

// run runs argv on r; a transport error is wrapped with what, a non-zero exit
// is a *CommandError.
func run(ctx context.Context, r Runner, what string, argv ...string) (remote.Output, error) {
	if r == nil {
		return remote.Output{}, fmt.Errorf("%s: no runner", what)
	}
	out, err := r.Run(ctx, nil, argv...)
	if err != nil {
		return out, fmt.Errorf("%s: %w", what, err)
	}
	if ce := commandError(argv, out); ce != nil {
		return out, fmt.Errorf("%s: %w", what, ce)
	}
	return out, nil
}

func (s Service) check(verb string) error {
	if err := CheckUnitName(s.Unit); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	return nil
}

// Show runs `systemctl show -p ShowProperties... UNIT` and parses it. A unit
// systemd does not know is not an error: its State has LoadState "not-found"
// (see State.Found).
func (s Service) Show(ctx context.Context) (State, error) {
	what := "show " + s.Unit
	if err := s.check(what); err != nil {
		return State{}, err
	}
	out, err := run(ctx, s.R, what, "systemctl", "show", "-p", strings.Join(ShowProperties, ","), s.Unit)
	if err != nil {
		return State{}, err
	}
	st, err := ParseShow(out.Stdout)
	if err != nil {
		return State{}, fmt.Errorf("%s: %w", what, err)
	}
	return st, nil
}

// control runs `systemctl VERB UNIT`, which blocks until systemd finished the
// job (for Type=simple a start job is done once the process was forked).
func (s Service) control(ctx context.Context, verb string) error {
	what := verb + " " + s.Unit
	if err := s.check(what); err != nil {
		return err
	}
	_, err := run(ctx, s.R, what, "systemctl", verb, s.Unit)
	return err
}

// Start runs `systemctl start UNIT`. A non-zero exit is a *CommandError. A start
// the start limit refused is errors.Is ErrStartLimit only when the unit's last
// result was success; a unit that failed and then hit the limit keeps its
// failure's result (systemd 252), and the refusal is ErrJobFailed. Either way
// ResetFailed before starting again.
// On ctx end the remote command is cancelled; the job may still run on the host.
func (s Service) Start(ctx context.Context) error { return s.control(ctx, "start") }

// Stop runs `systemctl stop UNIT`: it returns once systemd stopped the unit
// (the main process and, per KillMode, the rest of its cgroup). With
// KillMode=process the rest of the cgroup survives it and stays in the unit's
// cgroup (PPID 1); processes that left the cgroup survive any KillMode: see ops/gpu.
func (s Service) Stop(ctx context.Context) error { return s.control(ctx, "stop") }

// Restart runs `systemctl restart UNIT`.
func (s Service) Restart(ctx context.Context) error { return s.control(ctx, "restart") }

// ResetFailed runs `systemctl reset-failed UNIT`: it clears the failed state
// and the start-limit counter, so that a Start is accepted again.
func (s Service) ResetFailed(ctx context.Context) error { return s.control(ctx, "reset-failed") }

// Enabled runs `systemctl is-enabled UNIT` and returns the state it prints
// ("enabled", "disabled", "static", "masked", ...): whether the unit is
// wanted at boot. A non-zero exit with a state printed is that state, not
// an error (systemctl exits 1 for every state but the enabled ones).
func (s Service) Enabled(ctx context.Context) (string, error) {
	what := "is-enabled " + s.Unit
	if err := s.check(what); err != nil {
		return "", err
	}
	if s.R == nil {
		return "", fmt.Errorf("%s: no runner", what)
	}
	argv := []string{"systemctl", "is-enabled", s.Unit}
	out, err := s.R.Run(ctx, nil, argv...)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	state := firstLine(string(out.Stdout))
	if ce := commandError(argv, out); out.Signal != "" || (state == "" && ce != nil) {
		return "", fmt.Errorf("%s: %w", what, ce)
	}
	if state == "" {
		return "", fmt.Errorf("%s: systemctl printed no state", what)
	}
	return state, nil
}

// DaemonReload runs `systemctl daemon-reload` on r, after a unit or drop-in
// changed on disk.
func DaemonReload(ctx context.Context, r Runner) error {
	_, err := run(ctx, r, "daemon-reload", "systemctl", "daemon-reload")
	return err
}

// Cat runs `systemctl cat UNIT`: the fragment and its drop-ins, each after a
// "# PATH" line. A unit without files is a *CommandError of ReasonNotFound.
func (s Service) Cat(ctx context.Context) (string, error) {
	what := "cat " + s.Unit
	if err := s.check(what); err != nil {
		return "", err
	}
	out, err := run(ctx, s.R, what, "systemctl", "cat", s.Unit)
	if err != nil {
		return "", err
	}
	return string(out.Stdout), nil
}

// JournalQuery selects journal entries of a unit. Zero values select
// everything.
type JournalQuery struct {
	Lines int       // the last Lines entries (0 = all)
	Since time.Time // entries at or after Since, to the second (zero = from the start)
}

// JournalArgv is the journalctl argv Journal runs for unit and q. Since is
// sent in UTC with its zone named, so hosts in any time zone read it right.
func JournalArgv(unit string, q JournalQuery) []string {
	argv := []string{"journalctl", "-u", unit}
	if q.Lines > 0 {
		argv = append(argv, "-n", strconv.Itoa(q.Lines))
	}
	if !q.Since.IsZero() {
		argv = append(argv, "--since", q.Since.UTC().Format("2006-01-02 15:04:05")+" UTC")
	}
	return append(argv, "-o", "cat", "--no-pager")
}

// Journal returns the unit's journal messages, oldest first, without
// timestamps (-o cat: SGLang and vLLM lines carry their own). A negative
// Lines is refused before anything runs.
func (s Service) Journal(ctx context.Context, q JournalQuery) ([]string, error) {
	what := "read the journal of " + s.Unit
	if err := s.check(what); err != nil {
		return nil, err
	}
	if q.Lines < 0 {
		return nil, fmt.Errorf("%s: negative line count %d", what, q.Lines)
	}
	out, err := run(ctx, s.R, what, JournalArgv(s.Unit, q)...)
	if err != nil {
		return nil, err
	}
	return SplitJournal(out.Stdout), nil
}

// SplitJournal splits journalctl -o cat output into lines, dropping the final
// newline, carriage returns and journalctl's "-- No entries --" notice.
func SplitJournal(out []byte) []string {
	text := strings.TrimSuffix(string(out), "\n")
	if text == "" || text == "-- No entries --" {
		return nil
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}
