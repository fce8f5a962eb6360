package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// `opsbot run --lab --json 'bench qwen' 'svc stop coder' fleet`: the fleet
// line carries the "fleet" object through the door, joined with the store:
// qwen's row has the benchmark just run (its tok/s, accept length, job and
// age), coder's is first (stopped, needing attention), and what nothing
// measured is null (coder's last result).
func TestRunFleetJSON(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	code := run(ctx, []string{"run", "--lab", "--yes", "--json", "bench qwen", "svc stop coder", "fleet"}, strings.NewReader(""), &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var line struct {
		Command string `json:"command"`
		Reply   string `json:"reply"`
		Fleet   *struct {
			Services []struct {
				Service   string   `json:"service"`
				Attention []string `json:"attention"`
				State     *struct {
					ActiveState string `json:"active_state"`
				} `json:"state"`
				Speculative *struct {
					Mode  string `json:"mode"`
					Steps *int   `json:"steps"`
				} `json:"speculative"`
				Last *struct {
					OutputTokS *float64 `json:"output_tok_s"`
					AcceptLen  *float64 `json:"accept_len"`
					JobID      *int64   `json:"job_id"`
					AgeS       float64  `json:"age_s"`
				} `json:"last"`
				GPUs []struct {
					UsedMiB *int `json:"used_mib"`
				} `json:"gpus"`
				NRestarts *int `json:"n_restarts"`
				Job       any  `json:"job"`
			} `json:"services"`
			Hosts struct {
				Asked, Answered int
			} `json:"hosts"`
		} `json:"fleet"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &line); err != nil {
		t.Fatalf("%v: %s", err, lines[len(lines)-1])
	}
	f := line.Fleet
	if line.Command != "fleet" || f == nil || len(f.Services) != 2 || f.Hosts.Asked != 2 || f.Hosts.Answered != 2 {
		t.Fatalf("fleet line: %s", lines[len(lines)-1])
	}
	coder, qwen := f.Services[0], f.Services[1]
	if coder.Service != "coder" || len(coder.Attention) == 0 || coder.State == nil || coder.State.ActiveState != "inactive" || coder.Last != nil {
		t.Errorf("first row %+v, want coder, stopped, needing attention, no result (null)", coder)
	}
	if qwen.Service != "qwen" || len(qwen.Attention) != 0 || qwen.Last == nil || qwen.Last.OutputTokS == nil || *qwen.Last.OutputTokS <= 0 ||
		qwen.Last.JobID == nil || *qwen.Last.JobID != 1 || qwen.Last.AgeS < 0 || qwen.Speculative == nil || qwen.Speculative.Mode != "steps" ||
		qwen.Speculative.Steps == nil || *qwen.Speculative.Steps != 3 || len(qwen.GPUs) != 4 || qwen.NRestarts == nil || qwen.Job != nil {
		t.Errorf("qwen's row %+v (last %+v), want its benchmark of job 1, steps 3, 4 GPUs, no job", qwen, qwen.Last)
	}
	if !strings.Contains(line.Reply, "1 need attention") || !strings.Contains(line.Reply, "`svc start coder`") {
		t.Errorf("reply:\n%s", line.Reply)
	}
}
