package labtest

import (
	"testing"
	"time"

	"github.com/opsbot/opsbot/lab"
)

func TestReplicasOpsConfig(t *testing.T) {
	l := StartReplicas(t, 2, lab.Options{TimeScale: 1000})
	top := l.Topology()
	cfg := OpsConfig(t, top, time.Minute)
	if len(cfg.Services) != 2 {
		t.Fatalf("services %v; want qwen@gpu1 and qwen@gpu2", cfg.Services)
	}
	for i, name := range []string{"qwen@gpu1", "qwen@gpu2"} {
		s, ok := cfg.Services[name]
		if !ok || s.Replica == nil {
			t.Fatalf("%s: %+v; want a replica", name, s)
		}
		want := "gpu1"
		if i == 1 {
			want = "gpu2"
		}
		if s.Host != want || s.Replica.Group != "qwen" || s.Replica.Name != want {
			t.Errorf("%s: host %s, replica %+v", name, s.Host, s.Replica)
		}
		if r := s.Replica.Router; r == nil || r.URL != l.Router().URL() || r.Kind != "sglang" || r.Worker != s.URL {
			t.Errorf("%s: router %+v; want the lab's, knowing it by its url %s", name, r, s.URL)
		}
	}
	if _, err := Runbook(t, l, nil); err != nil {
		t.Fatal(err)
	}
}
