package lab

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The restart-loop fault: once qwen serves and the fault's time has
// passed, qwen is restarted behind opsbot's back with its workers left on
// the GPUs, and loops (activating/auto-restart, NRestarts rising) while
// they hold the memory; coder is untouched. RestartLeavingWorkers on a
// service the lab lacks is an error.
func TestRestartLoopFault(t *testing.T) {
	t.Parallel()
	f, err := ParseFaults("restart-loop=5m")
	if err != nil || len(f) != 1 || f[0].Duration != 5*time.Minute || f[0].String() != "restart-loop=5m0s" {
		t.Fatalf("ParseFaults: %+v %v", f, err)
	}
	var fe *FaultError
	if _, err := ParseFaults("restart-loop"); !errors.As(err, &fe) {
		t.Fatalf("restart-loop without a duration: %v", err)
	}
	opts := fastOpts()
	opts.Faults = f
	l := startLab(t, opts)
	gpu1, gpu2 := l.Host("gpu1"), l.Host("gpu2")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	err = gpu1.WaitUnit(ctx, "sglang-qwen.service", func(u UnitStatus) bool {
		return u.ActiveState == "activating" && u.SubState == "auto-restart" && u.NRestarts >= 2
	})
	if err != nil {
		t.Fatalf("qwen did not loop: %+v (%v)", gpu1.Unit("sglang-qwen.service"), err)
	}
	held := 0
	for _, g := range gpu1.GPUs() {
		if g.Index < 4 && g.UsedMiB > 10000 {
			held++
		}
	}
	if held != 4 {
		t.Fatalf("%d of qwen's 4 GPUs held while it loops: %+v", held, gpu1.GPUs())
	}
	if u := gpu2.Unit("sglang-coder.service"); u.ActiveState != "active" || u.NRestarts != 0 {
		t.Fatalf("coder: %+v", u)
	}
	if err := l.RestartLeavingWorkers(ctx, "nope"); err == nil {
		t.Fatal("RestartLeavingWorkers on a service the lab lacks: no error")
	}
}
