// Package gpu reads NVIDIA GPU memory on a host (nvidia-smi), finds the
// processes that hold it and which GPU each holds (compute apps joined on the
// GPU's UUID, fuser on each device file, ps), tells whose a holder is (Scope:
// a service's unit, an orphan of it, or a neighbour's), reaps engine processes
// that outlived their service (SIGTERM, then SIGKILL; never the GPU daemons)
// and waits until the memory is released.
//
// Everything runs through a Runner as argv lists, no shell. When the service
// lives in a container, give these functions the Runner of the host that sees
// the host PIDs nvidia-smi reports (the Proxmox node).
package gpu

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/opsbot/opsbot/ops/remote"
)

// Runner runs one argv on a host. *remote.Host satisfies it. A non-zero exit
// is reported in Output, not as an error.
type Runner interface {
	Run(ctx context.Context, stdin []byte, argv ...string) (remote.Output, error)
}

// GPU is one GPU's memory as nvidia-smi reports it.
type GPU struct {
	Index    int
	UsedMiB  int    // -1 when not Known
	TotalMiB int    // -1 when nvidia-smi did not report it
	Known    bool   // false when memory.used read [N/A] / [Not Supported]
	UUID     string // stable across hosts (indexes are per host); "" when not queried
}

// App is one compute process nvidia-smi lists (a host PID).
type App struct {
	PID     int
	UsedMiB int    // -1 when [N/A]
	GPUUUID string // the GPU it holds memory on; "" when not queried
}

// Argv of the nvidia-smi queries.
var (
	QueryGPUArgv  = []string{"nvidia-smi", "--query-gpu=index,memory.used,memory.total,uuid", "--format=csv,noheader,nounits"}
	QueryAppsArgv = []string{"nvidia-smi", "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits"}
)

// ParseError is nvidia-smi or ps output that does not parse.
type ParseError struct {
	What string // "nvidia-smi --query-gpu", "ps", ...
	Line int    // 1-based
	Text string
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s output line %d %q: %s", e.What, e.Line, truncate(e.Text), e.Msg)
}

// CommandError is a command that ran and exited non-zero (or was killed).
type CommandError struct {
	Argv       []string
	ExitStatus int
	Signal     string
	Output     string // first line of stderr, else of stdout (nvidia-smi writes errors there)
}

func (e *CommandError) Error() string {
	var b strings.Builder
	b.WriteString(strings.Join(e.Argv, " "))
	if e.Signal != "" {
		fmt.Fprintf(&b, ": killed by signal %s", e.Signal)
	} else {
		fmt.Fprintf(&b, ": exit status %d", e.ExitStatus)
	}
	if e.Output != "" {
		b.WriteString(": " + e.Output)
	}
	if e.ExitStatus == 127 {
		b.WriteString(" (command not found on the host)")
	}
	return b.String()
}

func commandError(argv []string, out remote.Output) *CommandError {
	msg := firstLine(out.Stderr)
	if msg == "" {
		msg = firstLine(out.Stdout)
	}
	return &CommandError{Argv: append([]string(nil), argv...), ExitStatus: out.ExitStatus, Signal: out.Signal, Output: msg}
}

func firstLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return truncate(l)
		}
	}
	return ""
}

// lines yields the non-blank lines of out with their 1-based numbers, trimmed.
func lines(out []byte, f func(n int, line string) error) error {
	n := 0
	for len(out) > 0 {
		var line []byte
		line, out, _ = bytes.Cut(out, []byte{'\n'})
		n++
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
		}
		if err := f(n, s); err != nil {
			return err
		}
	}
	return nil
}

// unknownValue reports the values nvidia-smi prints for a field it cannot read.
func unknownValue(v string) bool {
	switch strings.ToLower(strings.Trim(v, "[] ")) {
	case "n/a", "not supported", "unknown error", "insufficient permissions", "gpu is lost", "gpu requires reset", "":
		return true
	}
	return false
}

// mib parses a memory value ("81234", "81234 MiB"); ok is false for the
// unknown values ([N/A], [Not Supported], ...), err for anything else.
func mib(v string) (n int, ok bool, err error) {
	v = strings.TrimSpace(v)
	if unknownValue(v) {
		return -1, false, nil
	}
	v = strings.TrimSpace(strings.TrimSuffix(v, "MiB"))
	n, err = strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1, false, fmt.Errorf("memory %q is not a number of MiB", truncate(v))
	}
	return n, true, nil
}

// uuidField reads a GPU UUID ("GPU-...", "MIG-..."); an unknown value ([N/A]) is "".
func uuidField(v string) (string, error) {
	switch {
	case unknownValue(v):
		return "", nil
	case strings.HasPrefix(v, "GPU-") || strings.HasPrefix(v, "MIG-"):
		return v, nil
	}
	return "", fmt.Errorf("%q is not a GPU UUID", truncate(v))
}

func fields(line string) []string {
	fs := strings.Split(line, ",")
	for i := range fs {
		fs[i] = strings.TrimSpace(fs[i])
	}
	return fs
}

// ParseGPUs parses `nvidia-smi --query-gpu=index,memory.used,memory.total,uuid
// --format=csv,noheader,nounits`: "0, 81234, 81559, GPU-..." per GPU. Blank lines and a
// header line are skipped, units ("MiB") tolerated, [N/A]-like values read as
// unknown (Known false, -1). A line that is not a GPU row is a *ParseError.
// Two fields (no memory.total) or three (no uuid) are accepted, with TotalMiB
// -1 and UUID "".
func ParseGPUs(out []byte) ([]GPU, error) {
	const what = "nvidia-smi --query-gpu"
	var gs []GPU
	seen := map[int]bool{}
	err := lines(out, func(n int, line string) error {
		f := fields(line)
		if strings.EqualFold(f[0], "index") {
			return nil
		}
		if len(f) < 2 || len(f) > 4 {
			return &ParseError{What: what, Line: n, Text: line, Msg: "want index, memory.used[, memory.total[, uuid]]"}
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return &ParseError{What: what, Line: n, Text: line, Msg: "GPU index is not a number"}
		}
		if seen[idx] {
			return &ParseError{What: what, Line: n, Text: line, Msg: "GPU index repeated"}
		}
		seen[idx] = true
		g := GPU{Index: idx, TotalMiB: -1}
		used, ok, err := mib(f[1])
		if err != nil {
			return &ParseError{What: what, Line: n, Text: line, Msg: err.Error()}
		}
		g.UsedMiB, g.Known = used, ok
		if len(f) == 4 {
			if u, err := uuidField(f[3]); err != nil {
				return &ParseError{What: what, Line: n, Text: line, Msg: err.Error()}
			} else {
				g.UUID = u
			}
		}
		if len(f) >= 3 {
			total, _, err := mib(f[2])
			if err != nil {
				return &ParseError{What: what, Line: n, Text: line, Msg: err.Error()}
			}
			g.TotalMiB = total
		}
		gs = append(gs, g)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gs, nil
}

// ParseApps parses `nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid
// --format=csv,noheader,nounits`: "12345, 80123, GPU-..." per process and GPU (a PID on
// several GPUs appears once per GPU); without gpu_uuid ("12345, 80123") GPUUUID is "". Empty output, blank lines, a header and
// "No running processes found" are no rows; [N/A] memory is -1.
func ParseApps(out []byte) ([]App, error) {
	const what = "nvidia-smi --query-compute-apps"
	var as []App
	err := lines(out, func(n int, line string) error {
		low := strings.ToLower(line)
		if strings.Contains(low, "no running processes found") || strings.Contains(low, "no running compute processes") {
			return nil
		}
		f := fields(line)
		if strings.EqualFold(f[0], "pid") {
			return nil
		}
		if len(f) != 2 && len(f) != 3 {
			return &ParseError{What: what, Line: n, Text: line, Msg: "want pid, used_memory[, gpu_uuid]"}
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 0 {
			return &ParseError{What: what, Line: n, Text: line, Msg: "PID is not a positive number"}
		}
		used, _, err := mib(f[1])
		if err != nil {
			return &ParseError{What: what, Line: n, Text: line, Msg: err.Error()}
		}
		a := App{PID: pid, UsedMiB: used}
		if len(f) == 3 {
			if a.GPUUUID, err = uuidField(f[2]); err != nil {
				return &ParseError{What: what, Line: n, Text: line, Msg: err.Error()}
			}
		}
		as = append(as, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return as, nil
}

// Query reads every GPU's memory on r. A host where nvidia-smi fails (no
// driver, exit 9) or lists no GPU is an error.
func Query(ctx context.Context, r Runner) ([]GPU, error) {
	out, err := r.Run(ctx, nil, QueryGPUArgv...)
	if err != nil {
		return nil, fmt.Errorf("query GPU memory: %w", err)
	}
	if out.ExitStatus != 0 || out.Signal != "" {
		return nil, fmt.Errorf("query GPU memory: %w", commandError(QueryGPUArgv, out))
	}
	gs, err := ParseGPUs(out.Stdout)
	if err != nil {
		return nil, fmt.Errorf("query GPU memory: %w", err)
	}
	if len(gs) == 0 {
		return nil, fmt.Errorf("query GPU memory: nvidia-smi listed no GPU")
	}
	return gs, nil
}

// ComputeApps lists the compute processes nvidia-smi sees on r (host PIDs).
func ComputeApps(ctx context.Context, r Runner) ([]App, error) {
	out, err := r.Run(ctx, nil, QueryAppsArgv...)
	if err != nil {
		return nil, fmt.Errorf("list GPU compute processes: %w", err)
	}
	if out.ExitStatus != 0 || out.Signal != "" {
		return nil, fmt.Errorf("list GPU compute processes: %w", commandError(QueryAppsArgv, out))
	}
	as, err := ParseApps(out.Stdout)
	if err != nil {
		return nil, fmt.Errorf("list GPU compute processes: %w", err)
	}
	return as, nil
}

func truncate(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "..."
}
