// Package ops acts on GPU hosts: it composes the SSH pool (ops/remote), systemd
// (ops/systemd), unit editing (ops/unit), GPU memory and reaping (ops/gpu), the
// engine client (ops/engine) and the benchmark (ops/bench) into the pipelines a
// job runs: change speculative steps, recover GPUs, service actions, GPU status,
// logs and sweeps.
//
// Each service's handles (its host, its physical node, its unit, one engine
// client) are built once by New. A pipeline touches only what belongs to the
// service it names: its unit, its GPUs and its own processes, never a
// neighbour's on the same node; it holds the node (Config.NodeLocks) from the
// stop of the service until it serves again.
//
// Pipelines report progress as Events through a Reporter and return a typed
// Result whose JSON form is the "result" object of `opsbot run --json`. The
// pipelines that act on a service set Result.Left on every return, failures
// and cancels included: the state they left it in (serving, starting,
// stopped), which unit text is in place, and the command that helps next.
package ops

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/bench"
)

// StepStatus is the state of one pipeline step as reported in an Event.
type StepStatus string

// Step statuses, in the order a step normally goes through them.
const (
	StepStarted  StepStatus = "started"
	StepProgress StepStatus = "progress"
	StepDone     StepStatus = "done"
	StepFailed   StepStatus = "failed"
	StepSkipped  StepStatus = "skipped"
	StepWarning  StepStatus = "warning"
)

// Event is one line of a job's status thread: a step changed state or made progress.
type Event struct {
	At      time.Time  `json:"at"`
	Step    string     `json:"step"`
	Status  StepStatus `json:"status"`
	Message string     `json:"message"`
}

// Steps a stop must not cut: the unit write (with its daemon-reload: a unit
// is never half-deployed) and the start (systemctl start and the watch that
// follows it). A job asked to stop (a shutdown) waits until every critical
// step it began has ended.
const (
	StepWriteUnit = "write unit"
	StepStart     = "start"
)

// Critical reports whether a stop must wait for step to end: StepWriteUnit
// or StepStart, also as a sub-pipeline reports them under a prefix ending
// in ": " (a rollout's "qwen@gpu1: write unit").
func Critical(step string) bool {
	for _, c := range []string{StepWriteUnit, StepStart} {
		if step == c || strings.HasSuffix(step, ": "+c) {
			return true
		}
	}
	return false
}

// Reporter receives a pipeline's events. Report must be safe for concurrent use
// and must not block for long: the job engine persists and renders events.
type Reporter interface {
	Report(Event)
}

// ReporterFunc adapts a function to the Reporter interface.
type ReporterFunc func(Event)

// Report calls f(e).
func (f ReporterFunc) Report(e Event) { f(e) }

// Discard is a Reporter that drops every event.
var Discard Reporter = ReporterFunc(func(Event) {})

// Incident codes: what happened on the way, listed in Result.Incidents.
const (
	IncidentRestartLoop    = "restart_loop"
	IncidentGPUMemoryHeld  = "gpu_memory_held"
	IncidentRolledBack     = "rolled_back"
	IncidentStartFailed    = "start_failed"
	IncidentStuckProcess   = "stuck_process"
	IncidentConnectionLost = "connection_lost"
	IncidentNeedReload     = "daemon_reload_needed"
	IncidentSettingsDiffer = "settings_mismatch"
	IncidentBenchFailed    = "bench_failed"
	// IncidentRestoreFailed: a sweep or tune could not leave the service on
	// the setting it meant to (where it was, or the best point).
	IncidentRestoreFailed = "restore_failed"
)

// BenchResult is a benchmark's figures as ops/bench measures them; its JSON
// is the "bench" object of `opsbot run --json`.
type BenchResult = bench.Result

// UnitChange is the unit before and after an edit, as full texts and as argv.
type UnitChange struct {
	Path       string   `json:"path,omitempty"`
	Before     string   `json:"before"`
	After      string   `json:"after"`
	ArgvBefore []string `json:"argv_before"`
	ArgvAfter  []string `json:"argv_after"`
	Diff       string   `json:"diff,omitempty"`
	// Files are the files the change wrote beside the unit (SGLang's adaptive
	// config of a per-load change): written before the unit, restored after
	// it on a rollback, and put back by mtp undo with it.
	Files []FileChange `json:"files,omitempty"`
}

// Changed reports whether u altered anything: the unit's text, or a file
// beside it (written with other text, created or removed). A job whose
// result records a change that altered nothing is no change to undo.
func (u *UnitChange) Changed() bool {
	if u == nil {
		return false
	}
	if u.Before != u.After {
		return true
	}
	for _, f := range u.Files {
		if f.Before != f.After || f.Created || f.Removed {
			return true
		}
	}
	return false
}

// FileChange is one file a unit change wrote beside the unit.
type FileChange struct {
	Path    string `json:"path"`
	Before  string `json:"before"`
	After   string `json:"after"`
	Created bool   `json:"created,omitempty"` // it did not exist before: undone by removing it
	Removed bool   `json:"removed,omitempty"` // the change removes it (an undo of its creation)
	Diff    string `json:"diff,omitempty"`
}

// GPUMemory is one GPU's memory use before and after a pipeline.
type GPUMemory struct {
	Host          string `json:"host,omitempty"`
	Index         int    `json:"index"`
	UsedMiBBefore int    `json:"used_mib_before"`
	UsedMiBAfter  int    `json:"used_mib_after"`
	TotalMiB      int    `json:"total_mib,omitempty"`
}

// Killed is one signal sent to one process.
type Killed struct {
	PID     int    `json:"pid"`
	Host    string `json:"host"`
	Command string `json:"command"`
	Signal  string `json:"signal"`
}

// SweepPoint is one value of a sweep (or of mtp tune) at one concurrency and
// what the benchmark measured for it. A figure it did not measure is unknown
// (Measured): null in its JSON.
type SweepPoint struct {
	// Steps is the unit's steps: what ran, for a fixed setting; for a
	// per-load form (PerLoad set), the steps the unit starts the engine with,
	// not what ran at this load (PointPerLoad says that).
	Steps int `json:"steps"`
	// TopK and DraftTokens are SGLang's settings of the point (0: vLLM).
	TopK        int `json:"topk,omitempty"`
	DraftTokens int `json:"draft_tokens,omitempty"`
	// Concurrency is the load's concurrency the point was benchmarked at.
	Concurrency   int           `json:"concurrency,omitempty"`
	OK            bool          `json:"ok"`
	Error         string        `json:"error,omitempty"`
	OutputTokS    float64       `json:"output_tok_s,omitempty"`
	PerStreamTokS float64       `json:"per_stream_tok_s,omitempty"`
	AcceptLen     float64       `json:"accept_len,omitempty"`
	AcceptRate    float64       `json:"accept_rate,omitempty"`
	Bench         *bench.Result `json:"bench,omitempty"`
	// Spec is the setting the point ran with, as deployed and verified.
	Spec *Spec `json:"spec,omitempty"`
	// PerLoad says what ran at this point's load when the service ran a
	// per-load form (SGLang's adaptive config, vLLM's per-batch table); nil
	// for a fixed setting.
	PerLoad *PointPerLoad `json:"per_load,omitempty"`
}

// PointPerLoad is what a per-load form ran at one load.
type PointPerLoad struct {
	// Among are the steps the form offers at this load: SGLang's
	// candidate_steps of the slot for this concurrency, among which the
	// engine chooses; vLLM's k for this batch size (one value).
	Among []int `json:"among"`
	// Chosen are the steps the engine reported running while the benchmark
	// ran (SGLang: /server_info internal_states[0].speculative_num_steps,
	// sampled), most seen first; empty when the engine did not say.
	Chosen []bench.StepsSeen `json:"chosen,omitempty"`
}

// Ran says what ran at p's load, as the tables name it: "steps 3" for a
// fixed setting; for a per-load form, the steps the engine reported
// choosing ("steps 1, chosen by the engine", with the others it was seen
// running), else "chosen by the engine among 9/10/11".
func (p SweepPoint) Ran() string {
	pl := p.PerLoad
	if pl == nil {
		return fmt.Sprintf("steps %d", p.Steps)
	}
	if len(pl.Chosen) > 0 {
		s := fmt.Sprintf("steps %d, chosen by the engine", pl.Chosen[0].Steps)
		if len(pl.Chosen) > 1 {
			total, others := 0, make([]string, 0, len(pl.Chosen)-1)
			for _, c := range pl.Chosen {
				total += c.Samples
			}
			for _, c := range pl.Chosen[1:] {
				others = append(others, fmt.Sprintf("%d in %d", c.Steps, c.Samples))
			}
			s += fmt.Sprintf(" (%d of %d samples; %s)", pl.Chosen[0].Samples, total, strings.Join(others, ", "))
		}
		return s
	}
	among := slices.Clone(pl.Among)
	slices.Sort(among)
	switch len(among) {
	case 0:
		return "chosen by the engine per load"
	case 1:
		return fmt.Sprintf("steps %d, the only candidate here", among[0])
	}
	words := make([]string, len(among))
	for i, n := range among {
		words[i] = fmt.Sprint(n)
	}
	return "chosen by the engine among " + strings.Join(words, "/")
}

// ServiceState is the systemd view of a service, for svc status and mtp show.
type ServiceState struct {
	Service     string `json:"service"`
	Unit        string `json:"unit"`
	Host        string `json:"host"`
	ActiveState string `json:"active_state"`
	SubState    string `json:"sub_state"`
	NRestarts   int    `json:"n_restarts"`
	MainPID     int    `json:"main_pid"`
	Ready       string `json:"ready,omitempty"`
}

// Spec is the speculative-decoding setting of a service, from its unit and,
// when it serves, from the engine.
type Spec struct {
	Engine      string `json:"engine"`
	Algorithm   string `json:"algorithm,omitempty"`
	Steps       int    `json:"steps"`
	TopK        int    `json:"topk,omitempty"`
	DraftTokens int    `json:"draft_tokens,omitempty"`
	// Live* are what the running engine reports (/server_info); zero when unknown.
	LiveSteps       int `json:"live_steps,omitempty"`
	LiveTopK        int `json:"live_topk,omitempty"`
	LiveDraftTokens int `json:"live_draft_tokens,omitempty"`
	// Adaptive is SGLang's per-load speculation as the unit runs it: the
	// --speculative-adaptive-config path, AdaptiveDefaultTable without one, ""
	// when off. BatchTable is vLLM's num_speculative_tokens_per_batch_size as
	// the unit writes it ("" = none). Steps is then the starting (SGLang) or
	// largest (vLLM) value, not what runs at every load.
	Adaptive   string `json:"adaptive,omitempty"`
	BatchTable string `json:"batch_table,omitempty"`
	// AdaptiveTable identifies the contents of the adaptive config file the
	// engine was started with (AdaptiveTableID; "" when not read): two
	// different tables written to one path are two forms, the same table at
	// two paths one.
	AdaptiveTable string `json:"adaptive_table,omitempty"`
	// SkipZeroDraftExtend is SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND
	// as the unit sets it (with Adaptive: step 0 skips the draft extend).
	SkipZeroDraftExtend bool `json:"skip_zero_draft_extend,omitempty"`
}

// AdaptiveTableID identifies an adaptive config file by its contents:
// "sha256:" and the first 16 hex digits of the SHA-256 of its canonical JSON
// (parsed and written back compact, object keys sorted, so spacing and key
// order do not count), or of its bytes when it is not JSON.
func AdaptiveTableID(text string) string {
	b := []byte(text)
	var v any
	if err := json.Unmarshal(b, &v); err == nil {
		if c, err := json.Marshal(v); err == nil {
			b = c
		}
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// AdaptiveDefaultTable stands for SGLang's built-in adaptive table in
// Spec.Adaptive (--speculative-adaptive without a config file).
const AdaptiveDefaultTable = "default"

// Result is what a pipeline returns. Every field is optional; the JSON names are
// the contract of `opsbot run --json`.
type Result struct {
	// Summary is one line for the job's status message ("steps 3 -> 10, 281 tok/s").
	Summary string      `json:"summary,omitempty"`
	Unit    *UnitChange `json:"unit,omitempty"`
	GPUs    []GPUMemory `json:"gpus,omitempty"`
	Killed  []Killed    `json:"killed,omitempty"`
	// Fleet is what `fleet` saw of the services on their hosts.
	Fleet *FleetState `json:"fleet,omitempty"`
	// Bench is the benchmark's result without its per-request rows.
	Bench  *bench.Result `json:"bench,omitempty"`
	Points []SweepPoint  `json:"points,omitempty"`
	Best   *SweepPoint   `json:"best,omitempty"`
	// Metric is the figure Best was chosen by (sweeps: output_tok_s,
	// per_stream_tok_s or accept_len).
	Metric string `json:"metric,omitempty"`
	// PerLoad is a per-load tune's proposal.
	PerLoad *PerLoad `json:"per_load,omitempty"`
	// Tried are the steps values mtp tune benchmarked, in order.
	Tried []int `json:"tried,omitempty"`
	// Restarts counts the starts a sweep or tune issued: one per value
	// deployed, and a start that failed counts with its rollback's (two).
	Restarts int           `json:"restarts,omitempty"`
	Service  *ServiceState `json:"service,omitempty"`
	Spec     *Spec         `json:"spec,omitempty"`
	// Flag is the engine flag `engine set` changed; Flags are those
	// `engine show` read.
	Flag      *FlagSetting  `json:"flag,omitempty"`
	Flags     []FlagSetting `json:"flags,omitempty"`
	Logs      []string      `json:"logs,omitempty"`
	Incidents []string      `json:"incidents"`
	// Health is `gpu health`'s per-GPU health and verdicts.
	Health []GPUHealth `json:"health,omitempty"`
	// Details are extra lines for the final result block (tables, previews).
	Details []string `json:"details,omitempty"`
	// Chart is an optional PNG image for the result (sweeps).
	Chart []byte `json:"-"`
	// Replicas are each replica's result when a read-only command named a
	// replicated service itself (`svc status qwen`), in the order it read
	// them; the fields above then sum them up.
	Replicas []*Result `json:"replicas,omitempty"`
	// Left is the state the job left its service in, set on every return of
	// the pipelines that act on a service (mtp steps, sweep, gpu recover,
	// svc start|stop|restart), failures, cancels and timeouts included.
	Left *ServiceLeft `json:"left,omitempty"`
	// Rollout is a rollout's record (a change of a replicated service):
	// its plan, its gate, and what it did to each replica.
	Rollout *RolloutResult `json:"rollout,omitempty"`

	// did is what the pipeline has done to the service so far.
	did did
}

// AddIncident records code once.
func (r *Result) AddIncident(code string) {
	for _, c := range r.Incidents {
		if c == code {
			return
		}
	}
	r.Incidents = append(r.Incidents, code)
}

// HasIncident reports whether code was recorded.
func (r *Result) HasIncident(code string) bool {
	for _, c := range r.Incidents {
		if c == code {
			return true
		}
	}
	return false
}
