package bot

import (
	"context"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// nothingToUndo refuses `mtp undo` at once when the job history holds no
// change of its service to put back (ops.CheckUndoable): no confirmation is
// asked and no job is made. The job checks again when it runs.
func (d *Dispatcher) nothingToUndo(ctx context.Context, req Request, cmd commands.Command) (Reply, bool) {
	undo, ok := cmd.(*commands.MTPUndo)
	if !ok || d.opts.Store == nil {
		return Reply{}, false
	}
	err := ops.CheckUndoable(ctx, ChangeLog{Store: d.opts.Store}, undo.Service)
	if err == nil {
		return Reply{}, false
	}
	d.audit(ctx, req, commands.Text(cmd), store.DecisionRefused, err.Error(), 0)
	return Reply{Outcome: Refused, Text: err.Error(), Command: cmd, Err: err}, true
}
