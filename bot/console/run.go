package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// Exit codes of `opsbot run`: the highest of its commands', or ExitUsage
// when a command did not parse and so none ran.
const (
	ExitOK = 0 // every job succeeded (or was answered)
	// ExitFail: a job failed, was refused or cancelled, or a command was
	// turned down when it ran (`job 7` of a job that does not exist, an
	// expired confirmation).
	ExitFail  = 1
	ExitUsage = 2 // a command did not parse; none was run
	// ExitUnrecorded: a job ended on its host but opsbot's store did not
	// take its record (it refused writes for RunOptions.RecordWait, or
	// Ctrl-C gave up the wait). Its outcome is printed all the same.
	ExitUnrecorded = 3
	// ExitPending: a command waits for a second person's approval
	// (auth.two_person); nothing ran yet. The reply names the `approve
	// TOKEN` that someone else runs.
	ExitPending = 4
)

// How long Run waits for a store that refuses a job's record, and how
// often it says it still waits (RunOptions.RecordWait, RecordTick).
const (
	DefaultRecordWait = 5 * time.Minute
	DefaultRecordTick = 30 * time.Second
)

// Platform is the platform name of terminal requests.
const Platform = "console"

// Room is the room of terminal requests.
const Room = "terminal"

// Bot is what the console needs from the bot: the inbound door, the outcome
// of a job it started, the jobs still running, and parsing without acting.
type Bot interface {
	bot.Inbound
	Check(text string) error
	Wait(ctx context.Context, id int64) (bot.JobOutcome, error)
	// AwaitRecord waits until the store has taken job id's record (nil),
	// or says why not: ctx ended, or opsbot stopped first.
	AwaitRecord(ctx context.Context, id int64) error
	Active() []int64
}

// Ask asks the one at the terminal whether to go ahead with what question
// previews; token is the confirmation token the question names.
type Ask func(question, token string) (bool, error)

// RunOptions configure Run.
type RunOptions struct {
	Bot Bot
	// OSUser is who runs the terminal (auth key "console:OSUSER").
	OSUser string
	// As is the console user to act as (auth key "console:AS"); "" is OSUser.
	// The bot allows it only when OSUser is an admin.
	As string
	// JSON prints one JSON object per command per line instead of the thread.
	JSON bool
	// Yes answers confirmations.
	Yes bool
	// Ask asks on a terminal; nil when there is none, in which case a
	// command that needs confirmation is not run.
	Ask Ask
	Out io.Writer
	Err io.Writer
	// ChartDir is where a job's chart is saved with JSON (SaveChart; "":
	// the current directory); without JSON the Console chat saves it.
	ChartDir string
	// Invocation is how the commands were run, flags included ("opsbot run
	// --lab"), for the hint on quoting them.
	Invocation string
	// Ready, when set, is called once every command parsed and before the
	// first runs, when one of them runs on hosts (the Bot's NeedsHosts, when
	// it has one; else always): `opsbot run --lab` waits there for the lab's
	// services to serve, so a typo or `jobs` does not wait for them. An error
	// runs nothing and is ExitFail.
	Ready func(ctx context.Context) error
	// RecordWait bounds the wait for a store that refuses a job's record
	// (0: DefaultRecordWait); RecordTick is how often Err says it still
	// waits (0: DefaultRecordTick).
	RecordWait, RecordTick time.Duration
}

func (o RunOptions) request(text string) bot.Request {
	r := bot.Request{Platform: Platform, User: o.OSUser, Room: Room, Text: text, Confirmed: o.Yes}
	if o.As != "" && o.As != o.OSUser {
		r.User, r.Via = o.As, o.OSUser
	}
	return r
}

// JSONJob is a job in the JSON output: the job a command ran, or the one
// it is about (`job N`), or one of a list (`jobs`). ID and Status are always
// there; the rest when known.
type JSONJob struct {
	ID      int64  `json:"id"`
	Status  string `json:"status"`
	Command string `json:"command,omitempty"`
	// Created, Started and Ended: when it was asked for, began and ended.
	Created *time.Time `json:"created_at,omitempty"`
	Started *time.Time `json:"started_at,omitempty"`
	Ended   *time.Time `json:"ended_at,omitempty"`
	// Error says why it failed, was refused or cancelled.
	Error  string      `json:"error,omitempty"`
	Result *bot.Result `json:"result,omitempty"`
}

// JSONLine is the JSON object printed for each command with --json.
type JSONLine struct {
	Command string      `json:"command"`
	Job     *JSONJob    `json:"job"`
	Events  []bot.Event `json:"events"`
	Result  *bot.Result `json:"result"`
	Reply   string      `json:"reply,omitempty"`
	Error   *string     `json:"error"`
	// Jobs are the jobs a list answers with (`jobs`, `jobs all`), newest
	// first, and Omitted how many older ones it left out; both only on such
	// a line.
	Jobs    *[]JSONJob `json:"jobs,omitempty"`
	Omitted *int       `json:"omitted,omitempty"`
	// Fleet is `fleet`'s answer (bot.Fleet): every service's row, every
	// figure not known null; only on a `fleet` line.
	Fleet *bot.Fleet `json:"fleet,omitempty"`
	// ChartPath is the file the job's chart (a sweep's, a tune's) was saved
	// to, in RunOptions.ChartDir; only on the line of a job that made one.
	ChartPath string `json:"chart_path,omitempty"`
	// Unrecorded says why opsbot's store does not have the job's end (the
	// job is as it ended on its host); only on such a line (ExitUnrecorded).
	Unrecorded string `json:"unrecorded,omitempty"`
}

// jsonJob is o as the JSON output shows it; events stay out (a line
// carries its job's events in its own field).
func jsonJob(o bot.JobOutcome) *JSONJob {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return &JSONJob{ID: o.ID, Status: string(o.Status), Command: o.Command, Created: at(o.Created),
		Started: at(o.Started), Ended: at(o.Ended), Error: o.Error, Result: o.Result}
}

// Run sends each command through the bot in order, waits for its job and
// prints the thread (or JSON). Every command is parsed before any runs: one
// usage error runs nothing and returns ExitUsage. Otherwise it returns the
// highest exit code of its commands (ExitOK, ExitFail), each run whatever
// became of the ones before.
func Run(ctx context.Context, o RunOptions, cmds []string) int {
	for _, text := range cmds {
		if err := o.Bot.Check(text); err != nil {
			msg := err.Error()
			if q, ok := regroup(o.Bot, cmds); ok {
				// The shell split a command into words: say how to quote it.
				parts := make([]string, len(q))
				for i, c := range q {
					parts[i] = ShellQuote(c)
				}
				inv := o.Invocation
				if inv == "" {
					inv = "opsbot run"
				}
				msg = "quote each command: " + inv + " " + strings.Join(parts, " ")
				text = strings.Join(cmds, " ")
			} else if len(cmds) > 1 {
				msg += fmt.Sprintf("\nnothing was run: each of the %d commands is checked before any runs", len(cmds))
			}
			if o.JSON {
				writeJSON(o.Out, JSONLine{Command: text, Events: []bot.Event{}, Error: ptr(msg)})
			} else {
				fmt.Fprintf(o.Err, "opsbot: %s\n", msg)
			}
			return ExitUsage
		}
	}
	if o.Ready != nil && needsHosts(o.Bot, cmds) {
		if err := o.Ready(ctx); err != nil {
			report(o, strings.Join(cmds, " "), nil, err.Error()+"; nothing was run")
			return ExitFail
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

// needsHosts reports whether one of cmds runs on hosts: b's NeedsHosts
// says, or, for a Bot without one, every command may.
func needsHosts(b Bot, cmds []string) bool {
	h, ok := b.(interface{ NeedsHosts(text string) bool })
	if !ok {
		return true
	}
	for _, text := range cmds {
		if h.NeedsHosts(text) {
			return true
		}
	}
	return false
}

func runOne(ctx context.Context, o RunOptions, text string) int {
	req := o.request(text)
	reply := o.Bot.Handle(ctx, req)
	if reply.Outcome == bot.NeedsConfirm {
		reply = confirm(ctx, o, req, reply)
		if reply.Outcome == bot.NeedsConfirm {
			msg := "not confirmed, nothing was changed: " + reply.Text
			if o.Ask == nil {
				// Say what it would have confirmed: the preview is what --yes agrees to.
				msg = "refused: this command needs confirmation and there is no terminal to ask; rerun with --yes to confirm this:\n" + bot.Plain(reply.Preview)
			}
			report(o, text, nil, msg)
			return ExitFail
		}
	}
	switch reply.Outcome {
	case bot.NeedsApproval:
		if o.JSON {
			writeJSON(o.Out, JSONLine{Command: text, Events: []bot.Event{}, Reply: reply.Text})
		} else {
			fmt.Fprintln(o.Out, bot.Plain(reply.Text))
		}
		return ExitPending
	case bot.Invalid:
		// It parsed (Run checked): turned down as it ran, e.g. a job or a
		// confirmation that does not exist.
		report(o, text, nil, reply.Text)
		return ExitFail
	case bot.Refused:
		var job *JSONJob
		if reply.JobID != 0 {
			job = &JSONJob{ID: reply.JobID, Status: "refused"}
		}
		report(o, text, job, reply.Text)
		return ExitFail
	case bot.Failed:
		report(o, text, nil, reply.Text)
		return ExitFail
	case bot.Answered:
		if o.JSON {
			writeJSON(o.Out, answerLine(text, reply))
		} else {
			fmt.Fprintln(o.Out, bot.Plain(reply.Text))
		}
		return ExitOK
	}
	return jobEnded(ctx, o, text, reply.JobID)
}

// jobEnded waits for job id, which command text started, and prints its
// outcome (the thread has printed its steps; with JSON, its line) once
// the store has taken it, or once Run gives up waiting for the store.
func jobEnded(ctx context.Context, o RunOptions, text string, id int64) int {
	job, err := o.Bot.Wait(ctx, id)
	if err != nil {
		report(o, text, &JSONJob{ID: id, Status: "unknown"}, "waiting for the job: "+err.Error())
		return ExitFail
	}
	unrecorded := ""
	if job.Unrecorded != nil {
		if err := awaitRecord(ctx, o, job); err != nil {
			unrecorded = err.Error()
			if !o.JSON {
				fmt.Fprintf(o.Err, "opsbot: %s\n", notRecorded(job, err))
			}
		} else if j, err := o.Bot.Wait(ctx, id); err == nil {
			job = j
		}
	}
	if o.JSON {
		line := JSONLine{Command: text, Job: jsonJob(job),
			Events: append(make([]bot.Event, 0, len(job.Events)), job.Events...), Result: job.Result, Unrecorded: unrecorded}
		if job.Error != "" {
			line.Error = ptr(job.Error)
		}
		if job.Result != nil && len(job.Result.Chart) > 0 {
			path, err := SaveChart(o.ChartDir, bot.ChartName(job.ID), job.Result.Chart, time.Now())
			if err != nil {
				fmt.Fprintf(o.Err, "opsbot: job #%d's chart was not saved (the job's result stands): %v\n", job.ID, err)
			}
			line.ChartPath = path
		}
		writeJSON(o.Out, line)
	}
	switch {
	case unrecorded != "":
		return ExitUnrecorded
	case !job.Succeeded():
		return ExitFail
	}
	return ExitOK
}

// answerLine is the JSON line of an answer: the job it is about (`job N`,
// with that job's steps as its events) or the jobs it lists.
func answerLine(text string, r bot.Reply) JSONLine {
	line := JSONLine{Command: text, Events: []bot.Event{}, Reply: r.Text}
	if r.Job != nil {
		line.Job = jsonJob(*r.Job)
		line.Events = append(line.Events, r.Job.Events...)
	}
	line.Fleet = r.Fleet
	if r.Jobs != nil {
		list := make([]JSONJob, 0, len(r.Jobs))
		for _, j := range r.Jobs {
			list = append(list, *jsonJob(j))
		}
		omitted := r.Omitted
		line.Jobs, line.Omitted = &list, &omitted
	}
	return line
}

// confirm asks the terminal about a reply that needs confirmation and acts
// on the answer: Confirm on a yes, Abort otherwise. It returns the reply
// unchanged when there is no one to ask.
func confirm(ctx context.Context, o RunOptions, req bot.Request, reply bot.Reply) bot.Reply {
	if o.Ask == nil {
		if a, ok := reply.Action(bot.ActAbort); ok {
			o.Bot.Act(ctx, action(req, a))
		}
		return reply
	}
	yes, err := o.Ask(reply.Text, reply.Token)
	kind := bot.ActConfirm
	if err != nil || !yes {
		kind = bot.ActAbort
	}
	a, ok := reply.Action(kind)
	if !ok {
		return reply
	}
	r := o.Bot.Act(ctx, action(req, a))
	if kind == bot.ActAbort {
		return reply
	}
	return r
}

func action(req bot.Request, a bot.Action) bot.ActionRequest {
	return bot.ActionRequest{ID: a.ID, Platform: req.Platform, User: req.User, Room: req.Room, Via: req.Via}
}

func report(o RunOptions, text string, job *JSONJob, msg string) {
	if o.JSON {
		writeJSON(o.Out, JSONLine{Command: text, Job: job, Events: []bot.Event{}, Error: ptr(msg)})
		return
	}
	fmt.Fprintf(o.Err, "opsbot: %s\n", msg)
}

// maxRegroup is the most words regroup tries to join into commands.
const maxRegroup = 64

// regroup finds how words the shell split apart (`opsbot run --lab mtp steps
// 10`) join into commands that parse: from the first word, the longest run
// of words that parses is one command, and so on. It reports false when some
// word belongs to no command that parses, or when the words are already the
// commands.
func regroup(b Bot, words []string) ([]string, bool) {
	if len(words) < 2 || len(words) > maxRegroup {
		return nil, false
	}
	var out []string
	for i := 0; i < len(words); {
		j := len(words)
		for ; j > i; j-- {
			if err := b.Check(strings.Join(words[i:j], " ")); err == nil {
				break
			}
		}
		if j == i {
			return nil, false
		}
		out = append(out, strings.Join(words[i:j], " "))
		i = j
	}
	return out, len(out) < len(words)
}

// ShellQuote quotes s for a POSIX shell: as it is when it needs no quotes,
// else in single quotes.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
