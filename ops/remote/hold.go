package remote

import (
	"context"
	"errors"
	"fmt"
)

// ErrHoldLost is the error of a command not sent because the job it belongs
// to no longer holds its service (its process stalled past its lease and
// another may have taken the service over): such a process changes nothing
// more on any host.
var ErrHoldLost = errors.New("this opsbot process no longer holds the job's lease")

type holdKey struct{}

// WithHold returns ctx carrying check, which Run and WriteFileAtomic call
// right before they send anything to a host: an error from it stops the
// command unsent, wrapped in ErrHoldLost. The job runtime sets it on every
// job's context, so a process resumed after a pause cannot run its next
// systemctl before it notices it lost its lease.
func WithHold(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, holdKey{}, check)
}

// checkHold runs ctx's hold check, if any.
func checkHold(ctx context.Context, what string) error {
	check, _ := ctx.Value(holdKey{}).(func() error)
	if check == nil {
		return nil
	}
	if err := check(); err != nil {
		if errors.Is(err, ErrHoldLost) {
			return fmt.Errorf("%s: not sent: %w", what, err)
		}
		return fmt.Errorf("%s: not sent: %w: %w", what, ErrHoldLost, err)
	}
	return nil
}
