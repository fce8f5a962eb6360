package remote_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
)

// checkFunc is a remote.Hold made of a function.
type checkFunc func() error

func (f checkFunc) Check() error { return f() }

// TestHoldLostSendsNothing: on a host guarded by a hold whose check fails,
// Run and WriteFileAtomic send nothing (not even a connection is made) and
// say why; with a check that passes, they run as usual.
func TestHoldLostSendsNothing(t *testing.T) {
	tg := labTarget(t, startLab(t))
	p := tg.pool(t, nil)
	h := mustHost(t, p, tg.host)
	lost := errors.New("lease renewed 31s ago")
	g := h.Guard(checkFunc(func() error { return lost }))
	if _, err := g.Run(testkit.Context(t, 30*time.Second), nil, "touch", "/tmp/hold-test"); !errors.Is(err, remote.ErrHoldLost) || !errors.Is(err, lost) {
		t.Fatalf("Run with a lost hold: %v; want ErrHoldLost and the reason", err)
	}
	name := filepath.Join("/etc/systemd/system", "hold-test.service")
	if err := g.WriteFileAtomic(testkit.Context(t, 30*time.Second), name, []byte("[Unit]\n"), 0o644); !errors.Is(err, remote.ErrHoldLost) {
		t.Fatalf("WriteFileAtomic with a lost hold: %v; want ErrHoldLost", err)
	}
	if n := p.Dials(); n != 0 {
		t.Fatalf("%d connections made with a lost hold, want 0", n)
	}
	held := h.Guard(checkFunc(func() error { return nil }))
	if out, err := held.Run(testkit.Context(t, 30*time.Second), nil, "echo", "held"); err != nil || string(out.Stdout) != "held\n" {
		t.Fatalf("Run with the hold: %q %v", out.Stdout, err)
	}
	if _, err := held.ReadFile(testkit.Context(t, 30*time.Second), name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused write left %s behind: %v", name, err)
	}
}
