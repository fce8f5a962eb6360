package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestReplicasBehindTheRouter(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{TimeScale: 1000, Replicas: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	top := l.Topology()
	if len(top.Services) != 4 || len(top.Routers) != 1 || top.Routers[0].Group != "qwen" {
		t.Fatalf("topology: %d services, routers %+v; want 4 replicas behind one router of qwen", len(top.Services), top.Routers)
	}
	seen := map[int]bool{}
	for i, s := range top.Services {
		if want := "qwen@gpu" + string(rune('1'+i)); s.Name != want || s.Group != "qwen" || s.Replica != s.Host || s.Unit != "sglang-qwen.service" {
			t.Errorf("replica %d: %+v; want %s on its own host", i, s, want)
		}
		for _, g := range s.GPUs {
			if seen[g] {
				t.Errorf("GPU %d is given to two replicas", g)
			}
			seen[g] = true
		}
		if err := l.WaitReady(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
	}
	r := l.Router()
	if got := r.Workers(); len(got) != 4 {
		t.Fatalf("the router lists %v; want the 4 replicas", got)
	}
	for range 8 {
		if code := generate(t, r.URL()); code != 200 {
			t.Fatalf("a request through the replicas' router: HTTP %d", code)
		}
	}
	for _, s := range top.Services {
		if n := r.Stats().Workers[s.URL].Requests; n != 2 {
			t.Errorf("replica %s got %d of 8 requests; want 2", s.Name, n)
		}
	}

	dir := t.TempDir()
	p, err := l.WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, want := range []string{
		"  qwen:\n    unit: sglang-qwen.service\n    engine: sglang\n",
		`    router: {url: "` + r.URL() + `", kind: sglang}`,
		`      - {host: gpu1, gpus: [0,1,2,3], url: "` + top.Services[0].URL + `", proxmox: {node: pve, vmid: 129}}`,
		`      - {host: gpu4, gpus: [12,13,14,15], url: "` + top.Services[3].URL + `", proxmox: {node: pve, vmid: 132}}`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "qwen@") {
		t.Errorf("config names a replica as a service of its own:\n%s", cfg)
	}
}

func TestReplicasRefused(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Replicas: 1}, {Replicas: 9}, {Replicas: 2, Services: 2}, {Replicas: 3, GPUs: 8},
		{Replicas: 2, UnitText: "[Service]\nExecStart=/bin/true\n"}} {
		l, err := Start(context.Background(), o)
		if err == nil {
			l.Close()
			t.Errorf("Start(%+v): no error", o)
		}
	}
}
