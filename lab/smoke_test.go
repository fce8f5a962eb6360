package lab

import (
	"testing"

	"github.com/opsbot/opsbot/lab/sshsuite"
)

func TestSSHSuite(t *testing.T) {
	l := startLab(t, fastOpts())
	c := dialHost(t, l, "gpu1")
	sshsuite.Run(t, func(t *testing.T) sshsuite.Runner { return c })
}
