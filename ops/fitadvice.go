package ops

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/opsbot/opsbot/ops/systemd"
	"github.com/opsbot/opsbot/ops/unit"
)

// Out-of-memory advice that can be followed from chat: when a start on
// clear GPUs runs out of memory (systemd.CauseSettingsDoNotFit), the hint
// names the `engine set` command with a value computed from the engine's
// own figures in the quoted line and the unit's current value, within the
// flag's range, instead of a fixed example.
//
// The figures: PyTorch's "CUDA out of memory. Tried to allocate X. GPU N
// has a total capacity of T of which F is free" (SGLang's "Capture cuda
// graph failed" quotes it), and vLLM's "Free memory on device cuda:N (F/T
// GiB) on startup is less than desired GPU memory utilization (U, N GiB)".
// A static share lowered by (X - F) / T leaves the graphs their room;
// fitMargin more covers what else the process allocates beside them.

// fitMargin is the share of a GPU the advice leaves beyond what the line
// says was missing.
const fitMargin = 0.02

var (
	torchOOM = regexp.MustCompile(`(?i)tried to allocate ([0-9.]+) (GiB|MiB)\. GPU \d+ has a total capacity of ([0-9.]+) (GiB|MiB) of which ([0-9.]+) (GiB|MiB) is free`)
	vllmFree = regexp.MustCompile(`(?i)free memory on device \S+ \(([0-9.]+)/([0-9.]+) GiB\) on startup is less than desired gpu memory utilization`)
)

func mib(v, unitName string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	if strings.EqualFold(unitName, "GiB") {
		return f * 1024
	}
	return f
}

// fitAdvice returns what to append to the hint of d, an out-of-memory
// start of t's unit on clear GPUs: the `engine set` command to run, with
// its value, or "" when none can be computed.
func (r *Runbook) fitAdvice(ctx context.Context, t *target, d systemd.Diagnosis) string {
	if d.Cause != systemd.CauseSettingsDoNotFit {
		return ""
	}
	dep, err := r.readUnit(ctx, t)
	if err != nil {
		return ""
	}
	eng := dep.eff.Detection.Engine
	share := "--mem-fraction-static"
	if eng == unit.VLLM {
		share = "--gpu-memory-utilization"
	}
	f, _ := unit.LookupFlag(share)
	cur, set, err := dep.eff.FlagValue(f)
	if err != nil {
		return ""
	}
	current, cerr := strconv.ParseFloat(strings.TrimSpace(cur), 64)
	if !set {
		cerr = fmt.Errorf("unset")
		if eng == unit.VLLM {
			current, cerr = 0.9, nil // CacheConfig's default (vllm/config/cache.py)
		}
	}
	line := d.Line
	var want float64
	switch m, v := torchOOM.FindStringSubmatch(line), vllmFree.FindStringSubmatch(line); {
	case m != nil:
		x, total, free := mib(m[1], m[2]), mib(m[3], m[4]), mib(m[5], m[6])
		if total <= 0 {
			return ""
		}
		if cerr != nil {
			// The unit leaves the share to the engine: what the process held
			// when it failed is at most the share plus its context.
			current = (total - free) / total
		}
		want = current - (x-free)/total - fitMargin
	case v != nil:
		free, _ := strconv.ParseFloat(v[1], 64)
		total, _ := strconv.ParseFloat(v[2], 64)
		if total <= 0 {
			return ""
		}
		want = free/total - fitMargin
	case strings.Contains(strings.ToLower(line), "not enough memory") && cerr == nil:
		want = current + 2*fitMargin // SGLang: no room for the KV cache within the share
	default:
		return ""
	}
	want = math.Floor(want*100+1e-9) / 100
	value := strconv.FormatFloat(want, 'f', -1, 64)
	if _, err := f.ParseValue(value); err != nil || (set && f.Same(cur, value)) {
		return ""
	}
	return fmt.Sprintf("; `engine set %s %s %s` sets %s to %s (from %s), computed from the figures in the line", f.Word(), value, t.name, f.Name, value, orDefault(f, cur))
}
