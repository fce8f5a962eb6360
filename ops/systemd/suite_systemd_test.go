package systemd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/systemdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/lab/systemdsuite"
	"github.com/opsbot/opsbot/ops/remote"
)

// suiteRunner adapts *remote.Host to systemdsuite.Runner.
type suiteRunner struct{ h *remote.Host }

func (r suiteRunner) Run(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
	out, err := r.h.Run(ctx, stdin, argv...)
	return out.Stdout, out.Stderr, out.ExitStatus, err
}

func suiteHost(h *remote.Host, unitDir string, leftover func(t *testing.T) string) systemdsuite.Host {
	return systemdsuite.Host{R: suiteRunner{h}, UnitDir: unitDir, Leftover: leftover,
		WriteFile: func(ctx context.Context, p, text string) error { return h.WriteFileAtomic(ctx, p, []byte(text), 0o644) }}
}

// TestSuiteRealSystemd runs the systemd conformance suite against a real systemd 252.
func TestSuiteRealSystemd(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, h := realHost(t)
	leftover := func(t *testing.T) string {
		const u = "suite-leftover.service"
		c := testkit.Context(t, 20*time.Second)
		write(t, c, h, systemdtest.UnitDir+"/"+u, "[Service]\nKillMode=process\n"+
			"ExecStart=/bin/bash -c '(trap \"\" TERM; exec -a sglang::scheduler_TP0 sleep infinity) & exec sleep infinity'\n")
		sh(t, c, h, "systemctl", "daemon-reload")
		return u
	}
	systemdsuite.Run(t, suiteHost(h, systemdtest.UnitDir, leftover))
	t.Logf("suite against systemd 252: %v (boot included)", time.Since(start).Round(time.Millisecond))
}

// TestSuiteLab runs the systemd conformance suite against the lab's emulation, in real time
// (TimeScale 1) so that its timings are systemd's.
func TestSuiteLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	start := time.Now()
	l := labtest.Start(t, lab.Options{TimeScale: 1, LoadTime: time.Second, WarmUp: 100 * time.Millisecond, ReleaseLag: 100 * time.Millisecond})
	h := host(t, labtest.Pool(t, l), "gpu1")
	leftover := func(t *testing.T) string {
		// The lab runs programs it simulates: the engine's scheduler workers are the children
		// that KillMode=process leaves behind (they hold GPU memory). The seeded service is
		// stopped so that the copy has the GPUs.
		const u = "suite-leftover.service"
		c := testkit.Context(t, 20*time.Second)
		sh(t, c, h, "systemctl", "stop", unit)
		text := sh(t, c, h, "cat", "/etc/systemd/system/"+unit)
		write(t, c, h, "/etc/systemd/system/"+u, strings.Replace(text, "[Service]\n", "[Service]\nKillMode=process\n", 1))
		sh(t, c, h, "systemctl", "daemon-reload")
		// Workers outlive the stop only once they hold GPU memory: start it and wait for that.
		sh(t, c, h, "systemctl", "start", u)
		testkit.WaitFor(t, 10*time.Second, "the engine's workers to hold GPU memory", func() bool {
			return len(strings.Fields(sh(t, c, h, "nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"))) > 0
		})
		return u
	}
	systemdsuite.Run(t, suiteHost(h, "/etc/systemd/system", leftover))
	t.Logf("suite against the lab: %v", time.Since(start).Round(time.Millisecond))
}
