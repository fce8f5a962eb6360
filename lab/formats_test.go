package lab

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/internal/testkit"
)

func TestNvidiaSMIFormats(t *testing.T) {
	t.Parallel()
	l := readyLab(t, fastOpts())
	c := dialHost(t, l, "gpu1")
	var b strings.Builder
	for _, argv := range [][]string{
		{"nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"},
		{"nvidia-smi", "--query-gpu=index,uuid,name,memory.used,memory.total,memory.free,utilization.gpu", "--format=csv"},
		{"nvidia-smi", "--query-gpu", "memory.free,index", "--format", "csv,noheader", "-i", "2"},
		{"nvidia-smi", "-L"},
	} {
		b.WriteString("$ " + strings.Join(argv, " ") + "\n" + c.must(t, argv...))
	}
	testkit.Golden(t, "nvidia-smi-query.txt", b.String())

	apps := c.must(t, "nvidia-smi", "--query-compute-apps=pid,used_memory,gpu_uuid,process_name", "--format=csv,noheader,nounits")
	// qwen's workers on GPUs 0-3 (0.88 of each), then coder's on GPUs 4-7 (0.85): host PIDs,
	// seen from inside either container.
	line := regexp.MustCompile(`^\d+, (74863|72417), GPU-[0-9a-f-]+, sglang::schedul$`)
	ls := strings.Split(strings.TrimSpace(apps), "\n")
	if len(ls) != 8 {
		t.Fatalf("compute apps:\n%s", apps)
	}
	for i, ln := range ls {
		if !line.MatchString(ln) || strings.Contains(ln, ", 74863, ") != (i < 4) {
			t.Fatalf("compute app line %d %q", i, ln)
		}
	}
	out, _, code := c.run(t, "nvidia-smi", "--query-gpu=index,bogus", "--format=csv")
	if code != 2 || !strings.Contains(out, `Field "bogus" is not a valid field to query.`) {
		t.Fatalf("bad field: %d %q", code, out)
	}
	if tbl := c.must(t, "nvidia-smi"); !strings.Contains(tbl, "74863MiB / 81559MiB") || !strings.Contains(tbl, "sglang::schedul") {
		t.Fatalf("table:\n%s", tbl)
	}
}

func TestShellCommandFormats(t *testing.T) {
	t.Parallel()
	l := readyLab(t, fastOpts())
	c := dialHost(t, l, "gpu1")
	main := itoa(l.Host("gpu1").Unit(qwenUnit).MainPID)
	for _, tc := range []struct {
		argv   []string
		code   int
		stdout string // regexp
		stderr string // regexp
	}{
		{[]string{"hostname"}, 0, `^gpu1\n$`, `^$`},
		{[]string{"systemctl", "show", "-p", "ActiveState", "--property=SubState,NRestarts", "-p", "MainPID", qwenUnit}, 0, `^ActiveState=active\nSubState=running\nNRestarts=0\nMainPID=` + main + `\n$`, `^$`},
		{[]string{"systemctl", "show", "-p", "Id,LoadState,ActiveState,SubState", "nope.service"}, 0, `^Id=nope.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\n$`, `^$`},
		{[]string{"systemctl", "show", "-p", "RestartUSec,Restart,KillMode,StartLimitBurst,ExecMainStartTimestamp", qwenUnit}, 0, `^RestartUSec=5s\nRestart=always\nKillMode=control-group\nStartLimitBurst=5\nExecMainStartTimestamp=\w{3} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n$`, `^$`},
		{[]string{"systemctl", "is-active", qwenUnit}, 0, `^active\n$`, `^$`},
		{[]string{"systemctl", "is-active", "nope"}, 3, `^inactive\n$`, `^$`},
		{[]string{"systemctl", "start", "nope"}, 5, `^$`, `Unit nope.service not found`},
		{[]string{"journalctl", "-u", qwenUnit, "-n", "1", "-o", "short-iso", "--no-pager"}, 0, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 gpu1 python3\[` + main + `\]: .*The server is fired up and ready to roll!\n$`, `^$`},
		{[]string{"journalctl", "-u", "nope.service"}, 0, `^-- No entries --\n$`, `^$`},
		{[]string{"journalctl", "-u", qwenUnit, "--since", "@99999999999", "-o", "cat"}, 0, `^$`, `^$`},
		{[]string{"ps", "-o", "pid=,ppid=,stat=,args=", "-p", main + ",99999"}, 0, `^\s+` + main + `\s+1 Ssl\s+/opt/sglang/.venv/bin/python3 -m sglang.launch_server `, `^$`},
		{[]string{"ps", "-o", "pid=", "-p", "99999"}, 1, `^$`, `^$`},
		{[]string{"cat", "/proc/" + main + "/status"}, 0, `State:\tS \(sleeping\)\n`, `^$`},
		{[]string{"cat", "/nope"}, 1, `^$`, `^cat: /nope: No such file or directory\n$`},
		{[]string{"cat", "/proc/99999/cmdline"}, 1, `^$`, `No such file or directory`},
		{[]string{"test", "-f", "/etc/hostname"}, 0, `^$`, `^$`},
		{[]string{"test", "-d", "/etc/hostname"}, 1, `^$`, `^$`},
		{[]string{"test", "-e", "/proc/" + main}, 0, `^$`, `^$`},
		{[]string{"mkdir", "-p", "/tmp/a/b"}, 0, `^$`, `^$`},
		{[]string{"mv", "/tmp/nope", "/tmp/x"}, 1, `^$`, `^mv: cannot stat '/tmp/nope': No such file or directory\n$`},
		{[]string{"rm", "/tmp/nope"}, 1, `^$`, `^rm: cannot remove '/tmp/nope': No such file or directory\n$`},
		{[]string{"rm", "-f", "/tmp/nope"}, 0, `^$`, `^$`},
		{[]string{"seq", "3"}, 0, `^1\n2\n3\n$`, `^$`},
		{[]string{"seq", "2", "4"}, 0, `^2\n3\n4\n$`, `^$`},
		{[]string{"kill", "-0", main}, 0, `^$`, `^$`},
		{[]string{"kill", "-TERM", "99999"}, 1, `^$`, `^kill: \(99999\) - No such process\n$`},
		{[]string{"kill", "-BOGUS", "1"}, 1, `^$`, `unknown signal`},
		{[]string{"fuser", "/dev/nvidia0"}, 0, `^ \d+$`, `^/dev/nvidia0:m\n$`},
		{[]string{"fuser", "/dev/nope"}, 1, `^$`, `does not exist`},
		{[]string{"echo", "-n", "x"}, 0, `^x$`, `^$`},
		{[]string{"sh", "-c", "exit 3"}, 3, `^$`, `^$`},
		// A list runs each simple command in turn, as sh does; a quoted ';' is a character.
		{[]string{"sh", "-c", "echo a; echo 'b;c' \"d;\"; false"}, 1, `^a\nb;c d;\n$`, `^$`},
		{[]string{"sh", "-c", "false;echo x"}, 0, `^x\n$`, `^$`},
		{[]string{"sh", "-c", "echo a; echo 'open"}, 2, `^$`, `Syntax error`},
		{[]string{"/usr/bin/true"}, 0, `^$`, `^$`},
		{[]string{"vi"}, 127, `^$`, `^sh: 1: vi: not found\n$`},
	} {
		out, errs, code := c.run(t, tc.argv...)
		if code != tc.code || !regexp.MustCompile(tc.stdout).MatchString(out) || !regexp.MustCompile(tc.stderr).MatchString(errs) {
			t.Errorf("%q: exit %d stdout %q stderr %q; want exit %d stdout ~ %s stderr ~ %s", tc.argv, code, out, errs, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestWriteConfig(t *testing.T) {
	t.Parallel()
	l := startLab(t, fastOpts())
	dir := t.TempDir()
	p, err := l.WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	top := l.Topology()
	for _, want := range []string{
		"store: {path: \"" + filepath.Join(dir, "opsbot.db") + "\"}",
		"ssh: {key_file: \"" + filepath.Join(dir, "id_ed25519") + "\", known_hosts: \"" + filepath.Join(dir, "known_hosts") + "\"}",
		"  gpu1: {addr: \"" + l.Host("gpu1").Addr() + "\", user: root}",
		"  pve: {addr: \"" + l.Host("pve").Addr() + "\", user: root}",
		"  qwen: {host: gpu1, unit: sglang-qwen.service, url: \"" + top.Services[0].URL + "\", engine: sglang, proxmox: {node: pve, vmid: 129}, gpus: [0,1,2,3]}",
		"  coder: {host: gpu2, unit: sglang-coder.service, url: \"" + top.Services[1].URL + "\", engine: sglang, proxmox: {node: pve, vmid: 130}, gpus: [4,5,6,7]}",
		"  gpu2: {addr: \"" + l.Host("gpu2").Addr() + "\", user: root}",
		"default_service: qwen",
		"auth: {default_role: admin}",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %q:\n%s", want, b)
		}
	}
	kh, _ := os.ReadFile(filepath.Join(dir, "known_hosts"))
	if string(kh) != string(top.KnownHosts) || !strings.HasPrefix(string(kh), "[127.0.0.1]:") {
		t.Errorf("known_hosts %q", kh)
	}
	if st, err := os.Stat(filepath.Join(dir, "id_ed25519")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", st, err)
	}
	if d := l.Describe(); !strings.Contains(d, "gpu1") || !strings.Contains(d, top.Services[0].URL) ||
		!strings.Contains(d, "service coder: "+top.Services[1].URL+" on gpu2 (sglang, LXC 130 on pve)") {
		t.Errorf("Describe:\n%s", d)
	}
}
