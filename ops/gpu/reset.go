package gpu

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// PersistencedUnit is the unit of NVIDIA's persistence daemon. Stopping it
// drops persistence mode on every GPU of the machine; nvidia-smi -pm sets it
// through the daemon while it runs [nvidia-persistenced(1)].
const PersistencedUnit = "nvidia-persistenced.service"

// PersistenceArgv is `nvidia-smi -pm 0|1 -i N`: persistence mode of one GPU.
func PersistenceArgv(index int, on bool) []string {
	mode := "0"
	if on {
		mode = "1"
	}
	return []string{"nvidia-smi", "-pm", mode, "-i", strconv.Itoa(index)}
}

// ResetArgv is `nvidia-smi --gpu-reset -i N,M`: a reset of exactly those GPUs
// (without -i nvidia-smi resets every GPU; an empty list is refused here).
func ResetArgv(indexes []int) []string {
	ids := make([]string, len(indexes))
	for i, n := range indexes {
		ids[i] = strconv.Itoa(n)
	}
	return []string{"nvidia-smi", "--gpu-reset", "-i", strings.Join(ids, ",")}
}

// SetPersistence runs PersistenceArgv on r, the machine that owns the GPU.
// A refusal (the driver keeps it, no permission) is a *CommandError.
func SetPersistence(ctx context.Context, r Runner, index int, on bool) error {
	argv := PersistenceArgv(index, on)
	out, err := r.Run(ctx, nil, argv...)
	if err != nil {
		return fmt.Errorf("set persistence mode of GPU %d: %w", index, err)
	}
	if out.ExitStatus != 0 || out.Signal != "" {
		return fmt.Errorf("set persistence mode of GPU %d: %w", index, commandError(argv, out))
	}
	return nil
}

// ResetError is a reset nvidia-smi refused or failed: its exit status and
// the lines it printed (which name the GPUs it could not reset and why, or
// the NVLink peers that must be reset with them).
type ResetError struct {
	Argv       []string
	ExitStatus int
	Signal     string
	Lines      []string
}

func (e *ResetError) Error() string {
	what := fmt.Sprintf("exit status %d", e.ExitStatus)
	if e.Signal != "" {
		what = "killed by signal " + e.Signal
	}
	return fmt.Sprintf("%s: %s: %s", strings.Join(e.Argv, " "), what, strings.Join(e.Lines, " "))
}

// Reset runs ResetArgv on r, the machine that owns the GPUs. nvidia-smi
// refuses while any process uses one of them or persistence mode holds it
// [nvidia-smi(1) -r; NVIDIA/NVSentinel 1690]; the refusal is a *ResetError.
func Reset(ctx context.Context, r Runner, indexes []int) error {
	if len(indexes) == 0 {
		return fmt.Errorf("reset GPUs: no GPU named (nvidia-smi would reset every GPU)")
	}
	argv := ResetArgv(indexes)
	out, err := r.Run(ctx, nil, argv...)
	if err != nil {
		return fmt.Errorf("reset GPUs: %w", err)
	}
	if out.ExitStatus == 0 && out.Signal == "" {
		return nil
	}
	var ls []string
	for _, b := range [][]byte{out.Stdout, out.Stderr} {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && len(ls) < 6 {
				ls = append(ls, truncate(l))
			}
		}
	}
	return &ResetError{Argv: argv, ExitStatus: out.ExitStatus, Signal: out.Signal, Lines: ls}
}

// PersistenceQueryArgv reads each GPU's persistence mode.
var PersistenceQueryArgv = []string{"nvidia-smi", "--query-gpu=index,persistence_mode", "--format=csv,noheader"}

// QueryPersistence reads each GPU's persistence mode on r, by index. A GPU
// whose mode reads [N/A] is left out (unknown).
func QueryPersistence(ctx context.Context, r Runner) (map[int]bool, error) {
	out, err := r.Run(ctx, nil, PersistenceQueryArgv...)
	if err != nil {
		return nil, fmt.Errorf("read persistence mode: %w", err)
	}
	if out.ExitStatus != 0 || out.Signal != "" {
		return nil, fmt.Errorf("read persistence mode: %w", commandError(PersistenceQueryArgv, out))
	}
	m := map[int]bool{}
	err = lines(out.Stdout, func(n int, line string) error {
		f := fields(line)
		if len(f) != 2 {
			return &ParseError{What: "nvidia-smi --query-gpu=index,persistence_mode", Line: n, Text: line, Msg: "want 2 fields"}
		}
		i, err := strconv.Atoi(f[0])
		if err != nil {
			return &ParseError{What: "nvidia-smi --query-gpu=index,persistence_mode", Line: n, Text: line, Msg: "index is not a number"}
		}
		if on := onOff(f[1]); on != nil {
			m[i] = *on
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read persistence mode: %w", err)
	}
	return m, nil
}
