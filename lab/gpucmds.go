package lab

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var gpuFields = map[string]bool{"index": true, "uuid": true, "name": true, "memory.used": true, "memory.total": true, "memory.free": true,
	"utilization.gpu": true, "pci.bus_id": true, "count": true}
var appFields = map[string]bool{"pid": true, "used_memory": true, "used_gpu_memory": true, "gpu_uuid": true, "process_name": true, "name": true, "gpu_name": true, "gpu_bus_id": true}

func (e *cmdEnv) nvidiaSMI(args []string) int {
	var qgpu, qapps, qremap, format, pm string
	var ids map[int]bool
	list, reset := false, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func(prefix string) (string, bool) {
			if v, ok := strings.CutPrefix(a, prefix+"="); ok {
				return v, true
			}
			if a == prefix && i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		if v, ok := val("--query-gpu"); ok {
			qgpu = v
		} else if v, ok := val("--query-compute-apps"); ok {
			qapps = v
		} else if v, ok := val("--query-remapped-rows"); ok {
			qremap = v
		} else if v, ok := val("--format"); ok {
			format = v
		} else if v, ok := val("--id"); ok {
			ids = parseIDs(v)
		} else if v, ok := val("-i"); ok {
			ids = parseIDs(v)
		} else if v, ok := val("-pm"); ok {
			pm = v
		} else if v, ok := val("--persistence-mode"); ok {
			pm = v
		} else if a == "-r" || a == "--gpu-reset" {
			reset = true
		} else if a == "-L" || a == "--list-gpus" {
			list = true
		} else {
			fmt.Fprintf(e.stdout, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
			return 2
		}
	}
	switch {
	case reset && pm != "":
		fmt.Fprintf(e.stdout, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
		return 2
	case reset:
		return e.gpuReset(ids)
	case pm != "":
		return e.setPersistence(pm, ids)
	}
	noheader, nounits, csv := false, false, false
	for _, f := range strings.Split(format, ",") {
		switch strings.TrimSpace(f) {
		case "csv":
			csv = true
		case "noheader":
			noheader = true
		case "nounits":
			nounits = true
		}
	}
	if (qgpu != "" || qapps != "" || qremap != "") && !csv {
		fmt.Fprintln(e.stdout, `Option "--format" must be specified with "csv".`)
		return 2
	}
	w := e.h.w
	w.lock()
	type gsnap struct {
		g    gpu
		used int
	}
	var gs []gsnap
	for _, g := range w.gpus {
		if ids == nil || ids[g.index] {
			gs = append(gs, gsnap{*g, w.used(g.index)})
		}
	}
	type app struct {
		pid, mib int
		g        gpu
		name     string
	}
	var apps []app
	for _, p := range w.visible(nil) {
		for gi, m := range p.mem {
			if m > 0 && (ids == nil || ids[gi]) {
				apps = append(apps, app{pid: p.hostPID, mib: m, g: *w.gpuByIndex(gi), name: p.comm()})
			}
		}
	}
	w.unlock()
	sort.Slice(apps, func(i, j int) bool {
		if apps[i].g.index != apps[j].g.index {
			return apps[i].g.index < apps[j].g.index
		}
		return apps[i].pid < apps[j].pid
	})
	unit := func(v, u string) string {
		if nounits {
			return v
		}
		return v + " " + u
	}
	hdrUnit := func(f, u string) string {
		if nounits || u == "" {
			return f
		}
		return f + " [" + u + "]"
	}
	switch {
	case qremap != "":
		return e.remappedRows(qremap, gs2(gs, func(g gsnap) gpu { return g.g }), noheader)
	case list:
		for _, g := range gs {
			fmt.Fprintf(e.stdout, "GPU %d: %s (UUID: %s)\n", g.g.index, g.g.name, g.g.uuid)
		}
		return 0
	case qgpu != "":
		fields := splitFields(qgpu)
		for _, f := range fields {
			if !gpuFields[f] && !isHealthField(f) {
				fmt.Fprintf(e.stdout, "Field \"%s\" is not a valid field to query.\n\n", f)
				return 2
			}
		}
		if !noheader {
			var hs []string
			for _, f := range fields {
				u := map[string]string{"memory.used": "MiB", "memory.total": "MiB", "memory.free": "MiB", "utilization.gpu": "%"}[f]
				if hu, ok := healthHeaderUnit[f]; ok {
					u = hu
				}
				hs = append(hs, hdrUnit(f, u))
			}
			fmt.Fprintln(e.stdout, strings.Join(hs, ", "))
		}
		for _, g := range gs {
			var vs []string
			for _, f := range fields {
				switch f {
				case "index":
					vs = append(vs, strconv.Itoa(g.g.index))
				case "uuid":
					vs = append(vs, g.g.uuid)
				case "name":
					vs = append(vs, g.g.name)
				case "memory.used":
					vs = append(vs, unit(strconv.Itoa(g.used), "MiB"))
				case "memory.total":
					vs = append(vs, unit(strconv.Itoa(g.g.total), "MiB"))
				case "memory.free":
					vs = append(vs, unit(strconv.Itoa(max(g.g.total-g.used, 0)), "MiB"))
				case "utilization.gpu":
					vs = append(vs, unit(strconv.Itoa(g.g.util), "%"))
				case "pci.bus_id":
					vs = append(vs, busID(g.g.index))
				case "count":
					vs = append(vs, strconv.Itoa(len(gs)))
				default:
					vs = append(vs, healthField(f, g.g, nounits))
				}
			}
			fmt.Fprintln(e.stdout, strings.Join(vs, ", "))
		}
		return 0
	case qapps != "":
		fields := splitFields(qapps)
		for _, f := range fields {
			if !appFields[f] {
				fmt.Fprintf(e.stdout, "Field \"%s\" is not a valid field to query.\n\n", f)
				return 2
			}
		}
		if !noheader {
			var hs []string
			for _, f := range fields {
				if f == "used_memory" || f == "used_gpu_memory" {
					hs = append(hs, hdrUnit("used_gpu_memory", "MiB"))
				} else {
					hs = append(hs, f)
				}
			}
			fmt.Fprintln(e.stdout, strings.Join(hs, ", "))
		}
		for _, a := range apps {
			var vs []string
			for _, f := range fields {
				switch f {
				case "pid":
					vs = append(vs, strconv.Itoa(a.pid))
				case "used_memory", "used_gpu_memory":
					vs = append(vs, unit(strconv.Itoa(a.mib), "MiB"))
				case "gpu_uuid":
					vs = append(vs, a.g.uuid)
				case "process_name", "name":
					vs = append(vs, a.name)
				case "gpu_name":
					vs = append(vs, a.g.name)
				case "gpu_bus_id":
					vs = append(vs, busID(a.g.index))
				}
			}
			fmt.Fprintln(e.stdout, strings.Join(vs, ", "))
		}
		return 0
	}
	// The plain table.
	o := e.stdout
	fmt.Fprintf(o, "%s\n", time.Now().UTC().Format("Mon Jan  2 15:04:05 2006"))
	fmt.Fprintln(o, "+-----------------------------------------------------------------------------------------+")
	fmt.Fprintln(o, "| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |")
	fmt.Fprintln(o, "|-----------------------------------------+------------------------+----------------------+")
	fmt.Fprintln(o, "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
	fmt.Fprintln(o, "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
	fmt.Fprintln(o, "|=========================================+========================+======================|")
	cell := func(v string, n int) string {
		if len(v) < n {
			v += strings.Repeat(" ", n-len(v))
		}
		return v
	}
	for _, g := range gs {
		fmt.Fprintf(o, "|%s|%s|%s|\n", cell(fmt.Sprintf(" %3d  %-28s  %s", g.g.index, g.g.name, map[bool]string{true: "On", false: "Off"}[g.g.hw.persistence]), 41), cell(fmt.Sprintf(" %s Off", busID(g.g.index)), 24), cell(fmt.Sprintf("%21d", g.g.hw.eccUncVol), 22))
		mem := fmt.Sprintf("%dMiB / %dMiB", g.used, g.g.total)
		fmt.Fprintf(o, "|%s|%s|%s|\n", cell(fmt.Sprintf(" N/A   34C    P0            %3dW /  700W", 70+g.g.util*6), 41), cell(fmt.Sprintf("%23s", mem), 24), cell(fmt.Sprintf("%8s      Default", fmt.Sprintf("%d%%", g.g.util)), 22))
		fmt.Fprintln(o, "|                                         |                        |             Disabled |")
		fmt.Fprintln(o, "+-----------------------------------------+------------------------+----------------------+")
	}
	fmt.Fprintln(o)
	fmt.Fprintln(o, "+-----------------------------------------------------------------------------------------+")
	fmt.Fprintln(o, "| Processes:                                                                              |")
	fmt.Fprintln(o, "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |")
	fmt.Fprintln(o, "|        ID   ID                                                               Usage      |")
	fmt.Fprintln(o, "|=========================================================================================|")
	if len(apps) == 0 {
		fmt.Fprintln(o, "|  No running processes found                                                             |")
	}
	for _, a := range apps {
		fmt.Fprintf(o, "|  %3d   N/A  N/A  %15d      C   %-34s %7dMiB |\n", a.g.index, a.pid, a.name, a.mib)
	}
	fmt.Fprintln(o, "+-----------------------------------------------------------------------------------------+")
	return 0
}

func gs2[T any](in []T, f func(T) gpu) []gpu {
	out := make([]gpu, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// remappedRows is `nvidia-smi --query-remapped-rows=FIELDS --format=csv[,noheader]`.
func (e *cmdEnv) remappedRows(q string, gs []gpu, noheader bool) int {
	fields := splitFields(q)
	for _, f := range fields {
		if !remappedRowFields[f] {
			fmt.Fprintf(e.stdout, "Field \"%s\" is not a valid field to query.\n\n", f)
			return 2
		}
	}
	if !noheader {
		fmt.Fprintln(e.stdout, strings.Join(fields, ", "))
	}
	for _, g := range gs {
		var vs []string
		for _, f := range fields {
			vs = append(vs, remappedRowField(f, g))
		}
		fmt.Fprintln(e.stdout, strings.Join(vs, ", "))
	}
	return 0
}

func splitFields(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseIDs(s string) map[int]bool {
	m := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			m[n] = true
		}
	}
	return m
}

// ps supports -e/-A, -o FORMAT (repeatable), -p PIDS, --no-headers, and the BSD `aux` / `-ef` forms.
func (e *cmdEnv) ps(args []string) int {
	var cols []string
	var pids map[int]bool
	headers := true
	style := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-e" || a == "-A" || a == "ax" || a == "-ax":
		case a == "aux" || a == "-aux" || a == "auxww" || a == "-ef" || a == "-eF":
			style = a
		case a == "--no-headers" || a == "--no-heading":
			headers = false
		case a == "-o" || a == "-eo" || a == "-Ao" || a == "-p" || a == "--pid" || a == "-q":
			if i+1 >= len(args) {
				fmt.Fprintln(e.stderr, "error: option requires an argument")
				return 1
			}
			i++
			if strings.HasSuffix(a, "o") {
				cols = append(cols, strings.Split(args[i], ",")...)
			} else {
				if pids == nil {
					pids = map[int]bool{}
				}
				for _, f := range strings.FieldsFunc(args[i], func(r rune) bool { return r == ',' || r == ' ' }) {
					n, err := strconv.Atoi(f)
					if err != nil || n <= 0 {
						fmt.Fprintf(e.stderr, "error: process ID list syntax error\n")
						return 1
					}
					pids[n] = true
				}
			}
		case strings.HasPrefix(a, "-eo"):
			cols = append(cols, strings.Split(a[3:], ",")...)
		case strings.HasPrefix(a, "-o"):
			cols = append(cols, strings.Split(a[2:], ",")...)
		case strings.HasPrefix(a, "-p"):
			pids = parseIDs(a[2:])
		default:
			fmt.Fprintf(e.stderr, "error: unsupported option %q\n", a)
			return 1
		}
	}
	w := e.h.w
	w.lock()
	var ps []ProcInfo
	var stats []string
	var starts []time.Time
	for _, p := range w.visible(e.h.ct) {
		if pids != nil && !pids[p.nsPID(e.h.ct)] {
			continue
		}
		ps = append(ps, w.info(p, e.h.ct))
		stats = append(stats, p.stat)
		starts = append(starts, p.started)
	}
	w.unlock()
	for i := range stats {
		if ps[i].State != "S" || stats[i] == "" {
			st := ps[i].State
			if len(stats[i]) > 1 {
				st += stats[i][1:]
			}
			stats[i] = st
		}
	}
	o := e.stdout
	switch style {
	case "aux", "-aux", "auxww":
		fmt.Fprintln(o, "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND")
		for i, p := range ps {
			fmt.Fprintf(o, "%-8s %7d %4.1f %4.1f %6d %5d %-8s %-4s %5s %6s %s\n", "root", p.PID, 0.0, 0.1, 10240, 2048, "?", stats[i], starts[i].UTC().Format("15:04"), "0:00", strings.Join(p.Args, " "))
		}
		return boolExit(pids == nil || len(ps) > 0)
	case "-ef", "-eF":
		fmt.Fprintln(o, "UID          PID    PPID  C STIME TTY          TIME CMD")
		for i, p := range ps {
			fmt.Fprintf(o, "%-8s %7d %7d  0 %5s %-8s %8s %s\n", "root", p.PID, p.PPID, starts[i].UTC().Format("15:04"), "?", "00:00:00", strings.Join(p.Args, " "))
		}
		return boolExit(pids == nil || len(ps) > 0)
	}
	if len(cols) == 0 {
		cols = []string{"pid", "tty", "time", "cmd"}
	}
	type col struct {
		name, header string
		width        int
		left         bool
	}
	var cs []col
	anyHeader := false
	for _, c := range cols {
		name, hdr, custom := strings.Cut(c, "=")
		name = strings.TrimSpace(name)
		def := map[string]col{
			"pid": {header: "PID", width: 7}, "ppid": {header: "PPID", width: 7}, "stat": {header: "STAT", width: 4, left: true},
			"state": {header: "S", width: 1, left: true}, "s": {header: "S", width: 1, left: true}, "args": {header: "COMMAND", left: true},
			"cmd": {header: "CMD", left: true}, "command": {header: "COMMAND", left: true}, "comm": {header: "COMMAND", width: 15, left: true},
			"ucomm": {header: "COMMAND", width: 15, left: true}, "user": {header: "USER", width: 8, left: true}, "uid": {header: "UID", width: 5},
			"tty": {header: "TT", width: 8, left: true}, "time": {header: "TIME", width: 8}, "etimes": {header: "ELAPSED", width: 7}, "rss": {header: "RSS", width: 5},
			"cgroup": {header: "CGROUP", left: true},
		}
		d, ok := def[name]
		if !ok {
			fmt.Fprintf(e.stderr, "error: unknown user-defined format specifier \"%s\"\n", name)
			return 1
		}
		d.name = name
		if custom {
			d.header = hdr
		}
		if d.header != "" {
			anyHeader = true
		}
		if custom && hdr == "" {
			d.width = max(d.width, 0)
		}
		cs = append(cs, d)
	}
	if headers && anyHeader {
		var hs []string
		for i, c := range cs {
			hs = append(hs, pad(c.header, c.width, c.left, i == len(cs)-1))
		}
		fmt.Fprintln(o, strings.TrimRight(strings.Join(hs, " "), " "))
	}
	for i, p := range ps {
		var vs []string
		for j, c := range cs {
			var v string
			switch c.name {
			case "pid":
				v = strconv.Itoa(p.PID)
			case "ppid":
				v = strconv.Itoa(p.PPID)
			case "stat":
				v = stats[i]
			case "state", "s":
				v = p.State
			case "args", "cmd", "command":
				v = strings.Join(p.Args, " ")
				if p.State == "Z" {
					v = "[" + comm(p.Args) + "] <defunct>"
				}
			case "comm", "ucomm":
				v = comm(p.Args)
			case "user":
				v = "root"
			case "uid":
				v = "0"
			case "tty":
				v = "?"
			case "time":
				v = "00:00:00"
			case "etimes":
				v = strconv.Itoa(int(time.Since(starts[i]).Seconds()))
			case "rss":
				v = "2048"
			case "cgroup":
				v = "0::" + p.Cgroup
			}
			vs = append(vs, pad(v, c.width, c.left, j == len(cs)-1))
		}
		fmt.Fprintln(o, strings.Join(vs, " "))
	}
	return boolExit(len(ps) > 0)
}

func boolExit(ok bool) int {
	if ok {
		return 0
	}
	return 1
}

func comm(args []string) string {
	p := &proc{args: args}
	return p.comm()
}

func pad(s string, width int, left, last bool) string {
	if len(s) >= width {
		return s
	}
	if left {
		if last {
			return s
		}
		return s + strings.Repeat(" ", width-len(s))
	}
	return strings.Repeat(" ", width-len(s)) + s
}

// nvidiaDevices is what the literal glob /dev/nvidia* expands to, in glob (byte) order.
func (h *SimHost) nvidiaDevices() []string {
	out := []string{"/dev/nvidia-uvm"}
	for _, g := range h.w.gpus {
		out = append(out, fmt.Sprintf("/dev/nvidia%d", g.index))
	}
	out = append(out, "/dev/nvidiactl")
	sort.Strings(out)
	return out
}

// fuser is psmisc's: `fuser [-k] [-SIGNAL] [-v] [-s] FILE...`.
func (e *cmdEnv) fuser(args []string) int {
	kill, verbose, silent := false, false, false
	sig := syscall.SIGKILL
	var files []string
	for _, a := range args {
		switch {
		case a == "-k" || a == "--kill":
			kill = true
		case a == "-v" || a == "--verbose":
			verbose = true
		case a == "-s" || a == "--silent":
			silent = true
		case a == "-m" || a == "-M" || a == "-u" || a == "-w" || a == "-i":
		case a == "-l" || a == "--list-signals":
			fmt.Fprintln(e.stdout, "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH POLL PWR SYS")
			return 0
		case len(a) > 1 && a[0] == '-':
			s, ok := parseSignal(a[1:])
			if !ok {
				fmt.Fprintf(e.stderr, "fuser: Unknown option: %s\n", a)
				return 1
			}
			sig = s
		default:
			if a == "/dev/nvidia*" {
				files = append(files, e.h.nvidiaDevices()...)
			} else {
				files = append(files, a)
			}
		}
	}
	if len(files) == 0 {
		fmt.Fprintln(e.stderr, "No process specification given")
		return 1
	}
	type hit struct {
		file string
		pids []int
		cmds []string
	}
	var hits []hit
	w := e.h.w
	for _, f := range files {
		if _, err := e.h.statAny(f); err != nil {
			fmt.Fprintf(e.stderr, "Specified filename %s does not exist.\n", f)
			continue
		}
		w.lock()
		hh := hit{file: f}
		for _, p := range w.visible(e.h.ct) {
			if p.gpuFDs && usesDevice(p, f) {
				hh.pids = append(hh.pids, p.nsPID(e.h.ct))
				hh.cmds = append(hh.cmds, p.comm())
			}
		}
		w.unlock()
		hits = append(hits, hh)
	}
	found := false
	var victims []int
	seen := map[int]bool{}
	if verbose && !silent {
		fmt.Fprintf(e.stderr, "%-20s %-9s %6s %-6s %s\n", "", "USER", "PID", "ACCESS", "COMMAND")
	}
	for _, hh := range hits {
		if len(hh.pids) > 0 {
			found = true
		}
		if !silent {
			if verbose {
				if len(hh.pids) == 0 {
					continue
				}
				for i, pid := range hh.pids {
					label := ""
					if i == 0 {
						label = hh.file + ":"
					}
					fmt.Fprintf(e.stderr, "%-20s %-9s %6d %-6s %s\n", label, "root", pid, "F...m", hh.cmds[i])
				}
			} else {
				fmt.Fprintf(e.stderr, "%s:", hh.file)
				for _, pid := range hh.pids {
					fmt.Fprintf(e.stdout, " %d", pid)
					e.stdout.(interface{ Flush() error }).Flush()
					fmt.Fprint(e.stderr, "m")
				}
				fmt.Fprintln(e.stderr)
			}
		}
		for _, pid := range hh.pids {
			if !seen[pid] {
				seen[pid] = true
				victims = append(victims, pid)
			}
		}
	}
	if kill {
		w.lock()
		for _, pid := range victims {
			if p := w.lookup(e.h.ct, pid); p != nil {
				w.signal(p, sig)
			}
		}
		w.unlock()
	}
	return boolExit(found)
}

// usesDevice says whether a GPU process has device file f open.
func usesDevice(p *proc, f string) bool {
	switch f {
	case "/dev/nvidiactl":
		return true
	case "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools":
		return !p.daemon
	}
	if n, ok := strings.CutPrefix(f, "/dev/nvidia"); ok {
		g, err := strconv.Atoi(n)
		if err != nil {
			return false
		}
		if p.daemon || len(p.mem) == 0 {
			return true
		}
		_, ok := p.mem[g]
		return ok
	}
	return false
}

// kill is procps's /bin/kill: `kill [-SIGNAL | -s SIGNAL | -n NUM] PID...`, `kill -l`.
func (e *cmdEnv) kill(args []string) int {
	sig := syscall.SIGTERM
	var pids []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pids = append(pids, args[i+1:]...)
			i = len(args)
		case a == "-l" || a == "-L" || a == "--list":
			fmt.Fprintln(e.stdout, "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH POLL PWR SYS")
			return 0
		case (a == "-s" || a == "-n" || a == "--signal") && i+1 < len(args):
			s, ok := parseSignal(args[i+1])
			if !ok {
				fmt.Fprintf(e.stderr, "kill: unknown signal: %s\n", args[i+1])
				return 1
			}
			sig = s
			i++
		case len(a) > 1 && a[0] == '-' && len(pids) == 0:
			s, ok := parseSignal(a[1:])
			if !ok {
				fmt.Fprintf(e.stderr, "kill: unknown signal: %s\n", a[1:])
				return 1
			}
			sig = s
		default:
			pids = append(pids, a)
		}
	}
	if len(pids) == 0 {
		fmt.Fprintln(e.stderr, "kill: not enough arguments")
		return 1
	}
	code := 0
	w := e.h.w
	w.lock()
	var errs []string
	for _, s := range pids {
		pid, err := strconv.Atoi(s)
		if err != nil || pid <= 0 {
			errs = append(errs, fmt.Sprintf("kill: failed to parse argument: '%s'", s))
			code = 1
			continue
		}
		p := w.lookup(e.h.ct, pid)
		if p == nil {
			errs = append(errs, fmt.Sprintf("kill: (%d) - No such process", pid))
			code = 1
			continue
		}
		w.signal(p, sig)
	}
	w.unlock()
	for _, m := range errs {
		fmt.Fprintln(e.stderr, m)
	}
	return code
}
