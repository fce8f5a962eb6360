package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// awaitRecord waits, at most o.RecordWait, for the store to take the
// record of job, which ended on its host while the store refused writes,
// saying so on o.Err at once and every o.RecordTick. It returns nil once
// the store has it, else why not: the wait ran out, or opsbot stopped
// first (Ctrl-C: the runtime stops, and gives up its records).
func awaitRecord(ctx context.Context, o RunOptions, job bot.JobOutcome) error {
	wait, tick := o.RecordWait, o.RecordTick
	if wait <= 0 {
		wait = DefaultRecordWait
	}
	if tick <= 0 {
		tick = DefaultRecordTick
	}
	fmt.Fprintf(o.Err, "opsbot: job #%d %s on its host, but opsbot's store refuses its record (%v): "+
		"waiting up to %s for the store to take it (Ctrl-C gives up)\n", job.ID, job.Status, job.Unrecorded, wait)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.Bot.AwaitRecord(wctx, job.ID) }()
	t0 := time.Now()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				fmt.Fprintf(o.Err, "opsbot: the store took job #%d's record\n", job.ID)
				return nil
			}
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("opsbot's store refused it for %s (%v)", wait, job.Unrecorded)
			}
			return err
		case <-ticker.C:
			fmt.Fprintf(o.Err, "opsbot: still waiting for opsbot's store to take job #%d's record (%s of %s; Ctrl-C gives up)\n",
				job.ID, time.Since(t0).Round(min(tick, time.Second)), wait)
		}
	}
}

// notRecorded says how job ended on its host, and that the store does not
// have it (why).
func notRecorded(job bot.JobOutcome, why error) string {
	what := fmt.Sprintf("job #%d `%s` %s on its host at %s", job.ID, job.Command, job.Status, job.Ended.UTC().Format("15:04:05 UTC"))
	if job.Error != "" {
		what += ": " + job.Error
	}
	return what + "\nIt is not recorded: " + why.Error() + ". opsbot's store shows it running until the next opsbot process " +
		"on the store reports it interrupted, with the last step it recorded."
}
