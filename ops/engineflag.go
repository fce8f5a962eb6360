package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/unit"
)

// vllmCacheInfo is vLLM's gauge whose labels are its cache config
// (vllm/v1/metrics/loggers.py, log_metrics_info("cache_config", ...)):
// gpu_memory_utilization among them.
const vllmCacheInfo = "vllm:cache_config_info"

// liveFlag reads the value the running engine reports for f: SGLang's
// /server_info (the server args by dest name); vLLM's /metrics
// (gpu_memory_utilization, a label of vllm:cache_config_info) or
// /v1/models (max_model_len). known is false when the engine reports it
// nowhere (vLLM's max_num_seqs) or not under that name; where says where
// it was read (or not).
func (r *Runbook) liveFlag(ctx context.Context, t *target, f unit.EngineFlag) (value string, known bool, where string, err error) {
	if f.Engine == unit.SGLang {
		where = t.cfg.URL + "/server_info"
		info, err := t.eng.ServerInfo(ctx)
		if err != nil {
			return "", false, where, err
		}
		v, ok := info.Raw[f.Report]
		if !ok || v == nil {
			return "", false, where, nil
		}
		switch x := v.(type) {
		case bool:
			return fmt.Sprint(x), true, where, nil
		case json.Number:
			return x.String(), true, where, nil
		case string:
			return engine.Excerpt(x), true, where, nil
		}
		return "", false, where, fmt.Errorf("%s is %T in /server_info", f.Report, v)
	}
	switch f.Report {
	case "gpu_memory_utilization":
		where = t.cfg.URL + "/metrics (" + vllmCacheInfo + ")"
		m, err := t.eng.Metrics(ctx)
		if err != nil {
			return "", false, where, err
		}
		for _, s := range m {
			if s.Name == vllmCacheInfo {
				if v, ok := s.Labels[f.Report]; ok {
					return engine.Excerpt(v), true, where, nil
				}
			}
		}
		return "", false, where, nil
	case "max_model_len":
		where = t.cfg.URL + "/v1/models"
		n, ok, err := t.eng.MaxModelLen(ctx)
		if err != nil || !ok {
			return "", false, where, err
		}
		return fmt.Sprint(n), true, where, nil
	}
	return "", false, "nowhere over HTTP (vLLM reports " + f.Report + " neither on /metrics nor on /v1/models)", nil
}

// verifyFlag checks that the running engine reports f as want (the value
// the unit now sets). When the engine reports it nowhere the step is
// skipped and says so. A different value is a *VerifyError
// (settings_mismatch), except a lower --max-running-requests: SGLang lowers
// the cap to what its memory pool holds, and says so in its log.
func (r *Runbook) verifyFlag(ctx context.Context, t *target, f unit.EngineFlag, want string, res *Result, rep Reporter) error {
	st := begin(rep, "verify flag", "reading %s back from the engine", f.Name)
	live, known, where, err := r.liveFlag(ctx, t, f)
	if err != nil {
		return st.fail(&VerifyError{Service: t.name, Err: fmt.Errorf("reading %s from %s: %w", f.Name, where, err)})
	}
	if !known {
		st.skip("the engine reports %s %s: the unit's %s is taken as deployed", f.Report, where, want)
		return nil
	}
	if res.Flag != nil {
		res.Flag.Live = &live
	}
	if f.Same(live, want) {
		st.done("engine runs %s %s (%s)", f.Report, live, where)
		return nil
	}
	if f.Name == unit.FlagMaxRunning {
		if l, w, ok := lowerInt(live, want); ok && l < w {
			st.warn("engine runs %s %s, below the unit's %s: SGLang lowers the cap to what its memory pool holds", f.Report, live, want)
			return nil
		}
	}
	res.AddIncident(IncidentSettingsDiffer)
	return st.fail(&VerifyError{Service: t.name, Mismatch: true, Err: fmt.Errorf("the engine reports %s %s on %s; the unit says %s: something else sets it (a drop-in, an environment file?)",
		f.Report, live, where, want)})
}

func lowerInt(a, b string) (int, int, bool) {
	var x, y int
	_, e1 := fmt.Sscan(a, &x)
	_, e2 := fmt.Sscan(b, &y)
	return x, y, e1 == nil && e2 == nil
}

// EngineShow is `engine show`: every allowlisted flag of the service's
// engine as its unit sets it (or leaves it to the engine's default) and, when
// the engine serves, as it reports it.
func (r *Runbook) EngineShow(ctx context.Context, service string, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	st := begin(rep, "read unit", "reading %s on %s", t.cfg.Unit, t.cfg.Host)
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, st.fail(err)
	}
	eng := d.eff.Detection.Engine
	st.done("%s runs %s", t.cfg.Unit, unitEngineName(eng))
	var lines []string
	for _, f := range unit.EngineFlags {
		if f.Engine != eng {
			continue
		}
		v, _, err := d.eff.FlagValue(f)
		if err != nil {
			lines = append(lines, fmt.Sprintf("%s: unit: %v", f.Name, err))
			continue
		}
		fs := FlagSetting{Name: f.Name, Unit: v}
		line := fmt.Sprintf("%s: unit %s", f.Name, orDefault(f, v))
		live, known, where, lerr := r.liveFlag(ctx, t, f)
		switch {
		case lerr != nil:
			line += fmt.Sprintf("; engine not answering (%v)", lerr)
		case known:
			fs.Live = &live
			line += "; engine " + live
		default:
			if strings.HasPrefix(where, "nowhere") {
				line += "; engine — (reported " + where + ")"
			} else {
				line += "; engine — (not in " + where + ")"
			}
		}
		res.Flags = append(res.Flags, fs)
		lines = append(lines, line)
	}
	res.Summary = fmt.Sprintf("%s (%s, %s): %d engine flags `engine set` changes", service, t.cfg.Unit, unitEngineName(eng), len(res.Flags))
	res.Details = append(res.Details, strings.Join(lines, "\n"))
	return res, nil
}

func orDefault(f unit.EngineFlag, v string) string {
	switch {
	case f.Kind == unit.KindBool && v == "":
		return "false (absent)"
	case v == "":
		return "unset (the engine's default)"
	}
	return v
}

func unitEngineName(e string) string {
	if e == unit.VLLM {
		return "vLLM"
	}
	return "SGLang"
}
