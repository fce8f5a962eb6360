package jobtest

import (
	"context"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
)

type events []ops.Event

func (e *events) Report(ev ops.Event) { *e = append(*e, ev) }

// TestOKSucceedsWithOneStep: OK reports step work started and done and
// returns "all good".
func TestOKSucceedsWithOneStep(t *testing.T) {
	t.Parallel()
	var got events
	res, err := OK().Run(context.Background(), ops.JobHold{}, &commands.MTPSteps{Steps: 4}, &got)
	if err != nil || res.Summary != "all good" {
		t.Fatalf("result %+v, %v", res, err)
	}
	if len(got) != 2 || got[0].Status != ops.StepStarted || got[1].Status != ops.StepDone || got[0].Step != "work" {
		t.Fatalf("events %+v", got)
	}
}

// TestHeldFuncSeesTheHold: HeldFunc passes the hold on.
func TestHeldFuncSeesTheHold(t *testing.T) {
	t.Parallel()
	var seen ops.JobHold
	f := HeldFunc(func(_ context.Context, hold ops.JobHold, _ commands.Job, _ ops.Reporter) (*ops.Result, error) {
		seen = hold
		return &ops.Result{}, nil
	})
	if _, err := f.Run(context.Background(), ops.JobHold{JobID: 7}, nil, nil); err != nil || seen.JobID != 7 {
		t.Fatalf("the function saw hold %+v (%v), want job 7's", seen, err)
	}
}
