package ops_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/ops"
)

// These run mtp per-load against the lab, whose files are served over real
// SFTP (github.com/pkg/sftp's server, over the lab's SSH) from a directory
// of the real disk: a symbolic link or a directory made there is what
// opsbot's lstat over SFTP sees.

const adaptiveFile = "/etc/sglang/qwen-adaptive.json"

var placeRows = []ops.PerLoadRow{{Concurrency: 1, Steps: 7, Candidates: []int{7}}, {Concurrency: 8, Steps: 5, Candidates: []int{5}}}

// A symbolic link found at services.qwen.adaptive_config is refused before
// anything is written or stopped, in the dry run and in the change: the
// link, what it points to and the unit stay as they were, the engine keeps
// serving, and what the link points to is never read into a diff.
func TestApplyPerLoadRefusesSymlink(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), nil)
	h := r.lab.Host("gpu1")
	const victim = "/etc/sglang/victim.conf"
	if err := h.WriteFile(victim, []byte("VICTIM CONTENT\n")); err != nil {
		t.Fatal(err)
	}
	if err := h.Symlink("victim.conf", adaptiveFile); err != nil {
		t.Fatal(err)
	}
	before, pid := r.unitText(t), h.Unit(r.svc.Unit).MainPID
	for _, dry := range []bool{true, false} {
		ev := &events{}
		res, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", placeRows, dry, ev)
		var nr *ops.NotRegularError
		if !errors.As(err, &nr) || nr.Kind != "a symbolic link" ||
			!strings.Contains(err.Error(), adaptiveFile+" on gpu1 is a symbolic link, not a regular file") || !strings.Contains(err.Error(), "Nothing was changed; remove it on gpu1") {
			t.Fatalf("dry run %v: %v, want a refusal of the symbolic link\n%s", dry, err, ev.text())
		}
		t.Logf("dry run %v: %v", dry, err)
		if res != nil && strings.Contains(strings.Join(res.Details, "\n"), "VICTIM") {
			t.Errorf("dry run %v: the link's target was read into the result:\n%s", dry, strings.Join(res.Details, "\n"))
		}
	}
	fi, err := h.Lstat(adaptiveFile)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link is gone: %v %v", fi, err)
	}
	if b, err := h.ReadFile(victim); err != nil || string(b) != "VICTIM CONTENT\n" {
		t.Errorf("what the link points to changed: %q %v", b, err)
	}
	if b, err := h.ReadFile(adaptiveFile); err != nil || string(b) != "VICTIM CONTENT\n" {
		t.Errorf("the link no longer points to its target: %q %v", b, err)
	}
	if r.unitText(t) != before {
		t.Errorf("the unit changed:\n%s", r.unitText(t))
	}
	if st := h.Unit(r.svc.Unit); st.ActiveState != "active" || st.MainPID != pid {
		t.Errorf("the service was touched: %+v (main pid was %d)", st, pid)
	}
}

// A directory found at services.qwen.adaptive_config is refused the same
// way, and stays a directory with what is in it.
func TestApplyPerLoadRefusesDirectory(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), nil)
	h := r.lab.Host("gpu1")
	if err := h.WriteFile(adaptiveFile+"/keep", []byte("kept\n")); err != nil {
		t.Fatal(err)
	}
	before, pid := r.unitText(t), h.Unit(r.svc.Unit).MainPID
	_, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", placeRows, false, ops.Discard)
	var nr *ops.NotRegularError
	if !errors.As(err, &nr) || nr.Kind != "a directory" || !strings.Contains(err.Error(), "services.qwen.adaptive_config") {
		t.Fatalf("mtp per-load over a directory: %v, want a refusal naming the key", err)
	}
	t.Log(err)
	if fi, err := h.Lstat(adaptiveFile); err != nil || !fi.IsDir() {
		t.Errorf("the directory is gone: %v %v", fi, err)
	}
	if b, err := h.ReadFile(adaptiveFile + "/keep"); err != nil || string(b) != "kept\n" {
		t.Errorf("the directory's file changed: %q %v", b, err)
	}
	if r.unitText(t) != before {
		t.Errorf("the unit changed:\n%s", r.unitText(t))
	}
	if st := h.Unit(r.svc.Unit); st.ActiveState != "active" || st.MainPID != pid {
		t.Errorf("the service was touched: %+v (main pid was %d)", st, pid)
	}
}

// The dry run names every file it would write, in the order it writes
// them, and shows each one's diff: the adaptive config first (new, then
// replaced), then the unit.
func TestApplyPerLoadDryRunListsEveryFile(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), nil)
	h := r.lab.Host("gpu1")
	unitPath := "/etc/systemd/system/" + r.svc.Unit
	for _, old := range []string{"", "{\n  \"1\": {\"candidate_steps\": [3]}\n}\n"} {
		if old != "" {
			if err := h.WriteFile(adaptiveFile, []byte(old)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", placeRows, true, ops.Discard)
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}
		details := strings.Join(res.Details, "\n")
		wantWrite := "write " + adaptiveFile + ", then write " + unitPath + ", daemon-reload"
		if old == "" {
			wantWrite = "write " + adaptiveFile + " (new), then write " + unitPath + ", daemon-reload"
		}
		for _, want := range []string{wantWrite, "+++ b" + adaptiveFile, `+  "8": {"candidate_steps": [5]}`, "+++ b" + unitPath, "+    --speculative-adaptive-config " + adaptiveFile} {
			if !strings.Contains(details, want) {
				t.Errorf("existing file %v: the dry run lacks %q:\n%s", old != "", want, details)
			}
		}
		if old != "" && !strings.Contains(details, `-  "1": {"candidate_steps": [3]}`) {
			t.Errorf("the dry run does not show what the file held:\n%s", details)
		}
		if b, err := h.ReadFile(adaptiveFile); (old == "") != (err != nil) || old != "" && string(b) != old {
			t.Errorf("the dry run changed the file: %q %v", b, err)
		}
	}
}

// Should services.qwen.adaptive_config name the unit's own file (config
// check refuses that; this is the pipeline's own guard), mtp per-load
// refuses before anything is written.
func TestApplyPerLoadRefusesTheUnitsPath(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	var unitPath string
	r := newRig(t, labOpts(), func(c *ops.Config) {
		s := c.Services["qwen"]
		unitPath = "/etc/systemd/system/" + s.Unit
		s.AdaptiveConfig = unitPath
		c.Services["qwen"] = s
	})
	before, pid := r.unitText(t), r.lab.Host("gpu1").Unit(r.svc.Unit).MainPID
	for _, dry := range []bool{true, false} {
		_, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", placeRows, dry, ops.Discard)
		if err == nil || !strings.Contains(err.Error(), "services.qwen.adaptive_config "+unitPath+" is one of "+r.svc.Unit+"'s own files on gpu1") ||
			!strings.Contains(err.Error(), "Nothing was changed") {
			t.Fatalf("dry run %v: %v, want a refusal of the unit's path", dry, err)
		}
	}
	if r.unitText(t) != before {
		t.Errorf("the unit changed:\n%s", r.unitText(t))
	}
	if st := r.lab.Host("gpu1").Unit(r.svc.Unit); st.ActiveState != "active" || st.MainPID != pid {
		t.Errorf("the service was touched: %+v (main pid was %d)", st, pid)
	}
}

// onStep runs do once, the first time a step named step starts, in the
// pipeline's own goroutine (a Reporter is called synchronously): a hook
// between two steps.
type onStep struct {
	events
	step string
	do   func()
	done bool
}

func (o *onStep) Report(ev ops.Event) {
	if !o.done && ev.Step == o.step && ev.Status == ops.StepStarted {
		o.done = true
		o.do()
	}
	o.events.Report(ev)
}

// A symbolic link that appears after the change was planned (here while the
// GPUs are cleared, after the stop) is refused right before the write: the
// link and what it points to stay as they were, the unit is unchanged and
// the service serves again.
func TestApplyPerLoadRefusesSymlinkAtTheWrite(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), nil)
	h := r.lab.Host("gpu1")
	const victim = "/etc/sglang/victim.conf"
	if err := h.WriteFile(victim, []byte("VICTIM CONTENT\n")); err != nil {
		t.Fatal(err)
	}
	before := r.unitText(t)
	ev := &onStep{step: "clear GPUs", do: func() {
		if err := h.Symlink("victim.conf", adaptiveFile); err != nil {
			t.Error(err)
		}
	}}
	_, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", placeRows, false, ev)
	var nr *ops.NotRegularError
	if !ev.done || !errors.As(err, &nr) || nr.Kind != "a symbolic link" {
		t.Fatalf("hook ran %v; err %v, want the write refused\n%s", ev.done, err, ev.text())
	}
	t.Log(err)
	if fi, err := h.Lstat(adaptiveFile); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link is gone: %v %v", fi, err)
	}
	if b, err := h.ReadFile(victim); err != nil || string(b) != "VICTIM CONTENT\n" {
		t.Errorf("what the link points to changed: %q %v", b, err)
	}
	if r.unitText(t) != before {
		t.Errorf("the unit changed:\n%s", r.unitText(t))
	}
	if st := h.Unit(r.svc.Unit); st.ActiveState != "active" || !st.Ready {
		t.Errorf("the service does not serve again: %+v", st)
	}
}
