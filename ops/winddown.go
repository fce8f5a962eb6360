package ops

import "context"

type windDownKey struct{}

// WithWindDown returns ctx carrying asked, which a pipeline calls at its
// step boundaries: a non-nil error (the reason: opsbot's store refuses
// writes) asks it to wind down. Unlike a cancel, which stops at the next
// step boundary whatever state that leaves, winding down begins no new
// change and leaves the service serving: a service stopped with its unit
// unchanged is started again; a unit already written is started and
// verified; the benchmark is skipped. The pipeline then fails naming the
// reason and the state it left (Result.Left).
func WithWindDown(ctx context.Context, asked func() error) context.Context {
	return context.WithValue(ctx, windDownKey{}, asked)
}

// WindDownAsked returns why ctx's job is asked to wind down, or nil: for
// pipelines outside this package (and tests).
func WindDownAsked(ctx context.Context) error { return windDown(ctx) }

// windDown returns why ctx's job is asked to wind down, or nil.
func windDown(ctx context.Context) error {
	asked, _ := ctx.Value(windDownKey{}).(func() error)
	if asked == nil {
		return nil
	}
	return asked()
}
