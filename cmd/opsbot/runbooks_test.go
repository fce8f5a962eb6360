package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
)

// TestReloadClosesReplacedRunbook: a reload (SIGHUP) puts a new runbook in
// effect; the one it replaced keeps its SSH connections while a job started
// on it runs, and closes them when that job ends; one no job uses is closed
// at once. Reload after reload, opsbot holds the connections of one runbook
// (and of those still finishing jobs), not of every config it ever had.
func TestReloadClosesReplacedRunbook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := setup(ctx, setupOptions{Lab: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	show, err := commands.Parse("mtp show", e.cfg.CommandOptions())
	if err != nil {
		t.Fatal(err)
	}
	connected := func(rb *ops.Runbook) bool {
		for _, h := range rb.SSHStats() {
			if h.Connected {
				return true
			}
		}
		return false
	}
	run := func() {
		t.Helper()
		if _, err := e.runbooks.Run(ctx, show, ops.Discard); err != nil {
			t.Fatalf("mtp show: %v", err)
		}
	}

	run()
	rb1 := e.runbooks.cur.Load()
	if !connected(rb1) {
		t.Fatal("after a job the runbook has no SSH connection to reuse")
	}
	job := e.runbooks.take() // a job still running on rb1
	if err := e.reload(e.cfg); err != nil {
		t.Fatal(err)
	}
	rb2 := e.runbooks.cur.Load()
	if rb2 == rb1 {
		t.Fatal("reload kept the old runbook in effect")
	}
	if !connected(rb1) || e.runbooks.open() != 2 {
		t.Fatalf("while a job runs on the replaced runbook: connected %v, %d open; want its connections kept, 2 open",
			connected(rb1), e.runbooks.open())
	}
	run()
	if !connected(rb2) {
		t.Fatal("a job after the reload did not run on the new runbook")
	}
	e.runbooks.done(job)
	if connected(rb1) || e.runbooks.open() != 1 {
		t.Fatalf("after the replaced runbook's last job: connected %v, %d open; want it closed, 1 open", connected(rb1), e.runbooks.open())
	}
	if err := e.reload(e.cfg); err != nil {
		t.Fatal(err)
	}
	if connected(rb2) || e.runbooks.open() != 1 {
		t.Fatalf("a runbook no job uses, replaced: connected %v, %d open; want it closed at once, 1 open", connected(rb2), e.runbooks.open())
	}
	run()
}
