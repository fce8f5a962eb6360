package report

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// FleetTextBudget is the most characters `fleet`'s message takes: four
// Slack sections of 3000 (of the 50 blocks a message may hold), and well
// under a Matrix event's 65536 bytes with its HTML body beside the text.
// Rows that do not fit are counted in a last line, the rows needing
// attention kept first.
const FleetTextBudget = 12000

// FleetStore is what the store knows of the fleet's services: the newest
// benchmark result row of each (store.BenchHistory), the open incidents
// (store.OpenIncidents: the watchdog's, per service and per GPU) and the
// queued and running jobs (store.ListJobs Active).
type FleetStore struct {
	Latest    map[string]store.BenchResult
	Incidents []store.Incident
	Jobs      []store.Job
}

// Fleet is `fleet`'s answer as data: its JSON is the "fleet" object of
// `opsbot run --json fleet`. Every figure not known is null.
type Fleet struct {
	At time.Time `json:"at"`
	// Took is how long the hosts' round took, all hosts at once.
	TookMS float64 `json:"took_ms"`
	// Services are the rows, those needing attention first, a replicated
	// service's replicas together.
	Services []FleetRow `json:"services"`
	Hosts    FleetHosts `json:"hosts"`
	// OtherIncidents are open incidents on no row shown (a GPU no shown
	// service uses, a service no longer configured).
	OtherIncidents []FleetIncident `json:"other_incidents"`
}

// FleetHosts says how many hosts were asked and which did not answer.
type FleetHosts struct {
	Asked    int              `json:"asked"`
	Answered int              `json:"answered"`
	Failed   []FleetHostError `json:"failed"`
}

// FleetHostError is a host that did not answer, and why.
type FleetHostError struct {
	Host  string `json:"host"`
	Error string `json:"error"`
}

// FleetRow is one service (or replica).
type FleetRow struct {
	Service string  `json:"service"`
	Group   *string `json:"group"`   // the replicated service it is a replica of; null: none
	Replica *string `json:"replica"` // its replica name; null: none
	Host    string  `json:"host"`
	Unit    string  `json:"unit"`
	// Attention says why the row needs a person, worst first; empty when
	// it needs none.
	Attention []string `json:"attention"`
	// Error says why its host told nothing of it; state, speculative and
	// gpus are then null.
	Error *string        `json:"error"`
	State *FleetRowState `json:"state"`
	// Speculative is the setting its unit starts the engine with; null
	// when unknown (SpecError says why).
	Speculative *FleetSpec `json:"speculative"`
	SpecError   *string    `json:"spec_error"`
	// Last is its newest benchmark result row in the store; null: none.
	Last *FleetLast `json:"last"`
	// GPUs are its GPUs' memory; null when unknown (GPUError says why).
	GPUs     []FleetGPU `json:"gpus"`
	GPUError *string    `json:"gpu_error"`
	// NRestarts is systemd's count of its automatic restarts since it was
	// last started by hand or by a job (not a count per day); null when
	// unknown.
	NRestarts *int            `json:"n_restarts"`
	Incidents []FleetIncident `json:"incidents"`
	// Job is the job queued or running on it (the newest); null: none.
	Job *FleetJob `json:"job"`

	rank int // the worst attention's rank (rankWell when none)
}

// FleetRowState is a unit's state.
type FleetRowState struct {
	ActiveState      string     `json:"active_state"`
	SubState         string     `json:"sub_state"`
	LoadState        string     `json:"load_state"`
	RestartLoop      bool       `json:"restart_loop"`
	NeedDaemonReload bool       `json:"need_daemon_reload"`
	Since            *time.Time `json:"since"` // when it last became active; null: never or unknown
}

// FleetSpec is a speculative setting: Mode "steps" (Steps set), "per-load"
// (SGLang's adaptive config or vLLM's per-batch table; Steps is the
// starting or largest value) or "off" (Steps null).
type FleetSpec struct {
	Mode  string `json:"mode"`
	Steps *int   `json:"steps"`
	Text  string `json:"text"` // as the table shows it: "steps 3", "per-load", "off"
}

// FleetLast is a service's newest benchmark result row.
type FleetLast struct {
	OutputTokS *float64  `json:"output_tok_s"`
	AcceptLen  *float64  `json:"accept_len"`
	At         time.Time `json:"at"`
	AgeS       float64   `json:"age_s"`
	JobID      *int64    `json:"job_id"`
	Settings   string    `json:"settings"`
}

// FleetGPU is one GPU's memory; null where nvidia-smi did not say.
type FleetGPU struct {
	Index    int    `json:"index"`
	UsedMiB  *int   `json:"used_mib"`
	TotalMiB *int   `json:"total_mib"`
	UUID     string `json:"uuid,omitempty"`
}

// FleetIncident is one open incident of the watchdog.
type FleetIncident struct {
	ID       int64     `json:"id"`
	Key      string    `json:"key"` // its service, or its GPU ("gpu:NODE:UUID")
	Kind     string    `json:"kind"`
	OpenedAt time.Time `json:"opened_at"`
	Acked    bool      `json:"acked"`
}

// FleetJob is a job queued or running on a service.
type FleetJob struct {
	ID      int64  `json:"id"`
	Command string `json:"command"`
	Status  string `json:"status"`
}

// Attention ranks, worst first.
const (
	rankNoAnswer = iota
	rankLoop
	rankFailed
	rankStopped
	rankIncident
	rankStarting
	rankReload
	rankUnknown
	rankWell
)

// NewFleet joins what the hosts said (st) with what the store knows (in),
// at now, into the rows `fleet` shows: those needing attention first (no
// answer, a restart loop, failed, stopped, an open incident, starting, a
// unit changed on disk, a figure its host did not give), a replicated
// service's replicas kept together under their worst.
func NewFleet(st *ops.FleetState, in FleetStore, took time.Duration, now time.Time) *Fleet {
	f := &Fleet{At: now.UTC(), TookMS: float64(took.Microseconds()) / 1000, Services: []FleetRow{}, OtherIncidents: []FleetIncident{},
		Hosts: FleetHosts{Asked: len(st.Hosts), Failed: []FleetHostError{}}}
	for _, h := range st.Hosts {
		if h.Error == "" {
			f.Hosts.Answered++
		} else {
			f.Hosts.Failed = append(f.Hosts.Failed, FleetHostError{Host: h.Name, Error: h.Error})
		}
	}
	jobOf := map[string]store.Job{}
	for _, j := range in.Jobs { // newest first
		if _, ok := jobOf[j.Service]; !ok && j.Service != "" {
			jobOf[j.Service] = j
		}
	}
	placed := map[int64]bool{}
	for _, s := range st.Services {
		r := fleetRow(s, in, jobOf, now, placed)
		f.Services = append(f.Services, r)
	}
	for _, in := range in.Incidents {
		if !placed[in.ID] {
			f.OtherIncidents = append(f.OtherIncidents, fleetIncident(in))
		}
	}
	sortFleet(f.Services)
	return f
}

func fleetIncident(in store.Incident) FleetIncident {
	return FleetIncident{ID: in.ID, Key: in.Service, Kind: in.Kind, OpenedAt: in.OpenedAt.UTC(), Acked: in.AckedBy != ""}
}

func fleetRow(s ops.FleetService, in FleetStore, jobOf map[string]store.Job, now time.Time, placed map[int64]bool) FleetRow {
	r := FleetRow{Service: s.Name, Host: s.Host, Unit: s.Unit, Attention: []string{}, Incidents: []FleetIncident{}, rank: rankWell}
	if s.Group != "" {
		r.Group, r.Replica = ptrTo(s.Group), ptrTo(s.Replica)
	}
	need := func(rank int, why string) {
		r.Attention = append(r.Attention, why)
		r.rank = min(r.rank, rank)
	}
	if s.Error != "" {
		r.Error = ptrTo(s.Error)
		need(rankNoAnswer, "no answer from "+s.Host)
	}
	if u := s.State; u != nil {
		r.State = &FleetRowState{ActiveState: u.ActiveState, SubState: u.SubState, LoadState: u.LoadState, RestartLoop: u.RestartLoop,
			NeedDaemonReload: u.NeedDaemonReload}
		if !u.Since.IsZero() {
			t := u.Since.UTC()
			r.State.Since = &t
		}
		r.NRestarts = ptrTo(u.NRestarts)
		switch {
		case u.RestartLoop:
			need(rankLoop, fmt.Sprintf("restart loop (NRestarts %d)", u.NRestarts))
		case u.LoadState == "not-found":
			need(rankFailed, "unit not found")
		case u.ActiveState == "failed":
			need(rankFailed, "failed ("+u.Result+")")
		case u.ActiveState == "inactive":
			need(rankStopped, "stopped")
		case u.ActiveState != "active":
			need(rankStarting, u.ActiveState)
		}
		if u.NeedDaemonReload {
			need(rankReload, "unit changed on disk, not reloaded")
		}
	}
	if s.Spec != nil {
		r.Speculative = fleetSpec(s.Spec)
	} else if s.SpecError != "" {
		r.SpecError = ptrTo(s.SpecError)
		need(rankUnknown, "setting unreadable")
	}
	if s.GPUs != nil {
		r.GPUs = make([]FleetGPU, len(s.GPUs))
		for i, g := range s.GPUs {
			r.GPUs[i] = FleetGPU{Index: g.Index, UsedMiB: g.UsedMiB, TotalMiB: g.TotalMiB, UUID: g.UUID}
		}
	} else if s.GPUError != "" {
		r.GPUError = ptrTo(s.GPUError)
		need(rankUnknown, "GPUs unreadable")
	}
	if b, ok := in.Latest[s.Name]; ok {
		l := &FleetLast{At: b.At.UTC(), AgeS: math.Round(now.Sub(b.At).Seconds()), Settings: b.Settings}
		if ops.Known(b.OutputTokS) {
			l.OutputTokS = ptrTo(b.OutputTokS)
		}
		if ops.KnownAcceptLen(b.AcceptLen) {
			l.AcceptLen = ptrTo(b.AcceptLen)
		}
		if b.JobID != 0 {
			l.JobID = ptrTo(b.JobID)
		}
		r.Last = l
	}
	for _, inc := range in.Incidents {
		if inc.Service == s.Name || onGPUOf(inc.Service, s) {
			r.Incidents = append(r.Incidents, fleetIncident(inc))
			placed[inc.ID] = true
			need(rankIncident, fmt.Sprintf("incident #%d %s", inc.ID, inc.Kind))
		}
	}
	if j, ok := jobOf[s.Name]; ok {
		r.Job = &FleetJob{ID: j.ID, Command: j.Command, Status: string(j.Status)}
	}
	return r
}

// onGPUOf reports whether incident key is a GPU's (gpu:NODE:UUID, the
// watchdog's hardware incidents) that s uses.
func onGPUOf(key string, s ops.FleetService) bool {
	rest, ok := strings.CutPrefix(key, "gpu:")
	if !ok {
		return false
	}
	_, uuid, ok := strings.Cut(rest, ":")
	if !ok || uuid == "" {
		return false
	}
	for _, g := range s.GPUs {
		if g.UUID == uuid {
			return true
		}
	}
	return false
}

func fleetSpec(s *ops.Spec) *FleetSpec {
	switch {
	case s.Adaptive != "" || s.BatchTable != "":
		return &FleetSpec{Mode: "per-load", Steps: ptrTo(s.Steps), Text: "per-load"}
	case s.Steps == 0:
		return &FleetSpec{Mode: "off", Text: "off"}
	}
	return &FleetSpec{Mode: "steps", Steps: ptrTo(s.Steps), Text: "steps " + strconv.Itoa(s.Steps)}
}

// sortFleet puts the rows needing attention first, a group's replicas
// together under their worst row, then by name.
func sortFleet(rows []FleetRow) {
	key := func(r FleetRow) string {
		if r.Group != nil {
			return *r.Group
		}
		return r.Service
	}
	worst := map[string]int{}
	for _, r := range rows {
		k := key(r)
		if w, ok := worst[k]; !ok || r.rank < w {
			worst[k] = r.rank
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		ka, kb := key(a), key(b)
		if worst[ka] != worst[kb] {
			return worst[ka] < worst[kb]
		}
		if ka != kb {
			return ka < kb
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.Service < b.Service
	})
}

// NeedAttention is how many rows need a person.
func (f *Fleet) NeedAttention() int {
	n := 0
	for _, r := range f.Services {
		if len(r.Attention) > 0 {
			n++
		}
	}
	return n
}

// Text renders f for chat within FleetTextBudget: a headline, a table of
// the rows (those needing attention first; well rows that do not fit are
// counted), the hosts that did not answer, the incidents on no row, and
// the one command that helps next.
func (f *Fleet) Text() string { return f.text(FleetTextBudget) }

func (f *Fleet) text(budget int) string {
	var head strings.Builder
	need := f.NeedAttention()
	fmt.Fprintf(&head, "fleet: %d services on %d hosts", len(f.Services), f.Hosts.Asked)
	switch need {
	case 0:
		head.WriteString(" · all well")
	default:
		fmt.Fprintf(&head, " · %d need attention", need)
	}
	if n := len(f.Hosts.Failed); n > 0 {
		fmt.Fprintf(&head, " · %d hosts did not answer", n)
	}
	took := time.Duration(f.TookMS * float64(time.Millisecond))
	if took >= 100*time.Millisecond {
		took = took.Round(10 * time.Millisecond)
	} else {
		took = took.Round(time.Millisecond)
	}
	fmt.Fprintf(&head, " · read in %s at %s\n", took, f.At.Format("15:04:05 UTC"))

	var tail strings.Builder
	for _, h := range f.Hosts.Failed {
		fmt.Fprintf(&tail, "%s did not answer: %s\n", h.Host, h.Error)
	}
	for _, in := range f.OtherIncidents {
		fmt.Fprintf(&tail, "open incident #%d %s on %s since %s\n", in.ID, in.Kind, in.Key, Stamp(in.OpenedAt))
	}
	fmt.Fprintf(&tail, "%s: unknown (its host did not say, or nothing measured yet). RST: systemd's NRestarts, automatic restarts since its last start.\n", ops.Dash)
	if next := f.next(); next != "" {
		tail.WriteString(next + "\n")
	}

	header := fmt.Sprintf("%-24s %-10s %-22s %-10s %8s %6s %5s %-16s %4s %-18s %s\n",
		"SERVICE", "HOST", "STATE", "SETTING", "TOK/S", "ACCEPT", "AGE", "GPU GiB USED", "RST", "INCIDENTS", "JOB")
	left := budget - head.Len() - tail.Len() - len(header) - 2*len(fence) - 80
	var rows strings.Builder
	shown, wellLeft, full := 0, 0, false
	for _, r := range f.Services {
		line := fleetLine(r, f.At)
		if full = full || rows.Len()+len(line) > left; full {
			if len(r.Attention) == 0 {
				wellLeft++
			}
			continue
		}
		rows.WriteString(line)
		shown++
	}
	var b strings.Builder
	b.WriteString(head.String())
	b.WriteString(Pre(header + rows.String()))
	b.WriteString("\n")
	if notShown := len(f.Services) - shown; notShown > 0 {
		fmt.Fprintf(&b, "… %d more rows not shown (%d of them well): `fleet SERVICE` shows one service or group; `opsbot run --json fleet` lists every row\n",
			notShown, wellLeft)
	}
	b.WriteString(tail.String())
	return strings.TrimRight(b.String(), "\n")
}

// fleetLine is one row of the table.
func fleetLine(r FleetRow, now time.Time) string {
	state := ops.Dash
	switch {
	case r.Error != nil:
		state = "no answer"
	case r.State != nil:
		state = r.State.ActiveState + "/" + r.State.SubState
		if r.State.RestartLoop {
			state = "LOOP " + state
		}
	}
	setting := ops.Dash
	if r.Speculative != nil {
		setting = r.Speculative.Text
	}
	tok, acc, age := ops.Dash, ops.Dash, ops.Dash
	if r.Last != nil {
		if r.Last.OutputTokS != nil {
			tok = fmt.Sprintf("%.1f", *r.Last.OutputTokS)
		}
		if r.Last.AcceptLen != nil {
			acc = fmt.Sprintf("%.2f", *r.Last.AcceptLen)
		}
		age = shortAge(now.Sub(r.Last.At))
	}
	gpus := ops.Dash
	if r.GPUs != nil {
		parts := make([]string, len(r.GPUs))
		for i, g := range r.GPUs {
			parts[i] = ops.Dash
			if g.UsedMiB != nil {
				parts[i] = fmt.Sprintf("%.1f", float64(*g.UsedMiB)/1024)
			}
		}
		gpus = strings.Join(parts, " ")
		if gpus == "" {
			gpus = "no GPU"
		}
	}
	rst := ops.Dash
	if r.NRestarts != nil {
		rst = strconv.Itoa(*r.NRestarts)
	}
	inc := ops.Dash
	if len(r.Incidents) > 0 {
		ids := make([]string, len(r.Incidents))
		for i, in := range r.Incidents {
			ids[i] = fmt.Sprintf("#%d %s", in.ID, in.Kind)
		}
		inc = strings.Join(ids, ", ")
	}
	job := ops.Dash
	if r.Job != nil {
		job = fmt.Sprintf("#%d %s %s", r.Job.ID, r.Job.Status, r.Job.Command)
	}
	return fmt.Sprintf("%-24s %-10s %-22s %-10s %8s %6s %5s %-16s %4s %-18s %s\n",
		r.Service, r.Host, state, setting, tok, acc, age, gpus, rst, inc, job)
}

// shortAge writes d as its largest unit: 45s, 12m, 5h, 3d.
func shortAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// next is the one command that helps the first row needing attention.
func (f *Fleet) next() string {
	for _, r := range f.Services {
		if len(r.Attention) == 0 {
			continue
		}
		switch {
		case r.Error != nil:
			return fmt.Sprintf("next: %s did not answer; `svc status %s` tries it again with a job's patience", r.Host, r.Service)
		case r.State != nil && r.State.RestartLoop:
			return fmt.Sprintf("next: `svc logs %s` says why %s loops; `gpu recover %s` stops it, clears its GPUs and starts it fresh", r.Service, r.Service, r.Service)
		case r.State != nil && (r.State.ActiveState == "failed" || r.State.ActiveState == "inactive"):
			return fmt.Sprintf("next: `svc logs %s` says why it stopped; `svc start %s` starts it", r.Service, r.Service)
		case len(r.Incidents) > 0:
			return fmt.Sprintf("next: incident #%d: `svc status %s`; `ack %d` stops its reminders", r.Incidents[0].ID, r.Service, r.Incidents[0].ID)
		}
		return fmt.Sprintf("next: `svc status %s`", r.Service)
	}
	return ""
}

func ptrTo[T any](v T) *T { return &v }
