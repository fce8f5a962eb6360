package ops_test

import (
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
)

// hangingHost listens on loopback and accepts connections it never speaks
// on: a host whose sshd hangs (it takes the TCP connection and never sends
// its banner). It closes with the test.
func hangingHost(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestFleetOnTheLab: `fleet`'s host round over four services of a lab node
// (each in its own container, its own SSH host): one in a restart loop,
// one stopped, one whose host hangs, one well. Every service is a row: the
// answering hosts' with their unit state, speculative setting and GPU
// memory, the hanging host's with its error, given within the per-host
// timeout (not the SSH pool's 10 s handshake timeout) while the others
// answer; report.NewFleet puts the rows needing attention first, and
// everything not known is null in its JSON.
func TestFleetOnTheLab(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t, lab.Options{Services: 4})
	ctx := testkit.Context(t, 2*time.Minute)
	top := l.Topology()
	for _, s := range top.Services {
		if err := l.WaitReady(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
	}
	svc := func(i int) lab.ServiceInfo { return top.Services[i] }
	loop, stopped, hung, well := svc(0), svc(1), svc(2), svc(3)
	cfg := labtest.OpsConfig(t, top, time.Minute)
	cfg.Hosts[hung.Host] = ops.HostConfig{Addr: hangingHost(t), User: "root"}
	rb, err := ops.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.Close() })

	if err := l.RestartLeavingWorkers(ctx, loop.Name); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := l.Host(stopped.Host).Exec(ctx, nil, "systemctl", "stop", stopped.Unit); code != 0 {
		t.Fatalf("systemctl stop %s: %d %s", stopped.Unit, code, errs)
	}
	testkit.WaitFor(t, time.Minute, loop.Name+" looping", func() bool {
		u := l.Host(loop.Host).Unit(loop.Unit)
		return u.NRestarts > 0
	})

	t0 := time.Now()
	res, err := rb.Fleet(ctx, "", ops.Discard)
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet over %d services took %s", len(top.Services), took)
	if took > 5*time.Second {
		t.Errorf("fleet took %s: the hanging host was waited for beyond its %s", took, ops.DefaultFleetHostTimeout)
	}
	st := res.Fleet
	if len(st.Services) != 4 || len(st.Hosts) != 4 {
		t.Fatalf("fleet: %d services on %d hosts, want 4 on 4: %+v", len(st.Services), len(st.Hosts), st)
	}
	by := map[string]ops.FleetService{}
	for _, s := range st.Services {
		by[s.Name] = s
	}
	if s := by[hung.Name]; s.Error == "" || !strings.Contains(s.Error, "no answer within 1.5s") || s.State != nil || s.Spec != nil || s.GPUs != nil {
		t.Errorf("%s on the hanging host: %+v, want its error and nothing else", hung.Name, s)
	}
	if s := by[loop.Name]; s.State == nil || !s.State.RestartLoop {
		t.Errorf("%s: %+v, want a restart loop", loop.Name, s.State)
	}
	if s := by[stopped.Name]; s.State == nil || s.State.ActiveState != "inactive" || s.State.RestartLoop {
		t.Errorf("%s: %+v, want inactive", stopped.Name, s.State)
	}
	for _, name := range []string{loop.Name, stopped.Name, well.Name} {
		s := by[name]
		if s.Error != "" || s.Spec == nil || s.Spec.Steps != 3 || s.Spec.Algorithm == "" || len(s.GPUs) != 2 {
			t.Errorf("%s: %+v (spec %+v), want its unit's steps 3 and its 2 GPUs", name, s, s.Spec)
		}
		for _, g := range s.GPUs {
			if g.UsedMiB == nil || g.TotalMiB == nil || g.UUID == "" {
				t.Errorf("%s GPU %d: %+v, want its memory", name, g.Index, g)
			}
		}
	}
	if s := by[well.Name]; s.State == nil || s.State.ActiveState != "active" || s.State.SubState != "running" || *s.GPUs[0].UsedMiB == 0 {
		t.Errorf("%s: %+v, want active/running holding its GPUs", well.Name, s.State)
	}

	f := report.NewFleet(st, report.FleetStore{}, took, time.Now())
	var order []string
	for _, r := range f.Services {
		order = append(order, r.Service)
	}
	if want := []string{hung.Name, loop.Name, stopped.Name, well.Name}; strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("rows %v, want %v (no answer, restart loop, stopped, well)", order, want)
	}
	text := f.Text()
	for _, want := range []string{"3 need attention", "1 hosts did not answer", hung.Host + " did not answer: no answer within 1.5s",
		"LOOP ", "steps 3", "`svc status " + hung.Name + "`"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var rows struct {
		Services []map[string]any `json:"services"`
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows.Services {
		for _, k := range []string{"group", "replica", "last", "job"} {
			if v, ok := r[k]; !ok || v != nil {
				t.Errorf("%s: %s = %v, want null (no replica, no result row, no job)", r["service"], k, v)
			}
		}
		if r["service"] == hung.Name {
			for _, k := range []string{"state", "speculative", "gpus", "n_restarts"} {
				if v, ok := r[k]; !ok || v != nil {
					t.Errorf("%s: %s = %v, want null (its host did not answer)", hung.Name, k, v)
				}
			}
		}
	}
}
