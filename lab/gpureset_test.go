package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// nvidia-smi's reset and persistence mode behave as the driver does: the
// reset is refused while a process uses the GPU or persistence mode holds
// it, `-pm 0 -i N` releases one GPU, the reset frees memory held by no
// process and leaves the other GPUs alone.
func TestGPUResetAndPersistence(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Faults = []Fault{{Name: "stuck-memory", GPU: 2}}
	l := readyLab(t, opts)
	pve := dialHost(t, l, "pve")
	// Stop qwen: its engine on GPU 2 exits and leaves its memory stranded.
	gpu1 := dialHost(t, l, "gpu1")
	gpu1.must(t, "systemctl", "stop", qwenUnit)
	testkit.WaitFor(t, 10*time.Second, "GPU 2 memory stranded", func() bool { return l.GPUResets()[2].StrandedMiB > 0 })
	coderBefore := l.Host("pve").GPUs()[5].UsedMiB

	// Persistence mode holds the device: refused, as the driver does.
	out, _, code := pve.run(t, "nvidia-smi", "--gpu-reset", "-i", "2")
	if code != 255 || !strings.Contains(out, "GPU 00000000:58:00.0: In use by another client") {
		t.Fatalf("reset with persistence on: exit %d\n%s", code, out)
	}
	// Inside the container: no permission.
	if out, _, code := gpu1.run(t, "nvidia-smi", "-pm", "0", "-i", "2"); code != 4 || !strings.Contains(out, "Insufficient Permissions") {
		t.Fatalf("-pm 0 in the container: exit %d\n%s", code, out)
	}
	out = pve.must(t, "nvidia-smi", "-pm", "0", "-i", "2")
	if !strings.Contains(out, "Disabled persistence mode for GPU 00000000:58:00.0.") {
		t.Fatalf("-pm 0 -i 2:\n%s", out)
	}
	if rs := l.GPUResets(); rs[2].Persistence || !rs[1].Persistence || !rs[3].Persistence {
		t.Fatalf("persistence after -pm 0 -i 2: %+v", rs)
	}
	out = pve.must(t, "nvidia-smi", "-r", "-i", "2")
	if !strings.Contains(out, "GPU 00000000:58:00.0 was successfully reset.") {
		t.Fatalf("reset:\n%s", out)
	}
	if g := l.Host("pve").GPUs()[2]; g.UsedMiB != 0 {
		t.Fatalf("GPU 2 after the reset: %d MiB, want 0", g.UsedMiB)
	}
	if after := l.Host("pve").GPUs()[5].UsedMiB; after != coderBefore || after == 0 {
		t.Fatalf("coder's GPU 5: %d -> %d MiB, want untouched", coderBefore, after)
	}
	pve.must(t, "nvidia-smi", "-pm", "1", "-i", "2")
	if rs := l.GPUResets(); !rs[2].Persistence || rs[2].Resets != 1 || rs[5].Resets != 0 {
		t.Fatalf("after: %+v", rs)
	}
	// A GPU a process uses is refused, persistence off or not.
	pve.must(t, "nvidia-smi", "-pm", "0", "-i", "5")
	if out, _, code := pve.run(t, "nvidia-smi", "--gpu-reset", "-i", "5"); code != 255 || !strings.Contains(out, "In use by another client") {
		t.Fatalf("reset of coder's GPU 5: exit %d\n%s", code, out)
	}
}

// The persistence-held fault: -pm 0 -i N is refused while nvidia-persistenced
// runs; stopping it drops persistence on every GPU and lets the reset go;
// starting it again leaves persistence off (--no-persistence-mode) until set.
func TestPersistenceHeldNeedsTheDaemonStopped(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Faults = []Fault{{Name: "persistence-held", GPU: 1}}
	l := readyLab(t, opts)
	pve := dialHost(t, l, "pve")
	dialHost(t, l, "gpu1").must(t, "systemctl", "stop", qwenUnit)
	testkit.WaitFor(t, 10*time.Second, "GPU 1 released", func() bool { return l.Host("pve").GPUs()[1].UsedMiB == 0 })
	out, _, code := pve.run(t, "nvidia-smi", "-pm", "0", "-i", "1")
	if code != 255 || !strings.Contains(out, "Unable to set persistence mode for GPU 00000000:38:00.0: Unknown Error") {
		t.Fatalf("-pm 0 -i 1: exit %d\n%s", code, out)
	}
	if _, _, code := pve.run(t, "nvidia-smi", "-r", "-i", "1"); code != 255 {
		t.Fatalf("reset while held: exit %d, want 255", code)
	}
	pve.must(t, "systemctl", "stop", persistencedUnit)
	for _, r := range l.GPUResets() {
		if r.Persistence {
			t.Fatalf("GPU %d keeps persistence with the daemon stopped", r.Index)
		}
	}
	pve.must(t, "nvidia-smi", "-r", "-i", "1")
	pve.must(t, "systemctl", "start", persistencedUnit)
	if out := pve.must(t, "nvidia-smi", "-pm", "1", "-i", "1"); !strings.Contains(out, "Enabled persistence mode for GPU 00000000:38:00.0.") {
		t.Fatalf("-pm 1 -i 1 through the daemon:\n%s", out)
	}
}
