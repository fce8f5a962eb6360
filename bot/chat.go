// Package bot is the door: the Dispatcher that turns chat text into
// authorised jobs (submitted to the job runtime, package jobs), answers,
// confirmations and refusals; admission and the claim of each delivery;
// auth; and the contract adapters speak (Inbound, Request, Reply, Adapter).
//
// Chat adapters (bot/slack, bot/matrix, bot/console) only translate between a
// platform and this package, through one small contract, Inbound: a Request
// in, a typed Reply out that says what to show, to whom (ToUser or ToRoom) and
// which actions it offers (Confirm / Abort on a preview, Cancel on a job);
// the adapter sends a clicked action back to Act with the clicking user, who
// is authorised again, in the room where they click. An adapter that knows
// more about a user supplies it through a small interface package auth reads
// (auth.Membership: user groups; auth.RoomLevels: power levels in a room). Every
// decision is made here, once, so all platforms behave the same. Scheduled
// runs come through the same door as platform "schedule", with their
// creator's role and their target rooms.
//
// As a service (`opsbot serve`), the App hosts Adapters, drains (Dispatcher.Drain:
// every request is answered RestartingText), shuts down stopping each job at
// a safe point (jobs.Engine.Shutdown; what is stopped ends interrupted) and
// reloads roles and services (App.Reload).
//
// The Scheduler (package schedule) fires the store's and the config's
// schedules through that door, and the Watchdog (package watchdog) starts
// its own recoveries through it (platform "watchdog", alerts.go); `opsbot
// serve` starts both (package app).
//
// A command's behaviour is bound to its type: a job command runs its own
// Run (package commands) in the runtime; a command the door answers from
// the store has its case in answerFor (handlers.go). Results cross layers as
// Go types (ops.Result).
package bot

import (
	"github.com/opsbot/opsbot/chat"
	"github.com/opsbot/opsbot/report"
)

// The door's face for adapters: the vocabulary's home is package chat.
// These aliases let an adapter speak to the door through bot alone.
type (
	Ref        = chat.Ref
	Kind       = chat.Kind
	Image      = chat.Image
	Status     = chat.Status
	Message    = chat.Message
	Chat       = chat.Chat
	Pacer      = chat.Pacer
	ActionKind = chat.ActionKind
	Action     = chat.Action
)

// The door's face for adapters: the vocabulary's home is package chat.
const (
	KindStatus = chat.KindStatus
	KindStep   = chat.KindStep
	KindResult = chat.KindResult
	KindNotice = chat.KindNotice

	StatusQueued      = chat.StatusQueued
	StatusWaiting     = chat.StatusWaiting
	StatusRunning     = chat.StatusRunning
	StatusSucceeded   = chat.StatusSucceeded
	StatusFailed      = chat.StatusFailed
	StatusRefused     = chat.StatusRefused
	StatusCancelled   = chat.StatusCancelled
	StatusInterrupted = chat.StatusInterrupted

	ActConfirm = chat.ActConfirm
	ActAbort   = chat.ActAbort
	ActCancel  = chat.ActCancel
	ActApprove = chat.ActApprove
	ActReject  = chat.ActReject
)

// Pre wraps text in a preformatted block (report.Pre), for adapters, which
// import bot only.
func Pre(text string) string { return report.Pre(text) }

// Plain is text with its preformatted blocks unfenced (report.Plain), for a
// terminal.
func Plain(text string) string { return report.Plain(text) }

// ChartName is the file name of job jobID's chart (report.ChartName).
func ChartName(jobID int64) string { return report.ChartName(jobID) }
