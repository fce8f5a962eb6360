package remote_test

import (
	"testing"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/lab/sshsuite"
)

func TestSuiteLab(t *testing.T) {
	tg := labTarget(t, startLab(t))
	h := mustHost(t, tg.pool(t, nil), "gpu1")
	sshsuite.Run(t, func(*testing.T) sshsuite.Runner { return runner{h} })
}

func TestSuiteOpenSSH(t *testing.T) {
	tg := sshdTarget(t, sshdtest.Start(t))
	p := tg.pool(t, nil)
	h := mustHost(t, p, "local")
	sshsuite.Run(t, func(*testing.T) sshsuite.Runner { return runner{h} })
	if n := p.Dials(); n != 1 {
		t.Errorf("the whole suite made %d connections, want 1", n)
	}
}
