package systemd

import (
	"strings"
	"testing"
)

func TestDiagnose(t *testing.T) {
	t.Parallel()
	sglangOOM := []string{
		"[2026-12-02 18:00:01 TP0] Load weight begin. avail mem=3.20 GB",
		"[2026-12-02 18:00:02 TP1] Scheduler hit an exception: Traceback (most recent call last):",
		`  File "/opt/sglang/.venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2914, in run_scheduler_process`,
		"    raise RuntimeError(",
		"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
		"",
		"[2026-12-02 18:00:02] Received sigquit from a child process. It usually means the child failed.",
		"sglang-qwen.service: Main process exited, code=exited, status=1/FAILURE",
		"sglang-qwen.service: Failed with result 'exit-code'.",
		"sglang-qwen.service: Scheduled restart job, restart counter is at 2.",
	}
	for _, tc := range []struct {
		name   string
		lines  []string
		cause  string
		line   string // substring of the decisive line
		inHint string
	}{
		{"sglang not enough memory", sglangOOM, CauseGPUMemoryHeld, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "reap"},
		{"sglang unbalanced", []string{"Traceback (most recent call last):", "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes."},
			CauseGPUMemoryHeld, "memory capacity is unbalanced", ""},
		{"vllm free memory", []string{"ERROR [core.py] EngineCore failed to start.", "Traceback (most recent call last):",
			"(EngineCore_DP0 pid=12) ValueError: Free memory on device cuda:0 (3.10/79.65 GiB) on startup is less than desired GPU memory utilization (0.90, 71.69 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
			"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"},
			CauseGPUMemoryHeld, "Free memory on device cuda:0", ""},
		{"cuda oom", []string{"Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."}, CauseGPUMemoryHeld, "CUDA out of memory", ""},
		{"unrecognized", []string{"usage: launch_server.py [-h] ...", "launch_server.py: error: unrecognized arguments: --speculative-num-stpes 10"}, CauseBadArgument, "unrecognized arguments: --speculative-num-stpes", "flag"},
		{"argument", []string{"launch_server.py: error: argument --tp: invalid int value: 'four'"}, CauseBadArgument, "error: argument --tp", ""},
		{"invalid choice", []string{"vllm: error: argument --dtype: invalid choice: 'f16'"}, CauseBadArgument, "invalid choice", ""},
		{"ambiguous", []string{"launch_server.py: error: ambiguous option: --speculative-num could match --speculative-num-steps, --speculative-num-draft-tokens"}, CauseBadArgument, "ambiguous option", ""},
		{"nonetype", []string{"Traceback (most recent call last):", `  File "server_args.py", line 900, in __post_init__`,
			"TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'", "sglang-qwen.service: Main process exited, code=exited, status=1/FAILURE"},
			CauseCrash, "TypeError: unsupported operand", "--speculative-eagle-topk and --speculative-num-draft-tokens with --speculative-num-steps"},
		{"bus error", []string{"Fatal Python error: Bus error", "", "Thread 0x00007f (most recent call first):"}, CauseShmFull, "Fatal Python error: Bus error", "/dev/shm"},
		{"port", []string{"[2026-12-02 18:00:00] ERROR: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use"}, CausePortInUse, "address already in use", "port"},
		{"generic crash: the last exception line", []string{"Traceback (most recent call last):", `  File "<frozen runpy>", line 198, in _run_module_as_main`,
			"torch.OutOfMemoryError: CUDA error: an illegal memory access was encountered",
			"CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."},
			CauseCrash, "torch.OutOfMemoryError: CUDA error: an illegal memory access was encountered", "crashed"},
		{"vllm attribute error", []string{"Traceback (most recent call last):", "AttributeError: 'NoneType' object has no attribute 'get_hidden_size'"}, CauseCrash, "AttributeError:", "crashed"},
		{"traceback without exception line", []string{"x", "Traceback (most recent call last):", `  File "a.py", line 1`}, CauseCrash, "Traceback (most recent call last):", ""},
		{"latest known wins", []string{"launch_server.py: error: unrecognized arguments: --x", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."}, CauseGPUMemoryHeld, "Not enough memory", ""},
		{"known beats later exception", []string{"Traceback (most recent call last):", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "Traceback (most recent call last):", "KeyError: 'x'"}, CauseGPUMemoryHeld, "Not enough memory", ""},
		{"nothing known", []string{"Started SGLang.", "The server is fired up and ready to roll!"}, "", "", ""},
		{"exception without traceback is not a crash", []string{"ValueError: just a log line"}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Diagnose(tc.lines)
			if d.Cause != tc.cause || !strings.Contains(d.Line, tc.line) || !strings.Contains(d.Hint, tc.inHint) {
				t.Fatalf("Diagnose = %+v, want cause %q line ~%q hint ~%q", d, tc.cause, tc.line, tc.inHint)
			}
			if tc.cause == "" && (d.Line != "" || d.Known()) {
				t.Fatalf("unknown cause with line %q", d.Line)
			}
		})
	}
}

// On GPUs seen clear just before the start, an out-of-memory line blames the
// settings with the remedy that fits the line and the engine; "unbalanced"
// (something took memory since) and causes other than memory stay as they are.
func TestOnClearGPUs(t *testing.T) {
	t.Parallel()
	capture := "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 9.49 GiB. GPU 0 has a total capacity of 79.65 GiB of which 9.07 GiB is free. Process 1048 has 0.49 GiB memory in use. Process 1050 has 70.58 GiB memory in use."
	for _, tc := range []struct {
		name, engine string
		lines        []string
		cause        string
		inHint       []string
		notInHint    string
	}{
		{"sglang graphs", "sglang", []string{capture}, CauseSettingsDoNotFit, []string{"fewer steps", "--mem-fraction-static", "--cuda-graph-max-bs", "PIDs the line names"}, "reap"},
		{"engine unknown", "", []string{capture}, CauseSettingsDoNotFit, []string{"--cuda-graph-max-bs"}, "reap"},
		{"vllm cuda oom", "vllm", []string{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."}, CauseSettingsDoNotFit, []string{"--gpu-memory-utilization", "--max-num-seqs"}, "--cuda-graph-max-bs"},
		{"sglang no room", "sglang", []string{"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."}, CauseSettingsDoNotFit, []string{"raise it", "--tp"}, "reap"},
		{"vllm utilization", "vllm", []string{"ValueError: Free memory on device cuda:0 (70.10/79.19 GiB) on startup is less than desired GPU memory utilization (0.95, 75.23 GiB)."}, CauseSettingsDoNotFit, []string{"lower it"}, "reap"},
		{"unbalanced", "sglang", []string{"RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes."}, CauseGPUMemoryHeld, []string{"reap"}, "settings"},
		{"bad argument", "sglang", []string{"launch_server.py: error: unrecognized arguments: --x"}, CauseBadArgument, []string{"flag"}, "settings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Diagnose(tc.lines).OnClearGPUs(tc.engine)
			if d.Cause != tc.cause || d.Line != strings.TrimSpace(tc.lines[0]) {
				t.Fatalf("got %+v, want cause %s quoting the line", d, tc.cause)
			}
			for _, w := range tc.inHint {
				if !strings.Contains(d.Hint, w) {
					t.Errorf("hint %q lacks %q", d.Hint, w)
				}
			}
			if strings.Contains(d.Hint, tc.notInHint) {
				t.Errorf("hint %q has %q", d.Hint, tc.notInHint)
			}
		})
	}
}
