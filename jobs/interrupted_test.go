package jobs

import (
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/store"
)

// A job of a dead opsbot process is recorded interrupted with the last
// step the store has of it and what that means for its host, and the
// command that shows the host.
func TestInterruptedSaysLastSeen(t *testing.T) {
	t.Parallel()
	args := func(text string) []byte {
		c, err := commands.Parse(text, commands.Options{Services: []commands.ServiceRef{{Name: "qwen", Host: "gpu1"}}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := commands.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ev := func(step, status, msg string) store.Event {
		return store.Event{Step: step, Status: status, Message: msg}
	}
	deploy := []store.Event{ev("read unit", "done", "steps 3 -> 8"), ev("stop", "started", "stopping"), ev("stop", "done", "inactive"),
		ev("clear GPUs", "done", "4 GPUs clear"), ev("write unit", "started", "writing"), ev("write unit", "done", "written, daemon reloaded"),
		ev("start", "started", "starting"), ev("start", "done", "active (PID 13)")}
	mtp := store.Job{Command: "mtp steps 8 qwen", Service: "qwen", Status: store.Running, Args: args("mtp steps 8 qwen")}
	cases := []struct {
		name string
		job  store.Job
		evs  []store.Event
		want string
	}{
		{"never started", store.Job{Command: "mtp steps 8 qwen", Service: "qwen", Status: store.Queued}, nil,
			"it had not started, so its host was not changed"},
		{"no step recorded", mtp, nil, "no step of it was recorded, so the host may be mid-change: `svc status qwen`"},
		{"after the stop", mtp, deploy[:3], "last seen: stop: inactive; the service may be stopped, its unit unchanged: `svc status qwen`"},
		{"inside the write", mtp, deploy[:5],
			"last seen: write unit: writing; the unit may be the previous or the new text (a write is whole or not at all), and the service stopped: `svc status qwen`"},
		{"after the start", mtp, deploy, "last seen: start: active (PID 13); the host may run the new unit: `svc status qwen`"},
		{"rolling back", mtp, append(append([]store.Event(nil), deploy...), ev("write unit", "started", "writing the previous unit"),
			ev("write unit", "done", "written"), ev("start", "done", "active (PID 14)")),
			"last seen: start: active (PID 14); the host may run the new unit or the previous one (it was rolling back): `svc status qwen`"},
		{"a restart", store.Job{Command: "svc restart qwen", Service: "qwen", Status: store.Running, Args: args("svc restart qwen")},
			[]store.Event{ev("stop", "done", "inactive"), ev("start", "done", "active (PID 9)")},
			"last seen: start: active (PID 9); the service may be starting or serving: `svc status qwen`"},
		{"a read", store.Job{Command: "gpu status", Status: store.Running, Args: args("gpu status")},
			[]store.Event{ev("check GPUs", "started", "reading nvidia-smi on gpu1\nand on gpu2")},
			"last seen: check GPUs: reading nvidia-smi on gpu1; it changes nothing on its host"},
	}
	for _, c := range cases {
		if got := lastSeen(c.job, c.evs); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	if got := interruptedWhy(mtp, deploy); got != store.InterruptedMessage+"; last seen: start: active (PID 13); the host may run the new unit: `svc status qwen`" {
		t.Errorf("recorded as %q", got)
	}
	j := mtp
	j.ID, j.Error = 7, interruptedWhy(mtp, deploy)
	if got, want := interruptedNotice(j), "⚠️ #7 `mtp steps 8 qwen` was interrupted: the opsbot process running it stopped; "+
		"last seen: start: active (PID 13); the host may run the new unit: `svc status qwen`."; got != want {
		t.Errorf("notice\n got %q\nwant %q", got, want)
	}
}
