package commands

import "fmt"

// The key=N arguments, the --flags and --to: the arguments found by their
// name rather than their place.

// key is one key=N argument: an integer in [min, max]; def fills it when
// absent (0: leave 0, meaning "the configured default").
type key struct {
	name     string
	min, max int
	def      int
	help     string
}

// Argument ranges.
const (
	maxLines       = 1000
	defaultLines   = 50
	maxHistory     = 100
	defaultHistory = 10
)

var (
	keyLines       = key{name: "lines", min: 1, max: maxLines, def: defaultLines, help: "journal lines to show"}
	keyPrompts     = key{name: "prompts", min: 1, max: 10000, help: "requests to send"}
	keyConcurrency = key{name: "concurrency", min: 1, max: 1024, help: "requests in flight at once"}
	keyIn          = key{name: "in", min: 1, max: 131072, help: "prompt length in tokens"}
	keyOut         = key{name: "out", min: 1, max: 32768, help: "tokens generated per request"}
	keyN           = key{name: "n", min: 1, max: maxHistory, def: defaultHistory, help: "entries to show"}
)

// keyArg binds a key=N argument to an int field.
type keyArg struct {
	k *key
	v *int
}

func (a keyArg) usage() string { return "[" + a.k.name + "=N]" }
func (a keyArg) help() (string, string) {
	h := fmt.Sprintf("%s, %d..%d", a.k.help, a.k.min, a.k.max)
	if a.k.def != 0 {
		h += fmt.Sprintf(" (default %d)", a.k.def)
	} else {
		h += " (default: the configured one)"
	}
	return a.k.name + "=N", h
}

// flagDef is one --flag of the language.
type flagDef struct{ name, help string }

var (
	flagNoStart   = flagDef{"--no-start", "leave the service stopped afterwards"}
	flagForce     = flagDef{"--force", "also signal the service's own processes on its GPUs that are not engine processes (never a neighbour's, never the NVIDIA daemons); needs admin"}
	flagApplyBest = flagDef{"--apply-best", "leave the service on the best point instead of where it was"}
	flagDryRun    = flagDef{"--dry-run", "show what would be done and change nothing"}
)

// flagArg binds a --flag to a bool field. A command lists its flags in the
// order above; every mutating command takes --dry-run, last.
type flagArg struct {
	def *flagDef
	v   *bool
}

func (a flagArg) usage() string          { return "[" + a.def.name + "]" }
func (a flagArg) help() (string, string) { return a.def.name, a.def.help }

// toArg binds schedule add's --to TARGETS.
type toArg struct{ v *string }

func (toArg) usage() string { return "[--to TARGETS]" }
func (toArg) help() (string, string) {
	return "--to TARGETS", "the rooms the runs report to, first one first: slack:C0OPS,matrix:!ops:example.org (default: this room)"
}
