package commands

import (
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// DefaultMaxSteps is the steps limit when Options.MaxSteps is 0; its one
// home is ops/unit, whose edits enforce it.
const DefaultMaxSteps = unit.DefaultMaxSteps

// registry is the language, in help order: each command's Spec, defined in
// the command's own file. Usage lines are generated from each command's
// binding by init, so they cannot drift from what Parse accepts.
var registry = []*Spec{
	mtpStepsSpec, mtpOffSpec, mtpTuneSpec, mtpPerLoadSpec, mtpShowSpec, mtpUndoSpec,
	engineSetSpec, engineShowSpec,
	gpuStatusSpec, gpuHealthSpec, gpuRecoverSpec, gpuResetSpec,
	svcStartSpec, svcStopSpec, svcRestartSpec, svcStatusSpec, svcLogsSpec,
	benchSpec, sweepSpec,
	scheduleAddSpec, scheduleListSpec, scheduleRmSpec, schedulePauseSpec, scheduleResumeSpec,
	watchdogSilenceSpec, ackSpec,
	jobsSpec, jobSpec, cancelSpec, historySpec, fleetSpec, helpSpec,
}

// groups are the distinct first words of the registry, in order; groupTable
// holds each group's specs and their subcommand words ("steps", "show"),
// built once.
var (
	groups     []string
	groupTable []groupEntry
)

type groupEntry struct {
	name  string
	specs []*Spec
	subs  []string // the second words; nil for a one-word command
}

func init() {
	for _, s := range registry {
		s.Usage = usageOf(s)
		g := s.Group()
		if len(groups) == 0 || groups[len(groups)-1] != g {
			groups = append(groups, g)
			groupTable = append(groupTable, groupEntry{name: g})
			if s.Slash {
				slashGroups = append(slashGroups, g)
			}
		}
		e := &groupTable[len(groupTable)-1]
		e.specs = append(e.specs, s)
		if s.Path != g {
			e.subs = append(e.subs, s.Path[len(g)+1:])
		}
	}
}

// Specs returns the registry in help order. The Specs are shared: do not modify them.
func Specs() []*Spec {
	out := make([]*Spec, len(registry))
	copy(out, registry)
	return out
}

// Lookup returns the Spec with exactly this path ("svc logs"), or nil.
func Lookup(path string) *Spec {
	for _, s := range registry {
		if s.Path == path {
			return s
		}
	}
	return nil
}

// groupSpecs returns the specs whose first word is g (shared; do not modify).
func groupSpecs(g string) []*Spec {
	if e := findGroup(g); e != nil {
		return e.specs
	}
	return nil
}

// findGroup returns the group named g, case-insensitively, or nil.
func findGroup(g string) *groupEntry {
	for i := range groupTable {
		if strings.EqualFold(groupTable[i].name, g) {
			return &groupTable[i]
		}
	}
	return nil
}
