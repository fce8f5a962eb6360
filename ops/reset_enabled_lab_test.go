package ops_test

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// A service on the reset GPUs whose unit is disabled (`systemctl disable`:
// not wanted) is left stopped after the reset, and the job says so; an
// enabled one beside it is started again.
func TestResetLeavesADisabledServiceStopped(t *testing.T) {
	t.Parallel()
	r := resetRig(t, 1000)
	ctx := testkit.Context(t, 60*time.Second)
	if err := r.lab.WaitReady(ctx, "coder"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"qwen", "coder"} {
		if _, err := r.rb.ServiceAction(ctx, s, "stop", false, ops.Discard); err != nil {
			t.Fatal(err)
		}
	}
	gpu1 := r.lab.Host("gpu1")
	if err := gpu1.Disable("sglang-qwen.service"); err != nil {
		t.Fatal(err)
	}
	if s := gpu1.UnitFileState("sglang-qwen.service"); s != "disabled" {
		t.Fatalf("qwen's unit is %q after disable", s)
	}
	ev := &events{}
	res, err := r.rb.GPUReset(ctx, "pve", []int{3, 4}, []string{"coder", "qwen"}, false, ev)
	if err != nil {
		t.Fatalf("gpu reset 3 4: %v\n%s", err, ev.text())
	}
	all := res.Summary + "\n" + strings.Join(res.Details, "\n")
	if !strings.Contains(all, "qwen left stopped: its unit sglang-qwen.service is disabled, not enabled") {
		t.Errorf("the job does not say qwen was left stopped:\n%s", all)
	}
	if !strings.Contains(res.Summary, "coder serving again") || strings.Contains(res.Summary, "qwen serving") {
		t.Errorf("summary %q: want coder serving again, qwen not", res.Summary)
	}
	if u := gpu1.Unit("sglang-qwen.service"); u.ActiveState != "inactive" {
		t.Errorf("disabled qwen is %s after the reset, want inactive", u.ActiveState)
	}
	if u := r.lab.Host("gpu2").Unit("sglang-coder.service"); u.ActiveState != "active" {
		t.Errorf("enabled coder is %s after the reset, want active", u.ActiveState)
	}
}

// A GPU that reports a new Xid right after its reset (hardware a reset
// does not cure): the reset's check fails, naming the Xid, leaves the
// service stopped and says which command tells what it means.
func TestResetNewXidAfterReset(t *testing.T) {
	t.Parallel()
	r := resetRig(t, 1000, lab.Fault{Name: "xid-after-reset", GPU: 2, XID: 79})
	ctx := testkit.Context(t, 60*time.Second)
	if _, err := r.rb.ServiceAction(ctx, "qwen", "stop", false, ops.Discard); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	res, err := r.rb.GPUReset(ctx, "pve", []int{2}, []string{"qwen"}, false, ev)
	if err == nil {
		t.Fatalf("gpu reset 2 with a new Xid after it succeeded: %+v\n%s", res, ev.text())
	}
	for _, want := range []string{"new Xid events since the reset: GPU 2 Xid 79", "fallen off the bus", "left stopped", "`gpu health pve`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if u := r.lab.Host("gpu1").Unit("sglang-qwen.service"); u.ActiveState != "inactive" {
		t.Errorf("qwen is %s after a reset that found a new Xid, want left stopped", u.ActiveState)
	}
	t.Logf("thread:\n%s\nleft: %+v", ev.text(), res.Left)
}
