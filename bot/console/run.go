package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/store"
)

// Exit codes of `opsbot run`.
const (
	ExitOK    = 0 // every job succeeded (or was answered)
	ExitFail  = 1 // a job failed, was refused or cancelled
	ExitUsage = 2 // a command did not parse; nothing was run
)

// Platform is the platform name of terminal requests.
const Platform = "console"

// Room is the room of terminal requests.
const Room = "terminal"

// RunOptions configure Run.
type RunOptions struct {
	Dispatcher *bot.Dispatcher
	Engine     *bot.Engine
	Store      *store.Store
	// User is the console user id (auth key "console:USER").
	User string
	// JSON prints one JSON object per command per line instead of the thread.
	JSON bool
	// Yes answers confirmations.
	Yes bool
	// Ask asks a yes/no question on a terminal; nil when there is none, in
	// which case a command that needs confirmation is refused.
	Ask func(question string) (bool, error)
	Out io.Writer
	Err io.Writer
}

// JSONEvent is one event in the JSON output.
type JSONEvent struct {
	At      time.Time `json:"at"`
	Step    string    `json:"step"`
	Status  string    `json:"status"`
	Message string    `json:"message"`
}

// JSONJob identifies the job in the JSON output.
type JSONJob struct {
	ID     int64  `json:"id"`
	Status string `json:"status"`
}

// JSONLine is the JSON object printed for each command with --json.
type JSONLine struct {
	Command string          `json:"command"`
	Job     *JSONJob        `json:"job"`
	Events  []JSONEvent     `json:"events"`
	Result  json.RawMessage `json:"result"`
	Reply   string          `json:"reply,omitempty"`
	Error   *string         `json:"error"`
}

// Run sends each command through the dispatcher in order, waits for its job and
// prints the thread (or JSON). Every command is parsed before any runs: one
// usage error runs nothing and returns ExitUsage.
func Run(ctx context.Context, o RunOptions, cmds []string) int {
	for _, text := range cmds {
		if _, err := o.Dispatcher.Parse(text); err != nil {
			if o.JSON {
				writeJSON(o.Out, JSONLine{Command: text, Events: []JSONEvent{}, Error: ptr(err.Error())})
			} else {
				fmt.Fprintf(o.Err, "opsbot: %s\n", err)
			}
			return ExitUsage
		}
	}
	code := ExitOK
	for _, text := range cmds {
		c := runOne(ctx, o, text)
		if c > code {
			code = c
		}
	}
	return code
}

func runOne(ctx context.Context, o RunOptions, text string) int {
	req := bot.Request{Platform: Platform, User: o.User, Room: Room, Text: text, Confirmed: o.Yes}
	reply := o.Dispatcher.Handle(ctx, req)
	if reply.Outcome == bot.NeedsConfirm {
		ok := false
		if o.Ask != nil {
			var err error
			ok, err = o.Ask(reply.Text)
			if err != nil {
				ok = false
			}
		}
		if !ok {
			msg := "not confirmed: " + reply.Text
			if o.Ask == nil {
				msg = "refused: this command needs confirmation and there is no terminal to ask; rerun with --yes"
			}
			report(o, text, nil, msg)
			return ExitFail
		}
		reply = o.Dispatcher.Confirm(ctx, req, reply.Token)
	}
	switch reply.Outcome {
	case bot.Invalid:
		report(o, text, nil, reply.Text)
		return ExitUsage
	case bot.Refused:
		var job *JSONJob
		if reply.JobID != 0 {
			job = &JSONJob{ID: reply.JobID, Status: string(store.Refused)}
		}
		report(o, text, job, reply.Text)
		return ExitFail
	case bot.Failed:
		report(o, text, nil, reply.Text)
		return ExitFail
	case bot.Answered:
		if o.JSON {
			writeJSON(o.Out, JSONLine{Command: text, Events: []JSONEvent{}, Reply: reply.Text})
		} else {
			fmt.Fprintln(o.Out, reply.Text)
		}
		return ExitOK
	}
	job, err := o.Engine.Wait(ctx, reply.JobID)
	if err != nil {
		report(o, text, &JSONJob{ID: reply.JobID, Status: "unknown"}, "waiting for the job: "+err.Error())
		return ExitFail
	}
	if o.JSON {
		evs, err := o.Store.Events(ctx, job.ID)
		if err != nil {
			report(o, text, &JSONJob{ID: job.ID, Status: string(job.Status)}, "reading the job's events: "+err.Error())
			return ExitFail
		}
		line := JSONLine{Command: text, Job: &JSONJob{ID: job.ID, Status: string(job.Status)}, Events: make([]JSONEvent, 0, len(evs)),
			Result: job.Result}
		for _, e := range evs {
			line.Events = append(line.Events, JSONEvent{At: e.At, Step: e.Step, Status: e.Status, Message: e.Message})
		}
		if job.Error != "" {
			line.Error = ptr(job.Error)
		}
		writeJSON(o.Out, line)
	}
	if job.Status != store.Succeeded {
		return ExitFail
	}
	return ExitOK
}

func report(o RunOptions, text string, job *JSONJob, msg string) {
	if o.JSON {
		writeJSON(o.Out, JSONLine{Command: text, Job: job, Events: []JSONEvent{}, Error: ptr(msg)})
		return
	}
	fmt.Fprintf(o.Err, "opsbot: %s\n", msg)
}

func writeJSON(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(w, `{"error":%q}`+"\n", err.Error())
		return
	}
	w.Write(append(b, '\n'))
}

func ptr(s string) *string { return &s }
