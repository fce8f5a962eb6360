package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// exitSignalled is the internal status of a command ended by a signal or a cancelled context.
const exitSignalled = -2

// cmdEnv runs commands on a host: parsed argv against simulated state. The writers are the SSH
// channel; nothing here writes while holding the world lock.
type cmdEnv struct {
	h       *SimHost
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	drop    func() // drops the SSH connection (ssh-drop fault)
	dropped bool
}

// Exec runs one argv on the host without SSH (as `pct exec` or a test would) and returns its
// output and exit status; a context cancellation ends it with status -1.
func (h *SimHost) Exec(ctx context.Context, stdin []byte, argv ...string) (stdout, stderr []byte, exit int) {
	var o, e strings.Builder
	env := &cmdEnv{h: h, stdin: strings.NewReader(string(stdin)), stdout: &o, stderr: &e}
	code := env.run(ctx, argv)
	if code == exitSignalled {
		code = -1
	}
	return []byte(o.String()), []byte(e.String()), code
}

// runString runs a command string as sh -c does: a list of simple commands
// separated by ';' (splitList), one after the other, with the exit status of
// the last; a dropped connection or a signal ends the list.
func (e *cmdEnv) runString(ctx context.Context, cmd string) int {
	var list [][]string
	for _, part := range splitList(cmd) {
		argv, err := SplitShell(part)
		if err != nil { // sh reads the whole string before it runs any of it
			fmt.Fprintf(e.stderr, "sh: 1: Syntax error: %s\n", strings.TrimPrefix(err.(*SyntaxError).Problem, ""))
			return 2
		}
		if len(argv) > 0 {
			list = append(list, argv)
		}
	}
	code := 0
	for _, argv := range list {
		if code = e.run(ctx, argv); code == exitSignalled || e.dropped {
			return code
		}
	}
	return code
}

// run runs argv and returns its exit status (or exitSignalled).
func (e *cmdEnv) run(ctx context.Context, argv []string) int {
	if len(argv) == 0 {
		return 0
	}
	out := bufio.NewWriterSize(e.stdout, 32<<10)
	defer out.Flush()
	sub := &cmdEnv{h: e.h, stdin: e.stdin, stdout: out, stderr: e.stderr, drop: e.drop}
	defer func() { e.dropped = e.dropped || sub.dropped }()
	name := argv[0]
	for _, p := range []string{"/usr/local/sbin/", "/usr/local/bin/", "/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"} {
		if strings.HasPrefix(name, p) {
			name = strings.TrimPrefix(name, p)
			break
		}
	}
	args := argv[1:]
	if err := ctx.Err(); err != nil {
		return exitSignalled
	}
	switch name {
	case "exit":
		if len(args) == 0 {
			return 0
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			fmt.Fprintf(e.stderr, "sh: 1: exit: Illegal number: %s\n", args[0])
			return 2
		}
		return n & 255
	case "true", ":":
		return 0
	case "false":
		return 1
	case "echo":
		nl := true
		if len(args) > 0 && args[0] == "-n" {
			nl, args = false, args[1:]
		}
		out.WriteString(strings.Join(args, " "))
		if nl {
			out.WriteByte('\n')
		}
		return 0
	case "hostname":
		fmt.Fprintln(out, e.h.name)
		return 0
	case "sleep":
		return sub.sleep(ctx, args)
	case "seq":
		return sub.seq(args)
	case "cat":
		return sub.cat(ctx, args)
	case "test", "[":
		if name == "[" {
			if len(args) == 0 || args[len(args)-1] != "]" {
				fmt.Fprintln(e.stderr, "sh: 1: [: missing ]")
				return 2
			}
			args = args[:len(args)-1]
		}
		return sub.test(args)
	case "mv":
		return sub.mv(args)
	case "rm":
		return sub.rm(args)
	case "mkdir":
		return sub.mkdir(args)
	case "ls":
		return sub.ls(args)
	case "timeout":
		return sub.timeout(ctx, args)
	case "systemctl":
		return sub.systemctl(ctx, args)
	case "journalctl":
		return sub.journalctl(args)
	case "nvidia-smi":
		return sub.nvidiaSMI(args)
	case "ps":
		return sub.ps(args)
	case "fuser":
		return sub.fuser(args)
	case "kill":
		return sub.kill(args)
	case "sh", "bash", "dash":
		if len(args) >= 2 && args[0] == "-c" {
			out.Flush()
			return sub.runString(ctx, args[1])
		}
	case "pct":
		if e.h.ct == nil {
			return sub.pct(ctx, args)
		}
	}
	fmt.Fprintf(e.stderr, "sh: 1: %s: not found\n", argv[0])
	return 127
}

func (e *cmdEnv) sleep(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, "sleep: missing operand")
		return 1
	}
	var total time.Duration
	for _, a := range args {
		if a == "infinity" {
			total = 1 << 62
			continue
		}
		d, err := parseSleep(a)
		if err != nil {
			fmt.Fprintf(e.stderr, "sleep: invalid time interval '%s'\n", a)
			return 1
		}
		total += d
	}
	t := time.NewTimer(total)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-ctx.Done():
		return exitSignalled
	}
}

func (e *cmdEnv) seq(args []string) int {
	nums := make([]int64, 0, 3)
	for _, a := range args {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			fmt.Fprintf(e.stderr, "seq: invalid floating point argument: '%s'\n", a)
			return 1
		}
		nums = append(nums, n)
	}
	first, inc, last := int64(1), int64(1), int64(0)
	switch len(nums) {
	case 1:
		last = nums[0]
	case 2:
		first, last = nums[0], nums[1]
	case 3:
		first, inc, last = nums[0], nums[1], nums[2]
	default:
		fmt.Fprintln(e.stderr, "seq: missing operand")
		return 1
	}
	if inc == 0 {
		fmt.Fprintln(e.stderr, "seq: invalid Zero increment value: '0'")
		return 1
	}
	w := e.stdout.(*bufio.Writer)
	var buf [24]byte
	for i := first; inc > 0 && i <= last || inc < 0 && i >= last; i += inc {
		b := strconv.AppendInt(buf[:0], i, 10)
		b = append(b, '\n')
		if _, err := w.Write(b); err != nil {
			return exitSignalled
		}
	}
	return 0
}

func (e *cmdEnv) cat(ctx context.Context, args []string) int {
	w := e.stdout.(*bufio.Writer)
	if len(args) == 0 || len(args) == 1 && args[0] == "-" {
		buf := make([]byte, 32<<10)
		for {
			n, err := e.stdin.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return 1
				}
				w.Flush()
			}
			if err != nil {
				return 0
			}
			if ctx.Err() != nil {
				return exitSignalled
			}
		}
	}
	code := 0
	for _, p := range args {
		b, err := e.h.readAny(p)
		if err != nil {
			fmt.Fprintf(e.stderr, "cat: %s: %s\n", p, errText(err))
			code = 1
			continue
		}
		w.Write(b)
	}
	return code
}

// errText is the coreutils wording of a file error.
func errText(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, errIsDir):
		return "Is a directory"
	case errors.Is(err, os.ErrExist):
		return "File exists"
	case errors.Is(err, os.ErrPermission):
		return "Permission denied"
	}
	s := unwrapPath(err).Error()
	if s != "" {
		s = strings.ToUpper(s[:1]) + s[1:]
	}
	return s
}

var errIsDir = errors.New("is a directory")

func (e *cmdEnv) test(args []string) int {
	neg := false
	if len(args) > 0 && args[0] == "!" {
		neg, args = true, args[1:]
	}
	res := func(b bool) int {
		if b != neg {
			return 0
		}
		return 1
	}
	switch len(args) {
	case 0:
		return res(false)
	case 1:
		return res(args[0] != "")
	case 2:
		op, p := args[0], args[1]
		switch op {
		case "-z":
			return res(p == "")
		case "-n":
			return res(p != "")
		}
		st, err := e.h.statAny(p)
		exists := err == nil
		switch op {
		case "-e", "-r", "-w":
			return res(exists)
		case "-f":
			return res(exists && st.Mode().IsRegular())
		case "-d":
			return res(exists && st.IsDir())
		case "-s":
			return res(exists && st.Size() > 0)
		case "-x":
			return res(exists && (st.IsDir() || st.Mode()&0o111 != 0))
		case "-L", "-h":
			return res(exists && st.Mode()&os.ModeSymlink != 0)
		}
	case 3:
		a, op, b := args[0], args[1], args[2]
		switch op {
		case "=", "==":
			return res(a == b)
		case "!=":
			return res(a != b)
		}
		x, err1 := strconv.Atoi(a)
		y, err2 := strconv.Atoi(b)
		if err1 == nil && err2 == nil {
			switch op {
			case "-eq":
				return res(x == y)
			case "-ne":
				return res(x != y)
			case "-lt":
				return res(x < y)
			case "-le":
				return res(x <= y)
			case "-gt":
				return res(x > y)
			case "-ge":
				return res(x >= y)
			}
		}
	}
	fmt.Fprintf(e.stderr, "sh: 1: test: %s: unexpected operator\n", strings.Join(args, " "))
	return 2
}

func splitFlags(args []string) (flags map[byte]bool, rest []string) {
	flags = map[byte]bool{}
	for i, a := range args {
		if a == "--" {
			return flags, append(rest, args[i+1:]...)
		}
		if len(a) > 1 && a[0] == '-' && !strings.HasPrefix(a, "--") {
			for j := 1; j < len(a); j++ {
				flags[a[j]] = true
			}
			continue
		}
		if strings.HasPrefix(a, "--") {
			switch a {
			case "--force":
				flags['f'] = true
			case "--parents":
				flags['p'] = true
			case "--recursive":
				flags['r'] = true
			}
			continue
		}
		rest = append(rest, a)
	}
	return flags, rest
}

func (e *cmdEnv) mv(args []string) int {
	_, rest := splitFlags(args)
	if len(rest) != 2 {
		fmt.Fprintln(e.stderr, "mv: missing destination file operand")
		return 1
	}
	src, dst := rest[0], rest[1]
	if _, err := os.Lstat(e.h.realPath(src)); err != nil {
		fmt.Fprintf(e.stderr, "mv: cannot stat '%s': %s\n", src, errText(err))
		return 1
	}
	if st, err := os.Stat(e.h.realPath(dst)); err == nil && st.IsDir() {
		dst = path.Join(dst, path.Base(src))
	}
	if err := os.Rename(e.h.realPath(src), e.h.realPath(dst)); err != nil {
		fmt.Fprintf(e.stderr, "mv: cannot move '%s' to '%s': %s\n", src, dst, errText(err))
		return 1
	}
	return 0
}

func (e *cmdEnv) rm(args []string) int {
	fl, rest := splitFlags(args)
	code := 0
	for _, p := range rest {
		rp := e.h.realPath(p)
		st, err := os.Lstat(rp)
		if err != nil {
			if !fl['f'] {
				fmt.Fprintf(e.stderr, "rm: cannot remove '%s': %s\n", p, errText(err))
				code = 1
			}
			continue
		}
		if path.Clean("/"+p) == "/" {
			fmt.Fprintln(e.stderr, "rm: it is dangerous to operate recursively on '/'")
			code = 1
			continue
		}
		if st.IsDir() && !fl['r'] && !fl['R'] {
			fmt.Fprintf(e.stderr, "rm: cannot remove '%s': Is a directory\n", p)
			code = 1
			continue
		}
		if err := os.RemoveAll(rp); err != nil {
			fmt.Fprintf(e.stderr, "rm: cannot remove '%s': %s\n", p, errText(err))
			code = 1
		}
	}
	return code
}

func (e *cmdEnv) mkdir(args []string) int {
	fl, rest := splitFlags(args)
	if len(rest) == 0 {
		fmt.Fprintln(e.stderr, "mkdir: missing operand")
		return 1
	}
	code := 0
	for _, p := range rest {
		var err error
		if fl['p'] {
			err = os.MkdirAll(e.h.realPath(p), 0o755)
		} else {
			err = os.Mkdir(e.h.realPath(p), 0o755)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "mkdir: cannot create directory '%s': %s\n", p, errText(err))
			code = 1
		}
	}
	return code
}

func (e *cmdEnv) ls(args []string) int {
	_, rest := splitFlags(args)
	if len(rest) == 0 {
		rest = []string{"/root"}
	}
	code := 0
	for _, p := range rest {
		st, err := e.h.statAny(p)
		if err != nil {
			fmt.Fprintf(e.stderr, "ls: cannot access '%s': %s\n", p, errText(err))
			code = 2
			continue
		}
		if !st.IsDir() {
			fmt.Fprintln(e.stdout, p)
			continue
		}
		ents, _ := os.ReadDir(e.h.realPath(p))
		var names []string
		for _, en := range ents {
			names = append(names, en.Name())
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintln(e.stdout, n)
		}
	}
	return code
}

func (e *cmdEnv) timeout(ctx context.Context, args []string) int {
	sigName := "TERM"
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		switch {
		case a == "-s" && len(args) > 1:
			sigName, args = args[1], args[2:]
		case strings.HasPrefix(a, "--signal="):
			sigName, args = strings.TrimPrefix(a, "--signal="), args[1:]
		case a == "-k" && len(args) > 1:
			args = args[2:]
		case strings.HasPrefix(a, "--kill-after="), a == "--preserve-status", a == "--foreground", a == "-v", a == "--verbose":
			args = args[1:]
		case a == "--":
			args = args[1:]
			goto done
		default:
			fmt.Fprintf(e.stderr, "timeout: invalid option -- '%s'\n", strings.TrimLeft(a, "-"))
			return 125
		}
	}
done:
	if _, ok := parseSignal(sigName); !ok {
		fmt.Fprintf(e.stderr, "timeout: %s: invalid signal\n", sigName)
		return 125
	}
	if len(args) < 2 {
		fmt.Fprintln(e.stderr, "timeout: missing operand")
		return 125
	}
	d, err := parseSleep(args[0])
	if err != nil {
		fmt.Fprintf(e.stderr, "timeout: invalid time interval '%s'\n", args[0])
		return 125
	}
	inner, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	code := e.run(inner, args[1:])
	if ctx.Err() != nil {
		return exitSignalled
	}
	if inner.Err() != nil && code == exitSignalled {
		return 124
	}
	return code
}

// pct runs the Proxmox container tool on the node.
func (e *cmdEnv) pct(ctx context.Context, args []string) int {
	w := e.h.w
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, "ERROR: no command specified")
		return 255
	}
	ctOf := func(s string) (*container, int) {
		id, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintf(e.stderr, "400 Parameter verification failed.\nvmid: type check ('integer') failed - got '%s'\n", s)
			return nil, 255
		}
		w.lock()
		ct := w.containers[id]
		running := ct != nil && ct.running
		w.unlock()
		if ct == nil {
			fmt.Fprintf(e.stderr, "Configuration file 'nodes/%s/lxc/%d.conf' does not exist\n", e.h.name, id)
			return nil, 255
		}
		if !running {
			fmt.Fprintf(e.stderr, "container '%d' not running!\n", id)
			return nil, 255
		}
		return ct, 0
	}
	switch args[0] {
	case "exec":
		if len(args) < 2 {
			fmt.Fprintln(e.stderr, "400 not enough arguments\npct exec <vmid> [<extra-args>]")
			return 255
		}
		ct, code := ctOf(args[1])
		if ct == nil {
			return code
		}
		rest := args[2:]
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			fmt.Fprintln(e.stderr, "pct exec: interactive shell not supported by the lab")
			return 255
		}
		inner := &cmdEnv{h: ct.host, stdin: e.stdin, stdout: e.stdout, stderr: e.stderr, drop: e.drop}
		c := inner.run(ctx, rest)
		e.dropped = inner.dropped
		if c == 127 {
			return 127
		}
		return c
	case "list":
		w.lock()
		var ids []int
		for id := range w.containers {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		fmt.Fprintln(e.stdout, "VMID       Status     Lock         Name                ")
		for _, id := range ids {
			ct := w.containers[id]
			st := "stopped"
			if ct.running {
				st = "running"
			}
			fmt.Fprintf(e.stdout, "%-10d %-10s %-12s %-20s\n", id, st, "", ct.name)
		}
		w.unlock()
		return 0
	case "status":
		if len(args) < 2 {
			fmt.Fprintln(e.stderr, "400 not enough arguments")
			return 255
		}
		id, err := strconv.Atoi(args[1])
		if err != nil {
			fmt.Fprintf(e.stderr, "400 Parameter verification failed.\nvmid: type check ('integer') failed - got '%s'\n", args[1])
			return 255
		}
		w.lock()
		ct := w.containers[id]
		running := ct != nil && ct.running
		w.unlock()
		if ct == nil {
			fmt.Fprintf(e.stderr, "Configuration file 'nodes/%s/lxc/%d.conf' does not exist\n", e.h.name, id)
			return 255
		}
		if running {
			fmt.Fprintln(e.stdout, "status: running")
		} else {
			fmt.Fprintln(e.stdout, "status: stopped")
		}
		return 0
	}
	fmt.Fprintf(e.stderr, "ERROR: unknown command 'pct %s'\n", args[0])
	return 255
}
