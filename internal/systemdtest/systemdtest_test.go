package systemdtest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/internal/sshdtest"
)

// run runs cmd over SSH as the host's user and returns stdout; a failure ends the test.
func run(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	return string(out)
}

// tree is a listing of dir: every entry's path and mode, and with times each file's size and
// modification time. A directory's own time is left out: other processes on the machine lock
// files in /etc (useradd, usermod), which touches it without changing any file.
func tree(t *testing.T, dir string, times bool) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil && (fi.IsDir() || !times) {
			out = append(out, fmt.Sprintf("%s %v", p, fi.Mode()))
		} else if err == nil {
			out = append(out, fmt.Sprintf("%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func diff(a, b []string) (gone, added []string) {
	in := func(xs []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	for _, x := range a {
		if !mb[x] {
			gone = append(gone, x)
		}
	}
	for _, x := range b {
		if !ma[x] {
			added = append(added, x)
		}
	}
	return gone, added
}

// TestBootIsolated boots systemd and checks what the package promises: only journald and the
// test's sshd run, only that sshd listens, timers and timesyncd are masked, journald keeps its
// journal under the private /run, the namespace's /tmp and /dev are its own; and after the test
// the machine's /tmp (an old file systemd-tmpfiles would delete), /var/log and /etc are unchanged
// (its /dev, /run/systemd and /tmp/systemd-private-* are compared by the host's clean-up),
// the sshd no longer answers, and no process or cgroup of the namespace is left.
func TestBootIsolated(t *testing.T) {
	if _, err := Available(); err != nil && os.Getenv(EnvRequire) != "1" {
		t.Skipf("systemdtest: %v", err)
	}
	sentinel, err := os.CreateTemp("", "opsbot-systemdtest-sentinel-")
	if err != nil {
		t.Fatal(err)
	}
	sentinel.WriteString("kept\n")
	sentinel.Close()
	defer os.Remove(sentinel.Name())
	old := time.Now().Add(-40 * 24 * time.Hour)
	if err := os.Chtimes(sentinel.Name(), old, old); err != nil {
		t.Fatal(err)
	}
	// What systemd and journald would write: the journal, new files in /var/log, the machine's
	// identity and systemd's configuration in /etc. (Other processes of the machine may grow
	// their own logs, or add users to /etc/passwd, meanwhile: those are not compared.)
	snapshot := func() []string {
		s := append(tree(t, "/var/log/journal", true), tree(t, "/var/log", false)...)
		s = append(s, tree(t, "/etc/systemd", true)...)
		for _, f := range []string{"/etc/machine-id", "/etc/hostname", "/etc/adjtime", "/etc/localtime", "/etc/resolv.conf"} {
			s = append(s, tree(t, f, true)...)
		}
		return s
	}
	before := snapshot()

	var h *Host
	t.Run("inside", func(t *testing.T) {
		h = Start(t)
		t.Logf("boot to sshd answering: %v", h.Boot.Round(time.Millisecond))
		c, err := ssh.Dial("tcp", h.Addr, h.ClientConfig())
		if err != nil {
			t.Fatalf("dial %s: %v", h.Addr, err)
		}
		defer c.Close()

		if got := run(t, c, "id -un; cat /proc/1/comm"); got != "root\nsystemd\n" {
			t.Fatalf("user and PID 1: %q, want root and systemd", got)
		}
		services := strings.Fields(run(t, c, "systemctl list-units --type=service --state=active --no-legend --plain | awk '{print $1}'"))
		if strings.Join(services, " ") != SSHDUnit+" systemd-journald.service" {
			t.Errorf("active services %v, want only %s and systemd-journald.service", services, SSHDUnit)
		}
		if timers := strings.TrimSpace(run(t, c, "systemctl list-units --type=timer --all --no-legend --plain --state=active")); timers != "" {
			t.Errorf("active timers: %s", timers)
		}
		for _, u := range []string{"systemd-timesyncd.service", "apt-daily.timer", "ssh.service"} {
			if got := strings.TrimSpace(run(t, c, "systemctl show -p LoadState --value "+u)); got != "masked" {
				t.Errorf("%s LoadState %q, want masked", u, got)
			}
		}
		// Every listening socket of the namespace's processes (ss names only those it can see).
		for _, l := range strings.Split(strings.TrimSpace(run(t, c, "ss -Htulnp")), "\n") {
			if strings.Contains(l, "users:") && !(strings.Contains(l, `"sshd"`) && strings.Contains(l, "127.0.0.1:"+h.Port+" ")) {
				t.Errorf("a process of the namespace listens besides the test's sshd: %s", l)
			}
		}
		if got := run(t, c, "cat /proc/self/cgroup | grep '^0::'"); got != "0::/system.slice/"+SSHDUnit+"\n" {
			t.Errorf("session cgroup %q, want the sshd unit's", got)
		}
		if got := run(t, c, "ls -d /run/log/journal/*/ | wc -l; findmnt -n -o FSTYPE /var/log; findmnt -n -o FSTYPE /tmp; findmnt -n -o OPTIONS /etc | tr , '\\n' | grep -x ro"); got != "1\ntmpfs\ntmpfs\nro\n" {
			t.Errorf("journal in /run, tmpfs on /var/log and /tmp, /etc read-only: got %q", got)
		}
		// Its /dev is its own: journald's /dev/log link is made there.
		var machinePTS syscall.Stat_t
		if err := syscall.Stat("/dev/pts", &machinePTS); err != nil {
			t.Fatal(err)
		}
		want := "tmpfs\ndevpts\n/run/systemd/journal/dev-log\nnodes\n"
		if got := run(t, c, "stat -f -c %T /dev /dev/pts; readlink /dev/log; test -c /dev/null && test -c /dev/urandom && echo nodes"); got != want {
			t.Errorf("a private /dev (tmpfs, a devpts, journald's /dev/log, the device nodes): got %q, want %q", got, want)
		}
		if got := strings.TrimSpace(run(t, c, "stat -c %d /dev/pts")); got == strconv.FormatUint(machinePTS.Dev, 10) {
			t.Errorf("the namespace's /dev/pts is the machine's (device %s)", got)
		}
		if got := run(t, c, "ls -A /tmp"); strings.Contains(got, filepath.Base(sentinel.Name())) {
			t.Errorf("the namespace sees the machine's /tmp: %q", got)
		}
		if got := run(t, c, "journalctl -u "+SSHDUnit+" -o cat --no-pager | grep -c 'Server listening on 127.0.0.1 port "+h.Port+"'"); got != "1\n" {
			t.Errorf("sshd's start in the journal: %q", got)
		}
	})
	if h == nil {
		return
	}
	if !h.Stopped() {
		t.Errorf("namespace of PID %d not ended after its test (cgroup %s)", h.PID, h.Cgroup)
	}
	if sshdtest.Banner(h.Addr) {
		t.Errorf("sshd still answers on %s", h.Addr)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", h.PID)); err == nil {
		t.Errorf("PID %d (the namespace's systemd) still exists", h.PID)
	}
	if b, err := os.ReadFile(sentinel.Name()); err != nil || string(b) != "kept\n" {
		t.Errorf("the machine's /tmp lost %s: %v %q", sentinel.Name(), err, b)
	}
	if gone, added := diff(before, snapshot()); len(gone)+len(added) > 0 {
		t.Errorf("the machine's /var/log or /etc changed: gone %v, added %v", gone, added)
	}
}

// BenchmarkBoot measures a boot of the namespace until its sshd accepts an SSH login
// (ms-to-sshd/op); the hosts end with the benchmark.
func BenchmarkBoot(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		total += Start(b).Boot
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-sshd/op")
}
