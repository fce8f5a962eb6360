package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// replaceUnit writes text to NAME.tmp and posix-renames it over name, as
// ops/remote's atomic write does.
func replaceUnit(c *testClient, name, text string) error {
	sc, err := sftp.NewClient(c.c)
	if err != nil {
		return err
	}
	defer sc.Close()
	f, err := sc.OpenFile(name+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(text)); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return sc.PosixRename(name+".tmp", name)
}

// Each ssh-drop stage drops the connection once, at its point: upload before
// the unit changed, write after the rename took effect, reload after systemd
// reloaded; a second attempt goes through.
func TestSSHDropStages(t *testing.T) {
	t.Parallel()
	path := "/etc/systemd/system/" + qwenUnit
	for _, stage := range []string{"upload", "write", "reload"} {
		t.Run(stage, func(t *testing.T) {
			opts := fastOpts()
			opts.Faults = []Fault{{Name: "ssh-drop", Stage: stage}}
			l := readyLab(t, opts)
			old, err := l.Host("gpu1").ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			changed := strings.Replace(string(old), "--speculative-num-steps 3", "--speculative-num-steps 5", 1)
			if changed == string(old) {
				t.Fatal("the seeded unit has no --speculative-num-steps 3")
			}
			c := dialHost(t, l, "gpu1")
			werr := replaceUnit(c, path, changed)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var rerr error
			if werr == nil {
				_, _, _, rerr = c.Run(ctx, nil, "systemctl", "daemon-reload")
			}
			onDisk, err := l.Host("gpu1").ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c2 := dialHost(t, l, "gpu1")
			reload := showMap(t, c2, qwenUnit, "NeedDaemonReload")["NeedDaemonReload"]
			switch stage {
			case "upload":
				if werr == nil || string(onDisk) != string(old) {
					t.Fatalf("upload: write err %v, unit changed %v; want a dropped connection and the old unit", werr, string(onDisk) != string(old))
				}
			case "write":
				if werr == nil || string(onDisk) != changed || reload != "yes" {
					t.Fatalf("write: err %v, new unit on disk %v, NeedDaemonReload=%s; want a drop after the rename", werr, string(onDisk) == changed, reload)
				}
			case "reload":
				if werr != nil || rerr == nil || string(onDisk) != changed || reload != "no" {
					t.Fatalf("reload: write %v, reload %v, NeedDaemonReload=%s; want a drop after systemd reloaded", werr, rerr, reload)
				}
			}
			// Once only: the same steps on the new connection succeed.
			if err := replaceUnit(c2, path, string(old)); err != nil {
				t.Fatalf("second write: %v", err)
			}
			if _, _, code := c2.run(t, "systemctl", "daemon-reload"); code != 0 {
				t.Fatalf("second daemon-reload: exit %d", code)
			}
		})
	}
}

// A WriteHold stalls the unit's replace after the temporary file is written,
// until released; then the rename goes ahead.
func TestWriteHold(t *testing.T) {
	t.Parallel()
	l := readyLab(t, fastOpts())
	path := "/etc/systemd/system/" + qwenUnit
	old, err := l.Host("gpu1").ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hold := l.HoldUnitWrite()
	t.Cleanup(hold.Release)
	c := dialHost(t, l, "gpu1")
	done := make(chan error, 1)
	go func() { done <- replaceUnit(c, path, "[Unit]\nDescription=new\n") }()
	select {
	case <-hold.Reached():
	case err := <-done:
		t.Fatalf("the write finished (%v) without being held", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the write was not held within 10s")
	}
	if b, err := l.Host("gpu1").ReadFile(path); err != nil || string(b) != string(old) {
		t.Fatalf("the unit changed while held (%v)", err)
	}
	if b, err := l.Host("gpu1").ReadFile(path + ".tmp"); err != nil || string(b) != "[Unit]\nDescription=new\n" {
		t.Fatalf("the temporary file is not complete while held: %q %v", b, err)
	}
	hold.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, err := l.Host("gpu1").ReadFile(path); err != nil || string(b) != "[Unit]\nDescription=new\n" {
		t.Fatalf("after release: %q %v", b, err)
	}
}
