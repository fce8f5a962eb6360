package jobs

import (
	"context"
	"errors"
	"strings"
)

// Explain turns a job error into the words shown to the user. It is the one
// place errors become text at the edge; inside, errors stay wrapped and typed.
func Explain(err error) string {
	if err == nil {
		return ""
	}
	var stopped *jobStopped
	if errors.As(err, &stopped) {
		switch {
		case errors.Is(stopped.cause, ErrCancelled):
			return "cancelled on request; " + afterStop(stopped.err)
		case errors.Is(stopped.cause, ErrShutdown):
			return "stopped because opsbot is shutting down; " + afterStop(stopped.err)
		default:
			return stopped.cause.Error() + "; " + afterStop(stopped.err)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out: " + err.Error()
	}
	return err.Error()
}

func afterStop(err error) string {
	if err == nil {
		return "the step in progress was stopped"
	}
	msg := err.Error()
	for _, suffix := range []string{context.Canceled.Error(), context.DeadlineExceeded.Error()} {
		msg = strings.TrimSuffix(strings.TrimSuffix(msg, suffix), ": ")
	}
	if msg == "" {
		return "the step in progress was stopped"
	}
	return "stopped during: " + msg
}
