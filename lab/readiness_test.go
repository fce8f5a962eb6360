package lab

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestReadinessPhases: while loading the port refuses connections, during warm-up /health is
// 503, then 200 with the ready line in the journal; the port stays the same across restarts.
func TestReadinessPhases(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Faults = []Fault{{Name: "slow-load", Duration: 400 * time.Second}}
	opts.WarmUp = 400 * time.Second
	l := startLab(t, opts)
	h := l.Host("gpu1")
	url := l.Topology().Services[0].URL
	if code := healthCode(url); code != 0 {
		t.Fatalf("health while loading = %d, want connection refused", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.WaitUnit(ctx, qwenUnit, func(s UnitStatus) bool { return s.Listening }); err != nil {
		t.Fatal(err)
	}
	if code := healthCode(url); code != 503 {
		t.Fatalf("health during warm-up = %d, want 503", code)
	}
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	if code := healthCode(url); code != 200 {
		t.Fatalf("health when ready = %d", code)
	}
	port := h.Unit(qwenUnit).Port
	c := dialHost(t, l, "gpu1")
	c.must(t, "systemctl", "restart", qwenUnit)
	if code := healthCode(url); code != 0 {
		t.Fatalf("health right after restart = %d, want refused", code)
	}
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	if h.Unit(qwenUnit).Port != port || healthCode(url) != 200 {
		t.Fatalf("port moved or not serving after restart")
	}
}

func TestEngineRejectsArgvExit2(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	unit := strings.Replace(defaultUnit("sglang"), "--enable-metrics", "--enable-metrics --speculative-num-stepz 3", 1)
	// A long start-limit interval: at this time scale the default 10 s is 10 ms of real time,
	// shorter than one failing start cycle on a slow (or -race) run.
	unit = strings.Replace(unit, "[Unit]\n", "[Unit]\nStartLimitIntervalSec=1h\n", 1)
	opts.UnitText = strings.Replace(unit, "Restart=always", "Restart=on-failure\nStartLimitBurst=1", 1)
	l := startLab(t, opts)
	h := l.Host("gpu1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.WaitUnit(ctx, qwenUnit, func(s UnitStatus) bool { return s.ActiveState == "failed" }); err != nil {
		t.Fatal(err)
	}
	c := dialHost(t, l, "gpu1")
	// The failure's result stays when the restart hits the start limit (systemd 252).
	if m := showMap(t, c, qwenUnit, "Result"); m["Result"] != "exit-code" {
		t.Fatalf("Restart=on-failure with StartLimitBurst=1: %v", m)
	}
	if m := showMap(t, c, qwenUnit, "ExecMainStatus", "ExecMainCode"); m["ExecMainStatus"] != "2" || m["ExecMainCode"] != "1" {
		t.Fatalf("argv rejection: %v, want exit status 2", m)
	}
	if j := c.must(t, "journalctl", "-u", qwenUnit, "-o", "cat"); !strings.Contains(j, "error: unrecognized arguments") || !strings.Contains(j, "status=2/INVALIDARGUMENT") {
		t.Fatalf("journal:\n%s", j)
	}
}

func TestVLLMUnit(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Engine = "vllm"
	l := readyLab(t, opts)
	svc := l.Topology().Services[0]
	if svc.Unit != "vllm-qwen.service" || svc.Engine != "vllm" {
		t.Fatalf("service %+v", svc)
	}
	c := dialHost(t, l, "gpu1")
	ps := c.must(t, "ps", "-eo", "args=")
	for _, want := range []string{"VLLM::EngineCore", "VLLM::Worker_TP3", `--speculative-config {"method":"mtp","num_speculative_tokens":3}`} {
		if !strings.Contains(ps, want) {
			t.Fatalf("ps lacks %q:\n%s", want, ps)
		}
	}
	if healthCode(svc.URL) != 200 {
		t.Fatal("vLLM not serving")
	}
	if j := c.must(t, "journalctl", "-u", svc.Unit, "-o", "cat", "-n", "1"); !strings.Contains(j, "Application startup complete.") {
		t.Fatalf("journal %q", j)
	}
}

// TestSlowLoadAddsToLoadTime: slow-load=DUR makes the load DUR longer than usual, so no
// slow-load value ever makes the engine load faster than without the fault.
func TestSlowLoadAddsToLoadTime(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		faults string
		want   time.Duration
	}{
		{"", 60 * time.Second},
		{"slow-load=5s", 65 * time.Second},
		{"orphans,slow-load=3m", 240 * time.Second},
	} {
		fl, err := ParseFaults(tt.faults)
		if err != nil {
			t.Fatal(err)
		}
		fs := newFaultSet(fl)
		l := &Lab{opts: Options{LoadTime: 60 * time.Second}, faults: &fs}
		if got := l.loadTime(); got != tt.want {
			t.Errorf("faults %q: load time %s, want %s", tt.faults, got, tt.want)
		}
	}
}

// The lab's banner explains its time scale in terms a person can use: how long a model
// load takes in lab time and in real time.
func TestDescribeExplainsTheTimeScale(t *testing.T) {
	t.Parallel()
	fl, err := ParseFaults("slow-load=60s")
	if err != nil {
		t.Fatal(err)
	}
	fs := newFaultSet(fl)
	l := &Lab{opts: Options{LoadTime: 60 * time.Second, TimeScale: 25, Faults: fl}, faults: &fs}
	got := l.Describe()
	if want := "lab time runs 25x faster than real time: a 2m0s model load takes 4.8s here"; !strings.Contains(got, want) {
		t.Errorf("banner %q lacks %q", got, want)
	}
}
