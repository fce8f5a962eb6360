package commands

import "strings"

// perLoadWord is the word of mtp tune's per-load form.
const perLoadWord = "per-load"

// pkind is the kind of a positional argument.
type pkind uint8

const (
	pSteps      pkind = iota // N: an integer 1..MaxSteps into Steps
	pService                 // [SERVICE]: optional; missing = the only service
	pHost                    // [HOST]: optional; missing = the only GPU host, else all
	pTarget                  // [HOST|SERVICE]: optional; resolved to both
	pLiteral                 // a required literal word (sweep's "steps")
	pStepList                // LIST: 1,2,3 or 1..5 or 1..5,10
	pAll                     // [all]
	pJobID                   // JOB: 42 or #42
	pScheduleID              // ID: 3 or #3
	pCron                    // "CRON": a quoted cron spec
	pSub                     // COMMAND...: the rest, a job command
	pTopic                   // [COMMAND]: the rest, a help topic
	pTopKList                // [topk LIST]: SGLang topk values a sweep crosses with its steps
	pDraftList               // [draft LIST]: draft token counts a sweep crosses with each topk above 1
	pAtList                  // [at LIST]: the concurrencies a sweep benchmarks each point at
	pAt                      // [at N]: the concurrency mtp tune benchmarks at
	pRange                   // [RANGE]: a..b, the steps mtp tune searches
	pDuration                // DURATION: 30m, 2h, 1d
	pIncidentID              // INCIDENT: 7 or #7
	pPerLoad                 // [per-load]: mtp tune finds the best steps at each concurrency of its at LIST
	pLoadTable               // TABLE: concurrency:steps[/steps...] pairs, e.g. 1:7 8:6 32:2 64:2/3
)

// param is one positional argument of a Spec.
type param struct {
	kind pkind
	word string // pLiteral: the word
}

func (p param) optional() bool {
	switch p.kind {
	case pService, pHost, pTarget, pAll, pTopic, pTopKList, pDraftList, pAtList, pAt, pRange, pPerLoad:
		return true
	}
	return false
}

func (p param) usage() string {
	switch p.kind {
	case pSteps:
		return "N"
	case pService:
		return "[SERVICE]"
	case pHost:
		return "[HOST]"
	case pTarget:
		return "[HOST|SERVICE]"
	case pLiteral:
		return p.word
	case pStepList:
		return "LIST"
	case pAll:
		return "[all]"
	case pJobID:
		return "JOB"
	case pScheduleID:
		return "ID"
	case pCron:
		return `"CRON"`
	case pSub:
		return "COMMAND..."
	case pTopic:
		return "[COMMAND]"
	case pTopKList:
		return "[topk LIST]"
	case pDraftList:
		return "[draft LIST]"
	case pAtList:
		return "[at LIST]"
	case pAt:
		return "[at N|LIST]"
	case pPerLoad:
		return "[" + perLoadWord + "]"
	case pLoadTable:
		return "TABLE"
	case pRange:
		return "[RANGE]"
	case pDuration:
		return "DURATION"
	case pIncidentID:
		return "INCIDENT"
	}
	return "?"
}

// word is the literal that introduces an optional param ("at"), or "".
func (p param) word0() string {
	switch p.kind {
	case pAtList, pAt:
		return "at"
	case pPerLoad:
		return perLoadWord
	case pTopKList:
		return "topk"
	case pDraftList:
		return "draft"
	}
	return ""
}

// keyField names the Command field a key=N argument sets.
type keyField uint8

const (
	kLines keyField = iota
	kPrompts
	kConcurrency
	kInputLen
	kOutputLen
	kN
)

// key is one key=N argument: an integer in [min, max]; def fills it when absent
// (0 = leave 0, meaning "the configured default").
type key struct {
	name     string
	min, max int
	def      int
	field    keyField
	help     string
}

func (k *key) set(c *Command, v int) {
	switch k.field {
	case kLines:
		c.Lines = v
	case kPrompts:
		c.Bench.Prompts = v
	case kConcurrency:
		c.Bench.Concurrency = v
	case kInputLen:
		c.Bench.InputLen = v
	case kOutputLen:
		c.Bench.OutputLen = v
	case kN:
		c.N = v
	}
}

func (k *key) get(c *Command) int {
	switch k.field {
	case kLines:
		return c.Lines
	case kPrompts:
		return c.Bench.Prompts
	case kConcurrency:
		return c.Bench.Concurrency
	case kInputLen:
		return c.Bench.InputLen
	case kOutputLen:
		return c.Bench.OutputLen
	case kN:
		return c.N
	}
	return 0
}

// flagBit is a set of --flags.
type flagBit uint8

const (
	fNoStart flagBit = 1 << iota
	fForce
	fDryRun
	fApplyBest
)

// flagNames in usage order.
var flagNames = [...]struct {
	f    flagBit
	name string
	help string
}{
	{fNoStart, "--no-start", "leave the service stopped afterwards"},
	{fForce, "--force", "also signal the service's own processes on its GPUs that are not engine processes (never a neighbour's, never the NVIDIA daemons); needs admin"},
	{fApplyBest, "--apply-best", "leave the service on the best point instead of where it was"},
	{fDryRun, "--dry-run", "show what would be done and change nothing"},
}

func (c *Command) setFlag(f flagBit) {
	switch f {
	case fNoStart:
		c.NoStart = true
	case fForce:
		c.Force = true
	case fDryRun:
		c.DryRun = true
	case fApplyBest:
		c.ApplyBest = true
	}
}

func (c *Command) hasFlag(f flagBit) bool {
	switch f {
	case fNoStart:
		return c.NoStart
	case fForce:
		return c.Force
	case fDryRun:
		return c.DryRun
	case fApplyBest:
		return c.ApplyBest
	}
	return false
}

// Argument ranges.
const (
	maxLines       = 1000
	defaultLines   = 50
	maxHistory     = 100
	defaultHistory = 10
)

var (
	keyLines       = key{name: "lines", min: 1, max: maxLines, def: defaultLines, field: kLines, help: "journal lines to show"}
	keyPrompts     = key{name: "prompts", min: 1, max: 10000, field: kPrompts, help: "requests to send"}
	keyConcurrency = key{name: "concurrency", min: 1, max: 1024, field: kConcurrency, help: "requests in flight at once"}
	keyIn          = key{name: "in", min: 1, max: 131072, field: kInputLen, help: "prompt length in tokens"}
	keyOut         = key{name: "out", min: 1, max: 32768, field: kOutputLen, help: "tokens generated per request"}
	keyN           = key{name: "n", min: 1, max: maxHistory, def: defaultHistory, field: kN, help: "entries to show"}
)

// registry is the language, in help order. Usage lines are generated from params,
// keys and flags by init, so they cannot drift from what Parse accepts.
var registry = []*Spec{
	{
		Path:    "mtp steps",
		Summary: "set the speculative (MTP) decoding steps of a service, redeploy it and benchmark it",
		Details: "Edits the unit's engine arguments (SGLang: steps, topk and draft tokens together; vLLM: " +
			"num_speculative_tokens), stops the service, clears GPU memory left by dead processes, starts it, " +
			"waits until it serves, verifies the engine reports the new value and benchmarks it. " +
			"A restart loop is recovered once; if it persists the previous unit is restored.",
		Role: Operator, Mutating: true, Lock: LockService, Schedulable: true,
		params:   []param{{kind: pSteps}, {kind: pService}},
		Examples: []string{"mtp steps 10", "mtp steps 4 qwen --dry-run"},
	},
	{
		Path:    "mtp tune",
		Summary: "find the steps value with the highest throughput at a load (or at each of several), with few restarts",
		Details: "Searches RANGE (a..b, default 1..16 within the steps limit) for the steps value with the highest " +
			"output tok/s at concurrency N (default: the configured concurrency): throughput over steps rises to one " +
			"peak and falls, so it narrows the range around the best value seen (a golden-section search) instead " +
			"of trying every value. Each value tried is one restart through the mtp steps pipeline and one benchmark. " +
			"It leaves the service on the best value and says in the thread which values it tried and why it stopped. " +
			"With per-load and at LIST (two concurrencies or more) it finds the best steps at each concurrency instead: " +
			"each value tried is started once and benchmarked at every concurrency, and it proposes the engine's own " +
			"per-load configuration (SGLang: the adaptive config file at the service's adaptive_config and the unit " +
			"flags that enable it; vLLM: num_speculative_tokens_per_batch_size in --speculative-config) with a table " +
			"per concurrency, the gain over the best single setting and the diffs; the service is left on the steps " +
			"it ran and nothing else is changed.",
		Role: Operator, Mutating: true, Lock: LockService, Schedulable: true,
		params:   []param{{kind: pService}, {kind: pPerLoad}, {kind: pRange}, {kind: pAt}},
		Examples: []string{"mtp tune", "mtp tune qwen 2..12 at 8", "mtp tune --dry-run", "mtp tune qwen per-load at 1,8,32,64"},
	},
	{
		Path:    "mtp per-load",
		Summary: "run a service's speculative decoding per load: the steps for each concurrency, as `mtp tune ... per-load` proposes",
		Details: "Deploys the engine's own per-load form of TABLE (concurrency:steps pairs; more steps after a slash are " +
			"candidates the engine may move between): for SGLang the adaptive config file at the service's adaptive_config " +
			"(written atomically next to the unit) and the unit flags --speculative-adaptive and " +
			"--speculative-adaptive-config, starting at the first concurrency's steps; for vLLM " +
			"num_speculative_tokens_per_batch_size inside --speculative-config. It runs the mtp steps pipeline, verifies " +
			"that the engine runs per load and benchmarks at each concurrency; when the new settings do not serve it puts " +
			"back both the unit and the file. `mtp undo` restores both.",
		Role: Operator, Mutating: true, Confirm: true, Lock: LockService,
		params:   []param{{kind: pService}, {kind: pLoadTable}},
		Examples: []string{"mtp per-load qwen 1:10 8:7 32:1 64:1", "mtp per-load 1:7 8:6 32:2 64:2/3 --dry-run"},
	},
	{
		Path:     "mtp show",
		Summary:  "show a service's speculative decoding settings (unit and running engine)",
		Role:     Viewer,
		params:   []param{{kind: pService}},
		Examples: []string{"mtp show", "mtp show qwen"},
	},
	{
		Path:    "mtp undo",
		Summary: "put back the unit text the service's last successful change replaced, redeploy it and benchmark it",
		Details: "Finds the last job that changed the service's unit and succeeded (mtp steps, mtp per-load, or an earlier " +
			"mtp undo), and deploys the text that job replaced through the same steps as mtp steps: preview, confirm, stop, clear " +
			"GPU memory, write, start, wait until it serves, verify, benchmark. A file the job wrote beside the unit (mtp " +
			"per-load's adaptive config) is put back with it, or removed when the job created it. Refused when there is " +
			"nothing to undo, or when the unit or that file changed since that job (by another job or by hand): undo only " +
			"what they still hold.",
		Role: Operator, Mutating: true, Confirm: true, Lock: LockService,
		params:   []param{{kind: pService}},
		Examples: []string{"mtp undo", "mtp undo qwen --dry-run"},
	},
	{
		Path:     "gpu status",
		Summary:  "show GPU memory and the processes holding it",
		Details:  "Without HOST: the only GPU host, or all of them when there are several.",
		Role:     Viewer,
		params:   []param{{kind: pHost}},
		Examples: []string{"gpu status", "gpu status gpu1"},
	},
	{
		Path:    "gpu recover",
		Summary: "stop a service, kill what holds its GPU memory, start it fresh",
		Details: "Stops the service (and its restart loop), SIGTERMs then SIGKILLs its own engine processes still " +
			"holding its GPUs (its unit's, or orphaned from it; never a neighbour's, which are named instead; from " +
			"the Proxmox node when the service runs in a container), waits until its GPUs are clear, then starts " +
			"the service and waits until it serves. HOST is resolved to the service on it.",
		Role: Operator, Mutating: true, Confirm: true, Lock: LockService, Schedulable: true,
		params:   []param{{kind: pTarget}},
		flags:    fNoStart | fForce,
		Examples: []string{"gpu recover", "gpu recover gpu1 --no-start", "gpu recover qwen --dry-run"},
	},
	{
		Path: "svc start", Summary: "start a service and wait until it serves",
		Role: Operator, Mutating: true, Lock: LockService, Schedulable: true,
		params: []param{{kind: pService}}, Examples: []string{"svc start", "svc start qwen"},
	},
	{
		Path: "svc stop", Summary: "stop a service (it stops serving)",
		Role: Operator, Mutating: true, Confirm: true, Lock: LockService, Schedulable: true,
		params: []param{{kind: pService}}, Examples: []string{"svc stop qwen", "svc stop --dry-run"},
	},
	{
		Path: "svc restart", Summary: "restart a service and wait until it serves",
		Role: Operator, Mutating: true, Lock: LockService, Schedulable: true,
		params: []param{{kind: pService}}, Examples: []string{"svc restart", "svc restart qwen"},
	},
	{
		Path: "svc status", Summary: "show a service's systemd state, restarts and readiness",
		Role: Viewer, params: []param{{kind: pService}}, Examples: []string{"svc status", "svc status qwen"},
	},
	{
		Path: "svc logs", Summary: "show the last journal lines of a service",
		Role: Viewer, params: []param{{kind: pService}}, keys: []key{keyLines},
		Examples: []string{"svc logs", "svc logs qwen lines=200"},
	},
	{
		Path:    "bench",
		Summary: "benchmark a service (tok/s, latency, acceptance)",
		Details: "Streams random prompts of a fixed length at the given concurrency, like sglang's bench_serving. " +
			"Unset knobs use the configured defaults. Locks the service: it never runs while the service is being changed.",
		Role: Operator, Mutating: true, Lock: LockService, Schedulable: true,
		params:   []param{{kind: pService}},
		keys:     []key{keyPrompts, keyConcurrency, keyIn, keyOut},
		Examples: []string{"bench", "bench qwen prompts=200 concurrency=16", "bench in=1024 out=256"},
	},
	{
		Path:    "sweep",
		Summary: "run mtp steps for each value in a list, benchmark each at each concurrency, report the best with a chart",
		Details: "LIST is values separated by commas and ranges: 1,2,3 or 1..5 or 1..5,10 (at most 32 values, " +
			"each a valid steps value, no value twice). SGLang's topk and draft token lists are crossed with the steps: " +
			"with topk 1 SGLang makes draft tokens steps+1, so draft LIST needs a topk above 1, and a draft count the " +
			"draft tree of a steps value cannot hold is skipped there. Each setting is one restart through the mtp steps pipeline " +
			"(stop, clear the GPUs, write, start, verify); it is then benchmarked at each concurrency of `at LIST` " +
			"(default: the configured concurrency) without another restart. A value that fails is reported and the " +
			"sweep goes on. The report has a table per concurrency, each point beside its previous result, the best " +
			"point by the configured sweep.metric, and a chart. Afterwards the service is left on its configured " +
			"value (or where it was), or on the best point with --apply-best.",
		Role: Operator, Mutating: true, Lock: LockService, Schedulable: true,
		params:   []param{{kind: pService}, {kind: pLiteral, word: "steps"}, {kind: pStepList}, {kind: pTopKList}, {kind: pDraftList}, {kind: pAtList}},
		flags:    fApplyBest,
		Examples: []string{"sweep steps 1..5,10", "sweep qwen steps 1,2,4,8 at 1,8,32 --apply-best", "sweep steps 2..4 topk 1,4 draft 8,16 --dry-run"},
	},
	{
		Path:    "schedule add",
		Summary: "run a job command on a cron schedule",
		Details: "CRON is a standard 5-field spec (minute hour day-of-month month day-of-week), a descriptor " +
			"(@hourly, @daily, @weekly, @monthly, @every 6h; @every at least 1m), optionally prefixed by " +
			"CRON_TZ=Zone/Name. COMMAND is mtp steps, mtp tune, gpu recover, svc start/stop/restart, bench or sweep. " +
			"A command that asks for confirmation (gpu recover, svc stop) asks once, here: the schedule then runs it without asking. " +
			"Put --dry-run before CRON to preview the schedule.",
		Role: Admin, Mutating: true, targets: true,
		params:   []param{{kind: pCron}, {kind: pSub}},
		Examples: []string{`schedule add "0 3 * * *" sweep qwen steps 1..5`, `schedule add "CRON_TZ=Europe/Berlin 30 6 * * 1-5" bench`, `schedule add @daily gpu recover --no-start`, `schedule add --to slack:C0OPS,matrix:!ops:example.org "0 3 * * *" bench`},
	},
	{
		Path: "schedule list", Summary: "list the schedules with their next runs (in each schedule's time zone)", Role: Viewer,
		Examples: []string{"schedule list"},
	},
	{
		Path: "schedule rm", Summary: "delete a schedule", Role: Admin, Mutating: true,
		params: []param{{kind: pScheduleID}}, Examples: []string{"schedule rm 3"},
	},
	{
		Path: "schedule pause", Summary: "pause a schedule", Role: Admin, Mutating: true,
		params: []param{{kind: pScheduleID}}, Examples: []string{"schedule pause 3"},
	},
	{
		Path: "schedule resume", Summary: "resume a paused schedule", Role: Admin, Mutating: true,
		params: []param{{kind: pScheduleID}}, Examples: []string{"schedule resume #3"},
	},
	{
		Path:    "watchdog silence",
		Summary: "keep the watchdog from alerting on a service for a while (maintenance)",
		Details: "For DURATION (30m, 2h, 1d; at most 7d) the watchdog neither opens an alert for the service nor reminds about one. " +
			"`watchdog silence SERVICE 1m` ends a silence early (a minute from now).",
		Role: Operator, Mutating: true,
		params:   []param{{kind: pService}, {kind: pDuration}},
		Examples: []string{"watchdog silence qwen 2h", "watchdog silence 30m"},
	},
	{
		Path:    "ack",
		Summary: "acknowledge a watchdog alert: it stops reminding, and says who took it",
		Details: "INCIDENT is the number the alert shows (`incident #7`). The alert keeps being edited as the service " +
			"recovers or not; only its reminders stop.",
		Role:     Operator,
		params:   []param{{kind: pIncidentID}},
		Examples: []string{"ack 7", "ack #7"},
	},
	{
		Path: "jobs", Summary: "list queued and running jobs (all: recent ones too)", Role: Viewer,
		params: []param{{kind: pAll}}, Examples: []string{"jobs", "jobs all"},
	},
	{
		Path: "job", Summary: "show one job in full: its steps with times, result, who asked and confirmed, the unit diff",
		Role: Viewer, params: []param{{kind: pJobID}}, Examples: []string{"job 42", "job #42"},
	},
	{
		Path: "cancel", Summary: "cancel a queued or running job", Role: Operator,
		Details: "Only the user who started the job, or an admin, may cancel it.",
		params:  []param{{kind: pJobID}}, Examples: []string{"cancel 42", "cancel #42"},
	},
	{
		Path: "history", Summary: "show a service's recent benchmark results", Role: Viewer,
		params: []param{{kind: pService}}, keys: []key{keyN},
		Examples: []string{"history", "history qwen n=20"},
	},
	{
		Path: "help", Summary: "list the commands, or explain one", Role: Viewer,
		params: []param{{kind: pTopic}}, Examples: []string{"help", "help mtp steps"},
	},
}

// groups are the distinct first words of the registry, in order; groupTable holds
// each group's specs and their subcommand words ("steps", "show"), built once.
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
		if s.Mutating {
			s.flags |= fDryRun
		}
		s.Usage = usageOf(s)
		g := s.Group()
		if len(groups) == 0 || groups[len(groups)-1] != g {
			groups = append(groups, g)
			groupTable = append(groupTable, groupEntry{name: g})
		}
		e := &groupTable[len(groupTable)-1]
		e.specs = append(e.specs, s)
		if s.Path != g {
			e.subs = append(e.subs, s.Path[len(g)+1:])
		}
	}
}

func usageOf(s *Spec) string {
	var b strings.Builder
	b.WriteString(s.Path)
	flagsFirst := len(s.params) > 0 && s.params[len(s.params)-1].kind == pSub
	writeFlags := func() {
		for _, f := range flagNames {
			if s.flags&f.f != 0 {
				b.WriteString(" [")
				b.WriteString(f.name)
				b.WriteString("]")
			}
		}
	}
	if flagsFirst {
		writeFlags()
	}
	if s.targets {
		b.WriteString(" [--to TARGETS]")
	}
	for _, p := range s.params {
		b.WriteByte(' ')
		b.WriteString(p.usage())
	}
	for _, k := range s.keys {
		b.WriteString(" [")
		b.WriteString(k.name)
		b.WriteString("=N]")
	}
	if !flagsFirst {
		writeFlags()
	}
	return b.String()
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
