// Package systemdtest boots a real systemd for tests: /lib/systemd/systemd as PID 1 of fresh
// pid, mount, UTS and cgroup namespaces, in a cgroup of its own, sharing the machine's network
// namespace. Inside, only journald (volatile storage, under the private /run) and an OpenSSH sshd
// run, the sshd as a unit on a free 127.0.0.1 port with a host key and an authorized key of the
// test's, so the host is reached over SSH like any other. Root logs in (systemctl needs it).
//
// What it never touches: the namespace mounts its own tmpfs on /run, /tmp, /var/tmp, /var/log,
// /var/lib/systemd and /root (systemd-tmpfiles empties /tmp at boot: without its own tmpfs that
// would be the machine's), binds /etc read-only, and masks systemd-timesyncd (no NTP packet may
// leave the machine), every timer, ssh.service, postgresql.service and systemd-pstore. Units of
// the test go in /run/systemd/system (UnitDir), a valid unit directory on that private tmpfs.
// Its /dev is its own too: a tmpfs with the machine's null, zero, full, random, urandom and tty
// bound in, a devpts of its own (ptmx links to it), a tmpfs /dev/shm and the fd links; no
// console and no kmsg, so nothing it logs reaches the machine's console or kernel log, and
// journald's /dev/log link is made there, not on the machine.
//
// The host ends with the test: its PID 1 gets SIGKILL (the kernel then kills every process of
// the namespace), and the cleanup checks that no process is left in its cgroup, that the cgroup
// is removed, that the machine's mount table is as it was, and that the machine's /dev (its
// nodes and links), /run/systemd and /tmp/systemd-private-* are as before the boot.
//
// It needs root, unshare(1), systemd, sshd and cgroup v2. Tests skip when the namespaces cannot
// be made, unless OPSBOT_REQUIRE_SYSTEMD=1 makes that a failure (CI sets it).
package systemdtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testrun"
)

// Paths and names on the machine and inside the namespace.
const (
	Systemd = "/lib/systemd/systemd"
	SSHD    = "/usr/sbin/sshd"
	Unshare = "unshare"

	// EnvRequire set to "1" turns a skip (namespaces cannot be made here) into a failure.
	EnvRequire = "OPSBOT_REQUIRE_SYSTEMD"

	// MountDir is where the host's test directory (Host.Dir) appears inside the namespace.
	MountDir = "/run/opsbot-test"
	// UnitDir is where the test's units live inside the namespace.
	UnitDir = "/run/systemd/system"
	// Target is the unit systemd boots into; SSHDUnit is the test's sshd.
	Target   = "opsbot-test.target"
	SSHDUnit = "opsbot-test-sshd.service"
)

// Host is a booted systemd reachable over SSH. Its fields are read-only.
type Host struct {
	Addr           string     // 127.0.0.1:PORT of the sshd
	Host, Port     string     // Addr's parts
	User           string     // login user: root
	Dir            string     // the test directory on the machine, MountDir inside
	HostKey        ssh.Signer // the sshd's ed25519 host key
	KnownHostsLine string     // known_hosts line for Addr
	KnownHostsFile string     // a known_hosts file holding only KnownHostsLine
	ClientSigner   ssh.Signer // key accepted for User
	ClientKeyPEM   []byte     // ClientSigner's private key, OpenSSH PEM
	ClientKeyFile  string     // ClientKeyPEM in a file (mode 0600)

	PID    int           // the namespace's PID 1 (systemd) as the machine sees it
	Cgroup string        // the cgroup v2 directory the namespace lives in, on the machine
	Boot   time.Duration // from the start of unshare to the sshd answering SSH

	cmd     *exec.Cmd
	exited  chan struct{}
	log     *sshdtest.SyncBuffer
	pidNS   string // readlink of /proc/PID/ns/pid
	mounts  []string
	machine []string // machineState before the boot
}

// Start boots systemd with the test's sshd and waits until the sshd answers; the namespace is
// killed and checked on t.Cleanup. It skips (or fails under OPSBOT_REQUIRE_SYSTEMD=1) when the
// machine cannot make the namespaces.
func Start(t testing.TB) *Host {
	t.Helper()
	testrun.Long(t)
	cg, err := Available()
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("systemdtest: a real systemd is required (%s=1): %v", EnvRequire, err)
		}
		t.Skipf("systemdtest: %v", err)
	}
	var last error
	for try := 0; try < 3; try++ {
		h, err := boot(t, cg)
		if err == nil {
			return h
		}
		last = err
	}
	t.Fatalf("systemdtest: %v", last)
	return nil
}

var (
	availOnce sync.Once
	availCG   string
	availErr  error
)

// Available reports whether this machine can boot the namespace, and where cgroup v2 is
// mounted. It checks root, the binaries and that unshare makes the namespaces (once per process).
func Available() (cgroup2 string, err error) {
	availOnce.Do(func() { availCG, availErr = available() })
	return availCG, availErr
}

func available() (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("needs root to make pid, mount and cgroup namespaces")
	}
	for _, p := range []string{Systemd, SSHD} {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
	}
	if _, err := exec.LookPath(Unshare); err != nil {
		return "", fmt.Errorf("unshare: %w", err)
	}
	cg, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(Unshare, "--pid", "--fork", "--mount", "--uts", "--cgroup", "--kill-child=SIGKILL", "true").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cannot make namespaces (unshare --pid --fork --mount --uts --cgroup true): %v: %s", err, bytes.TrimSpace(out))
	}
	return cg, nil
}

// cgroup2Mount is the mount point of the cgroup v2 hierarchy (/sys/fs/cgroup on a unified
// machine, /sys/fs/cgroup/unified on a hybrid one).
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == "cgroup2" {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy mounted")
}

// ownCgroup is this process's cgroup v2 path ("0::" line of /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// bootScript runs as PID 1 of the new namespaces with the test directory as $1. It makes every
// mount private first, so that nothing it mounts reaches the machine, and covers every place
// systemd or journald would write before it starts systemd.
const bootScript = `set -eu
dir=$1
mount --make-rprivate /
mount -t tmpfs -o mode=755 opsbot-test /run
mkdir /run/opsbot-test
mount --bind "$dir" /run/opsbot-test
mount -t tmpfs -o mode=1777 opsbot-test /tmp
mount -t tmpfs -o mode=1777 opsbot-test /var/tmp
mount -t tmpfs -o mode=755 opsbot-test /var/log
mount -t tmpfs -o mode=755 opsbot-test /var/lib/systemd
mount -t tmpfs -o mode=700 opsbot-test /root
mount --bind /etc /etc
mount -o remount,bind,ro /etc
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t proc proc /proc
d=/run/opsbot-dev
mkdir "$d"
mount -t tmpfs -o mode=755,nosuid opsbot-test "$d"
for n in null zero full random urandom tty; do
	touch "$d/$n"
	mount --bind "/dev/$n" "$d/$n"
done
mkdir "$d/pts" "$d/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$d/pts"
ln -s pts/ptmx "$d/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev opsbot-test "$d/shm"
ln -s /proc/self/fd "$d/fd"
ln -s /proc/self/fd/0 "$d/stdin"
ln -s /proc/self/fd/1 "$d/stdout"
ln -s /proc/self/fd/2 "$d/stderr"
mount --move "$d" /dev
rmdir "$d"
u=/run/systemd/system
mkdir -p "$u" /run/systemd/journald.conf.d /run/sshd
printf '[Journal]\nStorage=volatile\n' > /run/systemd/journald.conf.d/opsbot-test.conf
for f in /lib/systemd/system/*.timer /usr/lib/systemd/system/*.timer /etc/systemd/system/*.timer /etc/systemd/system/*/*.timer; do
	[ -e "$f" ] && ln -sf /dev/null "$u/${f##*/}"
done
for n in systemd-timesyncd.service ssh.service sshd.service postgresql.service systemd-pstore.service; do
	ln -sf /dev/null "$u/$n"
done
cp /run/opsbot-test/opsbot-test.target /run/opsbot-test/opsbot-test-sshd.service "$u/"
exec /lib/systemd/systemd --system --unit=opsbot-test.target
`

const targetUnit = `[Unit]
Description=opsbot test host
DefaultDependencies=no
Wants=systemd-journald.service opsbot-test-sshd.service
`

const sshdUnit = `[Unit]
Description=sshd of the opsbot test host
DefaultDependencies=no

[Service]
ExecStart=/usr/sbin/sshd -D -e -f /run/opsbot-test/sshd_config
`

// boot boots the namespace once: it writes the test directory (newHost),
// records the machine's mounts and state, starts the namespace in a cgroup
// of its own and waits up to 20s for its sshd to let the client in. The
// namespace is ended and checked on t.Cleanup, the directory removed; an
// error leaves the namespace stopped (Start then tries again).
func boot(t testing.TB, cg2 string) (*Host, error) {
	dir, err := os.MkdirTemp("", "opsbot-systemd-")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	h, err := newHost(dir)
	if err != nil {
		return nil, err
	}
	if h.mounts, err = mountPoints(); err != nil {
		return nil, err
	}
	h.machine = machineState()
	cgfd, err := h.makeCgroup(cg2)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(cgfd)
	start, err := h.startNamespace(cgfd)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("systemdtest: end the namespace: %v", err)
		}
	})
	if err := h.waitSSH(start, 20*time.Second); err != nil {
		return nil, err
	}
	h.Boot = time.Since(start)
	h.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", h.PID))
	return h, nil
}

// newHost makes the host's keys and picks its port, and writes into dir
// what the namespace reads from MountDir: the host and client keys, the
// authorized key, the sshd's config, the target and sshd units, and a
// known_hosts file.
func newHost(dir string) (*Host, error) {
	h := &Host{User: "root", Dir: dir}
	var err error
	if h.HostKey, _, err = sshdtest.NewKey(filepath.Join(dir, "host_ed25519"), 0o600, false); err != nil {
		return nil, err
	}
	h.ClientKeyFile = filepath.Join(dir, "client_ed25519")
	if h.ClientSigner, h.ClientKeyPEM, err = sshdtest.NewKey(h.ClientKeyFile, 0o600, false); err != nil {
		return nil, err
	}
	port, err := sshdtest.FreePort()
	if err != nil {
		return nil, err
	}
	h.Host, h.Port = "127.0.0.1", strconv.Itoa(port)
	h.Addr = net.JoinHostPort(h.Host, h.Port)
	files := map[string]string{
		"authorized_keys": string(ssh.MarshalAuthorizedKey(h.ClientSigner.PublicKey())),
		"sshd_config":     sshdConfig(port),
		Target:            targetUnit,
		SSHDUnit:          sshdUnit,
	}
	h.KnownHostsLine = fmt.Sprintf("[%s]:%s %s", h.Host, h.Port, bytes.TrimSpace(ssh.MarshalAuthorizedKey(h.HostKey.PublicKey())))
	files["known_hosts"] = h.KnownHostsLine + "\n"
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	h.KnownHostsFile = filepath.Join(dir, "known_hosts")
	return h, nil
}

// makeCgroup makes h.Cgroup, a cgroup of its own below this process's, and
// opens it; the caller closes the descriptor returned.
func (h *Host) makeCgroup(cg2 string) (int, error) {
	own, err := ownCgroup()
	if err != nil {
		return -1, err
	}
	var suffix [4]byte
	rand.Read(suffix[:])
	h.Cgroup = filepath.Join(cg2, own, "opsbot-systemd-"+hex.EncodeToString(suffix[:]))
	if err := os.Mkdir(h.Cgroup, 0o755); err != nil {
		return -1, fmt.Errorf("make cgroup %s: %w", h.Cgroup, err)
	}
	cgfd, err := syscall.Open(h.Cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(h.Cgroup)
		return -1, fmt.Errorf("open cgroup %s: %w", h.Cgroup, err)
	}
	return cgfd, nil
}

// startNamespace starts unshare with bootScript in the cgroup cgfd and
// returns when it started; h.exited closes when it exits. It returns the
// time it started at.
func (h *Host) startNamespace(cgfd int) (time.Time, error) {
	h.log = &sshdtest.SyncBuffer{}
	cmd := exec.Command(Unshare, "--pid", "--fork", "--mount", "--uts", "--cgroup", "--kill-child=SIGKILL",
		"/bin/sh", "-c", bootScript, "boot", h.Dir)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	cmd.Stdout, cmd.Stderr = h.log, h.log
	// Its own cgroup from the first instruction; SIGKILL when this process dies (unshare's
	// --kill-child then kills the namespace's PID 1).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: cgfd, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		os.Remove(h.Cgroup)
		return start, fmt.Errorf("start %s: %w", Unshare, err)
	}
	h.cmd, h.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(h.exited) }()
	return start, nil
}

// waitSSH polls until the namespace's PID 1 is seen and its sshd answers
// SSH with the host key and lets the client in. It fails when the
// namespace ends, and once within has passed since start (then stopping
// it, saying what the namespace shows).
func (h *Host) waitSSH(start time.Time, within time.Duration) error {
	deadline := start.Add(within)
	for {
		select {
		case <-h.exited:
			return fmt.Errorf("the namespace ended during boot: %s", h.log.String())
		default:
		}
		if h.PID == 0 {
			h.PID = child(h.cmd.Process.Pid)
		}
		if h.PID != 0 && sshdtest.Banner(h.Addr) && h.sshOK() {
			return nil
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("sshd did not answer on %s within %s of the boot; %s", h.Addr, within, h.diagnose())
			h.stop()
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sshdConfig(port int) string {
	return fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %[2]s/host_ed25519
PidFile %[2]s/sshd.pid
AuthorizedKeysFile %[2]s/authorized_keys
AllowUsers root
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
PrintMotd no
MaxSessions 100
MaxStartups 100
Subsystem sftp internal-sftp
`, port, MountDir)
}

// sshOK reports whether the sshd at Addr has our host key and lets the client in: the port may
// have been taken by someone else between freePort and the boot.
func (h *Host) sshOK() bool {
	c, err := ssh.Dial("tcp", h.Addr, h.ClientConfig())
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ClientConfig is an SSH client config for User with ClientSigner that accepts only HostKey.
func (h *Host) ClientConfig() *ssh.ClientConfig {
	return &ssh.ClientConfig{User: h.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(h.ClientSigner)},
		HostKeyCallback: ssh.FixedHostKey(h.HostKey.PublicKey()), HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
		Timeout: 5 * time.Second}
}

// Run runs a shell command line inside the namespace through nsenter (not over SSH), for the
// test's own setup and checks; stdout and stderr are returned together.
func (h *Host) Run(script string) (string, error) {
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(h.PID), "-m", "-p", "-C", "-u", "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in the namespace of PID %d: %s: %w", h.PID, script, err)
	}
	return string(out), nil
}

// diagnose says what the namespace shows when the sshd did not come up.
func (h *Host) diagnose() string {
	if h.PID == 0 {
		return "no PID 1 was seen; unshare wrote: " + h.log.String()
	}
	out, _ := h.Run("systemctl --no-pager status " + SSHDUnit + " 2>&1; journalctl --no-pager -n 30 2>&1")
	return "inside: " + out + "; unshare wrote: " + h.log.String()
}

// child is the PID of unshare's forked child (the namespace's PID 1), 0 while there is none.
func child(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// stop kills the namespace's PID 1 (and with it every process of the namespace), waits for
// unshare, and checks that no process of the namespace is left, that its cgroup can be removed
// and that the machine's mount table did not change.
func (h *Host) stop() error {
	if h.cmd == nil {
		return nil
	}
	var errs []error
	if h.PID == 0 {
		h.PID = child(h.cmd.Process.Pid)
	}
	if h.PID != 0 {
		syscall.Kill(h.PID, syscall.SIGKILL)
	}
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
		errs = append(errs, errors.New("unshare did not exit within 10s of SIGKILL to the namespace's PID 1"))
	}
	h.cmd = nil
	// The kernel kills the rest of the namespace when its PID 1 dies; they leave the cgroup as
	// they exit.
	deadline := time.Now().Add(10 * time.Second)
	for populated(h.Cgroup) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := procs(h.Cgroup); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes left in %s: %v", h.Cgroup, left))
	}
	if h.pidNS != "" {
		if left := inPIDNamespace(h.pidNS); len(left) > 0 {
			errs = append(errs, fmt.Errorf("processes left in pid namespace %s: %v", h.pidNS, left))
		}
	}
	if err := removeTree(h.Cgroup); err != nil {
		errs = append(errs, err)
	}
	if now, err := mountPoints(); err != nil {
		errs = append(errs, err)
	} else if added := minus(now, h.mounts); len(added) > 0 {
		errs = append(errs, fmt.Errorf("mounts left on the machine: %v", added))
	}
	if gone, added := minus(h.machine, machineState()), minus(machineState(), h.machine); len(gone)+len(added) > 0 {
		errs = append(errs, fmt.Errorf("the machine's /dev, /run/systemd or /tmp/systemd-private-* changed: gone %v, added %v", gone, added))
	}
	return errors.Join(errs...)
}

// machineState lists what a systemd sharing the machine's /dev, /run or /tmp would change
// there: /dev's entries with their types and modes (device numbers, link targets), but not
// what other processes of the machine make on their own (terminals in /dev/pts, segments in
// /dev/shm); everything under /run/systemd; the names of /tmp/systemd-private-* (PrivateTmp=).
func machineState() []string {
	var out []string
	filepath.WalkDir("/dev", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/dev/pts" || p == "/dev/shm" || p == "/dev/mqueue") {
			out = append(out, p+" dir")
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		line := fmt.Sprintf("%s %v", p, fi.Mode())
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode()&(os.ModeDevice|os.ModeCharDevice) != 0 {
			line += fmt.Sprintf(" %d", st.Rdev)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	filepath.WalkDir("/run/systemd", func(p string, d os.DirEntry, err error) error {
		if err == nil {
			out = append(out, p+" "+d.Type().String())
		}
		return nil
	})
	private, _ := filepath.Glob("/tmp/systemd-private-*")
	out = append(out, private...)
	slices.Sort(out)
	return out
}

// Stopped reports whether the namespace is gone: its PID 1 exited and its cgroup was removed.
func (h *Host) Stopped() bool {
	_, err := os.Stat(h.Cgroup)
	return h.cmd == nil && errors.Is(err, os.ErrNotExist)
}

func populated(cg string) bool {
	b, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
	return err == nil && bytes.Contains(b, []byte("populated 1"))
}

// procs lists the PIDs (as the machine sees them) in cgroup cg and below.
func procs(cg string) []int {
	var pids []int
	filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

func inPIDNamespace(ns string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && l == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeTree removes cgroup directories bottom-up (rmdir: a cgroup holds no files to delete).
func removeTree(cg string) error {
	var dirs []string
	filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// mountPoints lists the machine's mount points (this process's mount namespace).
func mountPoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var ps []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			ps = append(ps, f[4])
		}
	}
	return ps, nil
}

// minus is the multiset a - b.
func minus(a, b []string) []string {
	left := slices.Clone(b)
	var out []string
	for _, x := range a {
		if i := slices.Index(left, x); i >= 0 {
			left = slices.Delete(left, i, i+1)
			continue
		}
		out = append(out, x)
	}
	return out
}
