package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrHoldLost is the error of a command not sent because the job it belongs
// to no longer holds its service (its process stalled past its lease and
// another may have taken the service over): such a process changes nothing
// more on any host.
var ErrHoldLost = errors.New("this opsbot process no longer holds the job's lease")

// Hold says whether the job commands are sent for may still change hosts:
// Check returns nil while it may, else why not. ops.JobHold is one.
type Hold interface {
	Check() error
}

// Guarded is a Host whose commands and file writes are sent only while a
// hold is held: Run and WriteFileAtomic check it right before they send
// anything, and an error from it stops the command unsent, wrapped in
// ErrHoldLost. Reads are not checked. The job runtime runs every job's
// pipeline on guarded hosts, so a process resumed after a pause cannot run
// its next systemctl before it notices it lost its lease. A Guarded shares
// its Host's connection; it is safe for concurrent use as long as its hold
// is.
type Guarded struct {
	h    *Host
	hold Hold
}

// Guard returns h guarded by hold (nil: nothing is checked).
func (h *Host) Guard(hold Hold) *Guarded { return &Guarded{h: h, hold: hold} }

// Name is the host's configured name.
func (g *Guarded) Name() string { return g.h.Name() }

// Run is Host.Run, sent only while the hold is held (checked before each
// attempt to send).
func (g *Guarded) Run(ctx context.Context, stdin []byte, argv ...string) (Output, error) {
	return g.h.run(ctx, g.hold, stdin, argv)
}

// ReadFile is Host.ReadFile (not checked: it changes nothing).
func (g *Guarded) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return g.h.ReadFile(ctx, name)
}

// Lstat is Host.Lstat (not checked: it changes nothing).
func (g *Guarded) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	return g.h.Lstat(ctx, name)
}

// WriteFileAtomic is Host.WriteFileAtomic, sent only while the hold is held.
func (g *Guarded) WriteFileAtomic(ctx context.Context, name string, data []byte, perm os.FileMode) error {
	return g.h.writeFileAtomic(ctx, g.hold, name, data, perm)
}

// checkHold runs hold's check, if any: an error from it says what was not
// sent, wrapped in ErrHoldLost.
func checkHold(hold Hold, what string) error {
	if hold == nil {
		return nil
	}
	if err := hold.Check(); err != nil {
		if errors.Is(err, ErrHoldLost) {
			return fmt.Errorf("%s: not sent: %w", what, err)
		}
		return fmt.Errorf("%s: not sent: %w: %w", what, ErrHoldLost, err)
	}
	return nil
}
