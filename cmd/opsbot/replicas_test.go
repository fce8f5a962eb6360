package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/lab"
)

// replicatedLabConfig starts the lab and writes a config in which its two
// containers' engines (gpu1's sglang-qwen.service on GPUs 0-3, gpu2's
// sglang-coder.service on GPUs 4-7, both on node pve) are the two replicas
// of one service, qwen: qwen@gpu1 and qwen@gpu2.
func replicatedLabConfig(t *testing.T, ctx context.Context) string {
	t.Helper()
	l, err := lab.Start(ctx, lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	dir := t.TempDir()
	if _, err := l.WriteConfig(dir); err != nil { // the key and known_hosts
		t.Fatal(err)
	}
	topo := l.Topology()
	var b strings.Builder
	fmt.Fprintf(&b, "store: {path: opsbot.db}\nssh: {key_file: id_ed25519, known_hosts: known_hosts}\nhosts:\n")
	for _, h := range topo.Hosts {
		fmt.Fprintf(&b, "  %s: {addr: %q, user: %s}\n", h.Name, h.Addr, h.User)
	}
	b.WriteString("services:\n  qwen:\n    unit: sglang-qwen.service\n    replicas:\n")
	for _, s := range topo.Services {
		gpus := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(s.GPUs)), ","), "[]")
		fmt.Fprintf(&b, "      - {host: %s, unit: %s, url: %q, gpus: [%s], proxmox: {node: %s, vmid: %d}}\n",
			s.Host, s.Unit, s.URL, gpus, s.ProxmoxNode, s.VMID)
	}
	b.WriteString("bench: {prompts: 4, concurrency: 2, input_len: 32, output_len: 16}\nauth: {default_role: admin}\n")
	path := filepath.Join(dir, "opsbot.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSvcStatusOfAReplicatedService: on the lab, `svc status qwen` on a
// service whose replicas run on gpu1 and gpu2 reads each replica on its
// own host and shows one line per replica; `svc status qwen@gpu2` reads
// that replica alone; a change naming the group is refused before any job,
// naming the replicas.
func TestSvcStatusOfAReplicatedService(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := replicatedLabConfig(t, ctx)

	var out, errb bytes.Buffer
	if code := run(ctx, []string{"run", "--config", cfg, "--json", "svc status qwen"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("svc status qwen: exit %d\n%s%s", code, out.String(), errb.String())
	}
	var l struct {
		Job    *struct{ Status string } `json:"job"`
		Result struct {
			Summary  string   `json:"summary"`
			Details  []string `json:"details"`
			Replicas []struct {
				Summary string `json:"summary"`
				Service struct {
					Service, Host, Unit string
					ActiveState         string `json:"active_state"`
				} `json:"service"`
			} `json:"replicas"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if l.Job == nil || l.Job.Status != "succeeded" || len(l.Result.Replicas) != 2 {
		t.Fatalf("svc status qwen: %s", out.String())
	}
	want := []struct{ service, host, unit string }{{"qwen@gpu1", "gpu1", "sglang-qwen.service"}, {"qwen@gpu2", "gpu2", "sglang-coder.service"}}
	for i, w := range want {
		r := l.Result.Replicas[i].Service
		if r.Service != w.service || r.Host != w.host || r.Unit != w.unit || r.ActiveState != "active" {
			t.Errorf("replica %d: %+v, want %s (%s on %s) active", i, r, w.service, w.unit, w.host)
		}
		if !slicesHasPrefix(l.Result.Details, w.service+" ("+w.unit+" on "+w.host+"): active/running") {
			t.Errorf("details %q: no line for %s", l.Result.Details, w.service)
		}
	}
	t.Logf("svc status qwen: %s", out.String())
	if l.Result.Summary != "qwen: 2 replicas" {
		t.Errorf("summary %q", l.Result.Summary)
	}

	// One replica, by name.
	out.Reset()
	if code := run(ctx, []string{"run", "--config", cfg, "--json", "svc status qwen@gpu2"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("svc status qwen@gpu2: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), `"summary":"qwen@gpu2 (sglang-coder.service on gpu2): active/running`) || strings.Contains(out.String(), "qwen@gpu1") {
		t.Errorf("svc status qwen@gpu2: %s", out.String())
	}

	// A change on the group is refused, naming the replicas; nothing runs.
	out.Reset()
	code := run(ctx, []string{"run", "--config", cfg, "--json", "svc restart qwen"}, strings.NewReader(""), &out, &errb)
	if code == 0 || !strings.Contains(out.String()+errb.String(), "qwen has replicas: name one (qwen@gpu1, qwen@gpu2)") {
		t.Errorf("svc restart qwen: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

func slicesHasPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
