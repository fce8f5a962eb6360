package commands

import (
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops"
)

// A change of a replicated service itself (`mtp steps 10 qwen`) runs as a
// rollout over its replicas: ops.Runbook.Rollout, after a confirmation that
// shows the plan (the canary, its gate, the waves). Which commands do so is
// their Policy.OnGroup (GroupRollout); what each replica gets is the
// command's rolloutChange.

// rollsOut is implemented by the commands whose change a replicated service
// takes as a rollout: the change each replica gets.
type rollsOut interface{ rolloutChange() ops.Change }

func (c *MTPSteps) rolloutChange() ops.Change  { return ops.StepsChange(c.Steps) }
func (c *MTPOff) rolloutChange() ops.Change    { return ops.StepsChange(0) }
func (c *EngineSet) rolloutChange() ops.Change { return ops.FlagChange(c.Flag, c.Value) }

// IsRollout reports whether c names a replicated service itself and runs as
// a rollout over its replicas (its undo included).
func IsRollout(c Command) bool {
	return c.Spec().OnGroup == GroupRollout && len(Where(c).Replicas) > 0
}

// rolloutPreview is the confirmation of a rollout: the plan, from the
// configuration's replicas, router and rollout settings (opts). ok is false
// for a command that is no rollout.
func rolloutPreview(c Command, opts Options) (text string, ok bool) {
	if !IsRollout(c) {
		return "", false
	}
	on := Where(c)
	if _, undo := c.(*MTPUndo); undo {
		return fmt.Sprintf("`%s` will undo the last rollout of %s on every replica it changed (%s), as a rollout without a gate: "+
			"each replica drained, its previous unit put back byte for byte, started, verified, back in the router. (`%s --dry-run` shows what it would do.)",
			Text(c), on.Service, strings.Join(on.Replicas, ", "), Text(c)), true
	}
	r, isChange := c.(rollsOut)
	if !isChange {
		return "", false
	}
	services := map[string]ops.ServiceConfig{}
	for _, s := range opts.Services {
		if s.Group != on.Service {
			continue
		}
		var rc *ops.RouterConfig
		if s.Router != "" {
			rc = &ops.RouterConfig{URL: s.Router}
		}
		services[s.Name] = ops.ServiceConfig{Host: s.Host, Unit: s.Unit,
			Replica: &ops.ReplicaOf{Group: s.Group, Name: strings.TrimPrefix(s.Name, s.Group+"@"), Router: rc, Index: s.ReplicaIndex}}
	}
	plan, err := ops.RolloutPlanOf(services, opts.Rollout, on.Service, r.rolloutChange())
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("`%s` rolls out %s\n(`%s --dry-run` shows what each replica would get.)", Text(c), plan.Text(), Text(c)), true
}
