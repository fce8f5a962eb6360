package watchdog

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// IncidentHardware is the kind of a GPU's hardware incident. Its store key
// (Incident.Service) is bot.HardwareKey(node, GPU UUID), so a GPU has at
// most one open hardware incident, beside its services' own.
const IncidentHardware = "hardware"

// hwSettings are watchdog.hardware in the config in effect.
type hwSettings struct {
	on    bool
	xids  []int
	pcie  bool
	nodes []string            // the nodes that own the services' GPUs, sorted
	svcs  map[string][]string // node -> services on it
}

func (w *Watchdog) hwSettings() hwSettings {
	cfg := w.app.CurrentConfig()
	h := cfg.Watchdog.Hardware
	s := hwSettings{on: h.On(), xids: h.XIDs, pcie: h.PagesOnLink(), svcs: map[string][]string{}}
	if len(s.xids) == 0 {
		s.xids = gpu.DefaultPagingXIDs
	}
	for _, in := range cfg.Instances() {
		node := in.Node()
		if s.svcs[node] == nil {
			s.nodes = append(s.nodes, node)
		}
		s.svcs[node] = append(s.svcs[node], in.Name)
	}
	sort.Strings(s.nodes)
	return s
}

// hwBaseline is what the watchdog saw of a GPU at its last pass, kept in
// the store so that a new holder of the lease alerts on news only.
type hwBaseline struct {
	XIDAt int64 `json:"xid_at"` // the newest Xid event seen (unix ns)
	ECC   int   `json:"ecc"`    // uncorrected volatile ECC errors seen
}

// hardwarePass reads every node's GPU health (`gpu health NODE`) and opens,
// edits, reminds or closes one hardware incident per GPU: it opens on a new
// paging XID (watchdog.hardware.xids), a new uncorrected ECC error, a
// pending row remap or (watchdog.hardware.pcie) a PCIe link below its
// maximum, and closes once the GPU's verdict is healthy or degraded with
// none of those left. A node that cannot be read is only logged: its
// services' own incidents say so.
func (w *Watchdog) hardwarePass(ctx context.Context, now time.Time, set watchSettings, hw hwSettings, silenced map[string]store.SilenceInfo,
	openOf map[string]store.Incident, rep *PassReport) {
	// Every GPU's baseline in one read; should it fail, hwNews reads each.
	bases, err := w.app.Store.SyncTokens(ctx, hwBaselinePrefix)
	if err != nil {
		w.log.Warn("watchdog: read the GPU baselines", "err", err)
		bases = nil
	}
	for _, node := range hw.nodes {
		res, err := w.backend().Run(ctx, ops.JobHold{}, &commands.GPUHealth{On: commands.On{Host: node}}, ops.Discard)
		if err != nil || res == nil {
			w.log.Warn("watchdog: read GPU health", "node", node, "err", err)
			continue
		}
		for _, g := range res.Health {
			key := bot.HardwareKey(g.Node, g.GPU.UUID, g.GPU.Index)
			why := w.hwNews(ctx, key, g, hw, now, bases)
			in, isOpen := openOf[key]
			switch {
			case isOpen && len(why) == 0 && !hwStillBad(g, hw):
				if w.close(ctx, in, fmt.Sprintf("GPU %d of %s: %s", g.GPU.Index, g.Node, g.Verdict), now) {
					rep.Closed = append(rep.Closed, in.ID)
				}
			case isOpen:
				w.hwEvolve(ctx, in, g, why, now, allSilenced(g.Services, silenced, now), set.remind)
			case len(why) == 0:
			case allSilenced(g.Services, silenced, now):
				w.log.Info("watchdog: a silenced service's GPU is failing", "node", g.Node, "gpu", g.GPU.Index, "why", why)
			default:
				if id := w.hwOpen(ctx, key, g, why, now, set); id != 0 {
					rep.Opened = append(rep.Opened, id)
				}
			}
		}
	}
}

// hwBaselinePrefix starts the store key of every GPU's baseline.
const hwBaselinePrefix = "watchdog.hardware."

// hwNews says what is new about g since the baseline in the store, and
// moves the baseline on. bases are the baselines the pass read at its start
// (SyncTokens); nil: read g's from the store.
func (w *Watchdog) hwNews(ctx context.Context, key string, g ops.GPUHealth, hw hwSettings, now time.Time, bases map[string]string) []string {
	bkey := hwBaselinePrefix + key
	var base hwBaseline
	v, ok := bases[bkey]
	if bases == nil {
		var err error
		if v, err = w.app.Store.SyncToken(ctx, bkey); err == nil {
			ok = true
		}
	}
	if ok && v != "" {
		_ = json.Unmarshal([]byte(v), &base)
	}
	var why []string
	next := base
	for _, e := range g.GPU.XIDs {
		at := e.At.UnixNano()
		if e.At.IsZero() || at <= base.XIDAt {
			continue
		}
		next.XIDAt = max(next.XIDAt, at)
		if slices.Contains(hw.xids, e.XID) {
			info, _ := gpu.XIDTable(e.XID)
			why = append(why, fmt.Sprintf("new Xid %d (%s) at %s", e.XID, info.Name, report.Stamp(e.At)))
		}
	}
	if u := g.GPU.ECC.UncorrectedVolatile; u != nil {
		if *u > base.ECC {
			why = append(why, fmt.Sprintf("%d new uncorrected ECC errors (%d since the driver loaded)", *u-base.ECC, *u))
		}
		next.ECC = *u
	}
	if p := g.GPU.Remap.Pending; p != nil && *p {
		why = append(why, "a row remap is pending (a GPU reset applies it)")
	}
	if hw.pcie && linkDegraded(g) {
		why = append(why, fmt.Sprintf("PCIe link x%d of x%d", *g.GPU.PCIe.Width, *g.GPU.PCIe.WidthMax))
	}
	if next != base {
		b, _ := json.Marshal(next)
		if err := w.app.Store.SetSyncToken(ctx, bkey, string(b)); err != nil {
			w.log.Warn("watchdog: store the GPU baseline", "gpu", key, "err", err)
		}
	}
	return why
}

func linkDegraded(g ops.GPUHealth) bool {
	l := g.GPU.PCIe
	return l.Width != nil && l.WidthMax != nil && *l.Width < *l.WidthMax
}

// hwStillBad reports whether an open hardware incident must stay open.
func hwStillBad(g ops.GPUHealth, hw hwSettings) bool {
	if g.Verdict > gpu.Degraded {
		return true
	}
	if p := g.GPU.Remap.Pending; p != nil && *p {
		return true
	}
	return hw.pcie && linkDegraded(g)
}

// allSilenced reports whether every service on a GPU is silenced: only then
// is its hardware quiet (a GPU no service uses is never silenced).
func allSilenced(svcs []string, silenced map[string]store.SilenceInfo, now time.Time) bool {
	if len(svcs) == 0 {
		return false
	}
	for _, s := range svcs {
		if !silenced[s].Until.After(now) {
			return false
		}
	}
	return true
}

// hwBody is a hardware alert's text: the GPU, the services on it, the
// verdict and why, what it means, the action that helps next.
func hwBody(g ops.GPUHealth, why []string, now time.Time) string {
	svcs := "no configured service"
	if len(g.Services) > 0 {
		svcs = strings.Join(g.Services, ", ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GPU %d of %s (%s; serving %s): %s: %s (seen %s)\n", g.GPU.Index, g.Node, g.GPU.UUID, svcs, g.Verdict,
		strings.Join(why, "; "), report.Stamp(now))
	if len(g.Findings) > 0 {
		fmt.Fprintf(&b, "what it means: %s\n", g.Findings[0].What)
	}
	fmt.Fprintf(&b, "now: %s is %s\nnext: %s; `gpu health %s` shows every fact", svcs, verdictWords(g.Verdict), g.Next, g.Node)
	return b.String()
}

func verdictWords(v gpu.Verdict) string {
	switch v {
	case gpu.Healthy, gpu.Degraded:
		return "on a GPU that still works"
	case gpu.ResetNeeded:
		return "on a GPU that needs a reset"
	case gpu.RebootNeeded:
		return "on a GPU that needs its machine rebooted"
	}
	return "on a GPU to replace"
}

// hwOpen opens a GPU's hardware incident and posts its alert.
func (w *Watchdog) hwOpen(ctx context.Context, key string, g ops.GPUHealth, why []string, now time.Time, set watchSettings) int64 {
	in, opened, err := w.app.Store.OpenIncident(ctx, store.Incident{Service: key, Kind: IncidentHardware, Summary: hwBody(g, why, now), OpenedAt: now})
	if err != nil {
		w.log.Error("watchdog: open hardware incident", "gpu", key, "err", err)
		return 0
	}
	if !opened {
		return 0
	}
	w.log.Warn("watchdog: hardware incident opened", "incident", in.ID, "gpu", key, "verdict", g.Verdict.String(), "why", why)
	for _, t := range set.to {
		c := w.app.Engine.Chats()[t.Platform]
		if c == nil {
			continue
		}
		ref, err := c.Post(ctx, t.Room, bot.Message{Kind: bot.KindStatus, Text: bot.AlertText(in, now)})
		if err != nil {
			w.log.Error("watchdog: post hardware alert", "platform", t.Platform, "room", t.Room, "err", err)
			continue
		}
		in.Alerts = append(in.Alerts, store.AlertRef{Platform: t.Platform, Room: ref.Room, ID: ref.ID})
	}
	if err := w.app.Store.UpdateIncident(ctx, in, now); err != nil {
		w.log.Error("watchdog: record alerts", "incident", in.ID, "err", err)
	}
	return in.ID
}

// hwEvolve edits an open hardware incident's alerts when there is news or
// the verdict changed, and reminds when it is unacknowledged for remind.
func (w *Watchdog) hwEvolve(ctx context.Context, in store.Incident, g ops.GPUHealth, why []string, now time.Time, silent bool, remind time.Duration) {
	changed := len(why) > 0 && !strings.Contains(in.Summary, strings.Join(why, "; "))
	if first, _, _ := strings.Cut(in.Summary, "\n"); !strings.Contains(first, ": "+g.Verdict.String()+":") {
		changed = true
		if len(why) == 0 {
			why = []string{"verdict now " + g.Verdict.String()}
		}
	}
	if changed {
		in.Summary = hwBody(g, why, now)
	}
	due := in.AckedBy == "" && !silent && now.Sub(lastOf(in.RemindedAt, in.OpenedAt)) >= remind
	if !changed && !due {
		return
	}
	if due {
		in.RemindedAt = now
		w.replyAll(ctx, in, fmt.Sprintf("reminder: GPU %d of %s still %s (since %s). `ack %d` stops these reminders.",
			g.GPU.Index, g.Node, g.Verdict, report.Stamp(in.OpenedAt), in.ID))
	}
	if err := w.app.Store.UpdateIncident(ctx, in, now); err != nil {
		w.log.Error("watchdog: update hardware incident", "incident", in.ID, "err", err)
		return
	}
	if changed {
		bot.EditAlerts(ctx, w.app.Engine.Chats(), in, false, w.log)
	}
}
