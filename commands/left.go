package commands

import "github.com/opsbot/opsbot/ops"

// NextCommand is the command that takes step for the service on (its
// host for NextGPUs), or nil for no step.
func NextCommand(step ops.NextStep, on On) Command {
	switch step {
	case ops.NextStart:
		return &SvcStart{On: on}
	case ops.NextStatus:
		return &SvcStatus{On: on}
	case ops.NextRecover:
		return &GPURecover{On: on}
	case ops.NextGPUs:
		return &GPUStatus{On: On{Host: on.Host}}
	}
	return nil
}

// NameLeft writes, in the language's words, the commands a pipeline's
// ServiceLeft names by kind: Next from NextStep, Undo from UndoSteps. The
// job runtime calls it before a result is kept or shown.
func NameLeft(l *ops.ServiceLeft) {
	if l == nil {
		return
	}
	on := On{Service: l.Service, Host: l.Host}
	if c := NextCommand(l.NextStep, on); c != nil {
		l.Next = Text(c)
	}
	if l.NextStep == ops.NextReset && len(l.ResetGPUs) > 0 {
		l.Next = Text(&GPUReset{GPUs: l.ResetGPUs, Node: l.Node})
	}
	if l.UndoSteps > 0 {
		l.Undo = Text(&MTPSteps{On: On{Service: l.Service}, Steps: l.UndoSteps})
	}
}
