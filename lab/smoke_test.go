package lab

import (
	"testing"

	"github.com/opsbot/opsbot/lab/sshsuite"
)

func TestSSHSuite(t *testing.T) {
	t.Parallel()
	l := startLab(t, fastOpts())
	c := dialHost(t, l, "gpu1")
	sshsuite.Run(t, func(t *testing.T) sshsuite.Runner { return c })
}
