package report

import (
	"strings"

	"github.com/opsbot/opsbot/ops"
)

// A long error is shown once per thread: in full on the ✖ line of the step
// that failed (where it happened, in the job's thread), and shortened
// wherever the job's final error repeats it: the status message the thread
// hangs from and the result block at its end. LongError is the length from
// which a failed step's message counts as long.
const LongError = 160

// ShownOnce returns errText, the job's final error, with the message of
// every long failed step of events (the job's) that it repeats cut
// to its head and a pointer to the thread's line that has it in full.
func ShownOnce(errText string, events []ops.Event) string {
	for _, ev := range events {
		msg := ev.Message
		if ev.Status != ops.StepFailed || len(msg) < LongError {
			continue
		}
		i := strings.Index(errText, msg)
		if i < 0 {
			continue
		}
		short := errHead(msg) + " (in full in the thread, at ✖ " + ev.Step + ")"
		errText = errText[:i] + short + errText[i+len(msg):]
	}
	return errText
}

// errHead is the start of a long message: up to the quote it opens (the
// engine's line a start error quotes), else its first clause, else its
// first 100 bytes at a word.
func errHead(msg string) string {
	for _, sep := range []string{`: "`, "; "} {
		if i := strings.Index(msg, sep); i > 0 && i <= 200 {
			return msg[:i]
		}
	}
	cut := 100
	if j := strings.LastIndexByte(msg[:cut], ' '); j > 40 {
		cut = j
	}
	return msg[:cut] + "…"
}
