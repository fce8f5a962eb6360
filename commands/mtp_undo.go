package commands

import (
	"context"
	"fmt"

	"github.com/opsbot/opsbot/ops"
)

var mtpUndoSpec = &Spec{
	Path:    "mtp undo",
	Summary: "put back the unit text the service's last successful change replaced, redeploy it and benchmark it",
	Details: "Finds the last job that changed the service's unit and succeeded (mtp steps, mtp per-load, engine set, or an earlier " +
		"mtp undo), and deploys the text that job replaced through the same steps as mtp steps: preview, confirm, stop, clear " +
		"GPU memory, write, start, wait until it serves, verify, benchmark. A file the job wrote beside the unit (mtp " +
		"per-load's adaptive config) is put back with it, or removed when the job created it. Refused when there is " +
		"nothing to undo, or when the unit or that file changed since that job (by another job or by hand): undo only " +
		"what they still hold.",
	Examples: []string{"mtp undo", "mtp undo qwen --dry-run"},
	Policy:   Policy{Role: Operator, Mutating: true, Confirm: true, Lock: LockService, Hosts: true, Reaps: true, Slash: true, OnGroup: GroupRollout},
	new:      func() Command { return new(MTPUndo) },
}

// MTPUndo is `mtp undo [SERVICE]`: put back what the service's last successful change replaced.
type MTPUndo struct {
	On
	DryRun bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*MTPUndo) Spec() *Spec { return mtpUndoSpec }

func (c *MTPUndo) args() []arg { return []arg{service(&c.On), dryRun(&c.DryRun)} }

// Run runs the command's pipeline on rb.
func (c *MTPUndo) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.MTPUndo(ctx, c.Service, c.DryRun, rep)
}

// Preview says what the command will do, for its confirmation.
func (c *MTPUndo) Preview() string {
	return c.preview("the unit text of "+c.Service+", and any file written beside it (SGLang's adaptive config),", "the file and the unit")
}

// previewIn is Preview naming every file undo may restore, in the order it
// writes them, from the service's entry in opts: SGLang's adaptive config
// file (put back, or removed when the change undone created it), then the
// unit; vLLM's unit alone.
func (c *MTPUndo) previewIn(opts Options) string {
	for _, s := range opts.Services {
		switch {
		case s.Name != c.Service || s.Unit == "":
		case s.Engine == "vllm" || s.Adaptive == "":
			return c.preview(fmt.Sprintf("the text of the unit %s", s.Unit), "the unit "+s.Unit)
		default:
			return c.preview(fmt.Sprintf("two files: SGLang's adaptive config %s (removed instead when that change created it), then the unit %s,", s.Adaptive, s.Unit),
				fmt.Sprintf("%s, then %s", s.Adaptive, s.Unit))
		}
	}
	return c.Preview()
}

func (c *MTPUndo) preview(what, writes string) string {
	text := Text(c)
	return fmt.Sprintf("`%s` will put back %s that %s's last successful change replaced: "+
		"stop %s on %s, clear its GPU memory, write %s, start it, wait until it serves, verify and benchmark. "+
		"(`%s --dry-run` shows the diff.)", text, what, c.Service, c.Service, c.Host, writes, text)
}
