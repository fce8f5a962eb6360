package lab

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var pythonName = regexp.MustCompile(`^python(3(\.\d+)?)?$`)

// engineFlavor says which engine an ExecStart argv launches: "sglang", "vllm" or "".
func engineFlavor(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	base := path.Base(argv[0])
	if base == "vllm" && len(argv) > 1 && argv[1] == "serve" {
		return "vllm"
	}
	if pythonName.MatchString(base) {
		for i := 1; i+1 < len(argv); i++ {
			if argv[i] == "-m" {
				switch argv[i+1] {
				case "sglang.launch_server":
					return "sglang"
				case "vllm.entrypoints.openai.api_server":
					return "vllm"
				}
				return ""
			}
		}
	}
	return ""
}

// Simulated phases of an engine start.
const (
	importTime    = 3 * time.Second         // python imports before the first log line
	failExitDelay = 1 * time.Second         // from a fatal error to the process exit
	shutdownTime  = 1500 * time.Millisecond // graceful shutdown after SIGTERM
)

// engineRun is one start of an engine by a unit: its processes, GPU memory, listener and the
// engine itself. Guarded by world.mu.
type engineRun struct {
	h        *SimHost
	u        *unit
	main     *proc
	flavor   string
	workers  []*proc
	gpus     []int
	s        engSettings
	inst     engInstance
	ln       net.Listener
	srv      *http.Server
	timer    *simTimer
	ready    bool
	alive    bool
	stopping bool
	// keepWorkers: the workers survive the main process (busy in CUDA
	// teardown), as with the orphans fault, for this run only
	// (Lab.RestartLeavingWorkers).
	keepWorkers bool
}

// startProgram runs the unit's ExecStart program in process main (mu held).
func (h *SimHost) startProgram(u *unit, main *proc, argv []string) {
	w := h.w
	if fl := engineFlavor(argv); fl != "" {
		r := &engineRun{h: h, u: u, main: main, flavor: fl, alive: true}
		u.run = r
		main.onSignal = r.onSignal
		main.onExit = append(main.onExit, func(code int, sig syscall.Signal) { r.mainDied() })
		r.timer = w.after(importTime, r.boot)
		return
	}
	switch path.Base(argv[0]) {
	case "nvidia-persistenced":
		h.runPersistenced(main)
	case "true":
		w.after(time.Millisecond, func() { w.exit(main, 0, 0) })
	case "false":
		w.after(time.Millisecond, func() { w.exit(main, 1, 0) })
	case "sleep":
		if len(argv) > 1 && argv[1] != "infinity" {
			if d, err := parseSleep(argv[1]); err == nil {
				w.after(d, func() { w.exit(main, 0, 0) })
			}
		}
	}
	// anything else runs until it is signalled
}

func (r *engineRun) logf(format string, args ...any) {
	r.h.journal.add(r.u.name, "python3", r.main.nsPID(r.h.ct), fmt.Sprintf(format, args...))
}

func (r *engineRun) logLines(lines []string) {
	for _, l := range lines {
		r.h.journal.add(r.u.name, "python3", r.main.nsPID(r.h.ct), l)
	}
}

func (r *engineRun) stamp(tp string) string {
	ts := time.Now().UTC().Format("2006-01-02 15:04:05")
	if tp == "" {
		return "[" + ts + "]"
	}
	return "[" + ts + " " + tp + "]"
}

// fail ends the start with lines in the journal and exit status code, after a short delay.
func (r *engineRun) fail(lines []string, code int) {
	r.logLines(lines)
	w := r.h.w
	main := r.main
	r.timer = w.after(failExitDelay, func() { w.exit(main, code, 0) })
}

// boot parses and checks the command line, then claims GPU memory (mu held).
func (r *engineRun) boot() {
	if !r.alive || r.stopping {
		return
	}
	w, l := r.h.w, r.h.lab
	argv := r.main.args
	s, perr := engParse(argv, r.u.cfg.Environment)
	if perr != nil {
		r.fail(perr.Lines, perr.Exit)
		return
	}
	if l.faults.crashOnStart {
		if seed, ok := l.seedArgv[r.u.name]; ok && !slices.Equal(seed, argv) {
			r.fail(crashTraceback(r.flavor), 1)
			return
		}
	}
	s, lines, cerr := engCheck(s, r.h.ReadFile)
	if cerr != nil {
		r.fail(cerr.Lines, cerr.Exit)
		return
	}
	r.logLines(lines)
	r.s = s
	tp := max(s.TP, 1)
	visible := visibleGPUs(r.u.cfg.Environment, len(w.gpus))
	if tp > len(visible) {
		r.fail([]string{r.stamp("") + " Traceback (most recent call last):",
			"RuntimeError: CUDA error: invalid device ordinal",
			fmt.Sprintf("  (tensor parallel size %d needs %d GPUs, %d visible)", tp, tp, len(visible))}, 1)
		return
	}
	r.gpus = visible[:tp]
	// Child processes.
	if r.flavor == "vllm" {
		core := w.spawn(r.h.ct, r.main, []string{"VLLM::EngineCore"}, r.u.cgroup())
		r.workers = append(r.workers, core)
		for i := range tp {
			r.workers = append(r.workers, w.spawn(r.h.ct, core, []string{fmt.Sprintf("VLLM::Worker_TP%d", i)}, r.u.cgroup()))
		}
	} else {
		for i := range tp {
			r.workers = append(r.workers, w.spawn(r.h.ct, r.main, []string{fmt.Sprintf("sglang::scheduler_TP%d", i)}, r.u.cgroup()))
		}
		r.workers = append(r.workers, w.spawn(r.h.ct, r.main, []string{"sglang::detokenizer"}, r.u.cgroup()))
	}
	frac := s.MemFraction
	if frac <= 0 || frac > 1 {
		frac = 0.88
	}
	need := make([]int, tp)
	free := make([]int, tp)
	short := 0
	for i, g := range r.gpus {
		gg := w.gpuByIndex(g)
		need[i] = int(frac * float64(gg.total))
		free[i] = gg.total - w.used(g)
		if free[i] < need[i] {
			short++
		}
	}
	if short > 0 {
		r.fail(r.memoryError(free, need, short < tp), 1)
		return
	}
	holders := r.gpuHolders()
	for i, g := range r.gpus {
		gg := w.gpuByIndex(g)
		// The static pool and the context now; SGLang's CUDA graphs after the load (loaded),
		// vLLM's allowance for them at once.
		claim := need[i] + engContextMiB
		if r.flavor == "vllm" {
			claim += s.GraphMiB
		}
		holders[i].mem[g] = min(claim, gg.total-w.used(g))
		holders[i].gpuFDs = true
		holders[i].state = 'R'
		r.armFaults(holders[i], i)
	}
	if r.flavor == "vllm" {
		r.logf("INFO %s [gpu_model_runner.py] Starting to load model %s...", time.Now().UTC().Format("01-02 15:04:05"), modelArg(argv))
	} else {
		for i := range tp {
			r.logf("%s Load weight begin. avail mem=%.2f GB", r.stamp(fmt.Sprintf("TP%d", i)), float64(free[i])/1024)
		}
	}
	r.timer = w.after(l.loadTime(), r.loaded)
}

// loadTime is the simulated model load: the configured load time, plus what
// the slow-load fault adds.
func (l *Lab) loadTime() time.Duration {
	return l.opts.LoadTime + l.faults.slowLoad
}

// gpuHolders are the processes that hold memory, one per GPU of r.gpus.
func (r *engineRun) gpuHolders() []*proc {
	if r.flavor == "vllm" {
		return r.workers[1:]
	}
	return r.workers[:len(r.gpus)]
}

func (r *engineRun) armFaults(p *proc, i int) {
	f := r.h.lab.faults
	switch {
	case f.dstate && i == 0:
		p.onSignal = func(sig syscall.Signal) { p.state, p.stat = 'D', "Dl" }
	case f.orphans:
		p.onSignal = func(sig syscall.Signal) {} // busy in CUDA teardown; survives its parent
	}
}

func (r *engineRun) memoryError(free, need []int, unbalanced bool) []string {
	tp := "TP0"
	for i := range free {
		if free[i] < need[i] {
			tp = fmt.Sprintf("TP%d", i)
			break
		}
	}
	if r.flavor == "vllm" {
		i := 0
		for i = range free {
			if free[i] < need[i] {
				break
			}
		}
		g := r.h.w.gpuByIndex(r.gpus[i])
		return []string{
			"ERROR [core.py] EngineCore failed to start.",
			"Traceback (most recent call last):",
			"  File \"/opt/vllm/.venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py\", line 239, in init_device",
			fmt.Sprintf("ValueError: Free memory on device cuda:%d (%.2f/%.2f GiB) on startup is less than desired GPU memory utilization (%.2f, %.2f GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
				i, float64(free[i])/1024, float64(g.total)/1024, float64(need[i])/float64(g.total), float64(need[i])/1024),
			"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
		}
	}
	msg := "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
	if unbalanced {
		msg = "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes."
	}
	return []string{
		fmt.Sprintf("%s Scheduler hit an exception: Traceback (most recent call last):", r.stamp(tp)),
		"  File \"/opt/sglang/.venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py\", line 2914, in run_scheduler_process",
		"    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
		"  File \"/opt/sglang/.venv/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py\", line 1602, in init_memory_pool",
		"    raise RuntimeError(",
		msg,
		"",
		r.stamp("") + " Received sigquit from a child process. It usually means the child failed.",
	}
}

// captureGraphs claims the CUDA graphs' memory on each GPU of the run (mu held). When a GPU
// has less free than the graphs need, the start fails as SGLang's CudaGraphRunner fails
// (PyTorch's out-of-memory text, which names every process using the GPU by its host PID,
// then SGLang's remedies) and captureGraphs returns false.
func (r *engineRun) captureGraphs() bool {
	w := r.h.w
	for i, g := range r.gpus {
		if free := w.gpuByIndex(g).total - w.used(g); free < r.s.GraphMiB {
			r.fail(r.captureOOM(i, g, free), 1)
			return false
		}
	}
	g0 := r.gpus[0]
	r.logf("%s", captureBegin(r.stamp("TP0"), w.gpuByIndex(g0).total-w.used(g0)))
	holders := r.gpuHolders()
	for i, g := range r.gpus {
		holders[i].mem[g] += r.s.GraphMiB
	}
	return true
}

// captureBegin is SGLang's line before it captures CUDA graphs, with the memory free on the
// rank's GPU (cuda_graph_runner.py: "avail mem={before_mem:.2f} GB").
func captureBegin(stamp string, freeMiB int) string {
	return fmt.Sprintf("%s Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB", stamp, float64(freeMiB)/1024)
}

// captureOOM is SGLang's "Capture cuda graph failed" on GPU g (rank i) with free MiB left.
func (r *engineRun) captureOOM(i, g, free int) []string {
	w := r.h.w
	gib := func(mib int) string { return fmt.Sprintf("%.2f GiB", float64(mib)/1024) }
	var procs []string
	// PyTorch lists the processes using the GPU: here the engine's main process (its context)
	// and whatever holds memory on it.
	procs = append(procs, fmt.Sprintf("Process %d has %s memory in use.", r.main.hostPID, gib(engContextMiB)))
	for _, p := range w.procs {
		if m := p.mem[g]; m > 0 && !p.dead {
			procs = append(procs, fmt.Sprintf("Process %d has %s memory in use.", p.hostPID, gib(m)))
		}
	}
	tp := fmt.Sprintf("TP%d", i)
	site := "/opt/sglang/.venv/lib/python3.12/site-packages/sglang/srt"
	return []string{
		captureBegin(r.stamp(tp), free),
		fmt.Sprintf("%s Scheduler hit an exception: Traceback (most recent call last):", r.stamp(tp)),
		"  File \"" + site + "/managers/scheduler.py\", line 2914, in run_scheduler_process",
		"    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
		"  File \"" + site + "/model_executor/model_runner.py\", line 1989, in init_device_graphs",
		"    self.graph_runner = CudaGraphRunner(self)",
		"  File \"" + site + "/model_executor/cuda_graph_runner.py\", line 385, in __init__",
		"    raise Exception(",
		fmt.Sprintf("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. %s",
			gib(r.s.GraphMiB), i, gib(w.gpuByIndex(g).total), gib(free), strings.Join(procs, " ")),
		"Possible solutions:",
		"1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
		"2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
		"3. disable torch compile by not using --enable-torch-compile",
		"4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
		"Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose",
		"",
		r.stamp("") + " Received sigquit from a child process. It usually means the child failed.",
	}
}

// logGraphs writes SGLang's lines once the CUDA graphs are captured: the worker's own
// capture (the launch steps), then, with adaptive speculation, each other candidate's
// runtime state with the memory it added to the shared graph pool
// (EAGLEWorkerV2.build_adaptive_runtime_state: "Built adaptive runtime state steps=...").
func (r *engineRun) logGraphs() {
	caps := r.s.Captures
	first := 0
	if len(caps) > 0 {
		first = caps[0].MiB
	}
	r.logf("%s Capture cuda graph end. Time elapsed: 41.27 s. mem usage=%.2f GB", r.stamp("TP0"), float64(first)/1024)
	pool := first
	for _, c := range caps[min(1, len(caps)):] {
		grew := max(c.MiB-pool, 0)
		pool = max(pool, c.MiB)
		r.logf("%s Built adaptive runtime state steps=%d: elapsed=%.2fs, mem=%.2fGB", r.stamp("TP0"), c.Steps, 0.2*float64(len(c.BatchSizes)), float64(grew)/1024)
	}
}

func crashTraceback(flavor string) []string {
	if flavor == "vllm" {
		return []string{"Traceback (most recent call last):",
			"  File \"/opt/vllm/.venv/lib/python3.12/site-packages/vllm/v1/spec_decode/eagle.py\", line 88, in __init__",
			"    self.hidden_size = self.draft_model_config.get_hidden_size()",
			"AttributeError: 'NoneType' object has no attribute 'get_hidden_size'"}
	}
	return []string{"Traceback (most recent call last):",
		"  File \"<frozen runpy>\", line 198, in _run_module_as_main",
		"  File \"/opt/sglang/.venv/lib/python3.12/site-packages/sglang/launch_server.py\", line 14, in <module>",
		"    launch_server(server_args)",
		"  File \"/opt/sglang/.venv/lib/python3.12/site-packages/sglang/srt/speculative/eagle_worker.py\", line 121, in __init__",
		"    self.init_cuda_graphs()",
		"torch.OutOfMemoryError: CUDA error: an illegal memory access was encountered",
		"CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."}
}

func modelArg(argv []string) string {
	for i, a := range argv {
		if a == "serve" && i+1 < len(argv) {
			return argv[i+1]
		}
		if (a == "--model-path" || a == "--model") && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

// visibleGPUs applies CUDA_VISIBLE_DEVICES from the unit's environment.
func visibleGPUs(env []string, n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CUDA_VISIBLE_DEVICES="); ok {
			var out []int
			for _, f := range strings.Split(v, ",") {
				if g, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && g >= 0 && g < n {
					out = append(out, g)
				}
			}
			return out
		}
	}
	return all
}

// loaded ends the weight load: open the port (outside the lock), then warm up (mu held).
func (r *engineRun) loaded() {
	if !r.alive || r.stopping {
		return
	}
	if r.flavor == "sglang" {
		for i := range r.gpus {
			r.logf("%s Load weight end. type=Qwen3_5MoeForCausalLM, dtype=torch.bfloat16, avail mem=%.2f GB", r.stamp(fmt.Sprintf("TP%d", i)), 9.1)
		}
		r.logf("%s KV Cache is allocated. #tokens: 1423360, K size: 10.86 GB, V size: 10.86 GB", r.stamp("TP0"))
		if !r.captureGraphs() {
			return
		}
		r.logGraphs()
	}
	s := r.s
	h := r.h
	port := r.u.port
	var logFn = func(line string) { h.journal.add(r.u.name, "python3", r.main.nsPID(h.ct), line) }
	h.w.later(func() {
		r.listen(port, s, logFn)
	})
}

func (r *engineRun) listen(port int, s engSettings, logFn func(string)) {
	r.h.w.lock()
	slow := r.h.w.slowFor(s)
	r.h.w.unlock()
	inst := engNew(s, logFn, slow)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if r.h.lab.opts.LoopbackEngines {
		addr = "127.0.0.1:0" // reached only through the host's SSH server (forward.go)
	}
	ln, err := net.Listen("tcp", addr)
	w := r.h.w
	w.lock()
	defer w.unlock()
	if err != nil {
		r.logf("%s ERROR: [Errno 98] error while attempting to bind on address ('0.0.0.0', %d): address already in use", r.stamp(""), port)
		w.later(inst.Close)
		if r.alive {
			main := r.main
			r.timer = w.after(failExitDelay, func() { w.exit(main, 1, 0) })
		}
		return
	}
	if !r.alive || r.stopping || w.closed {
		w.later(func() { ln.Close(); inst.Close() })
		return
	}
	r.inst, r.ln = inst, ln
	r.srv = &http.Server{Handler: inst.Handler(), ReadHeaderTimeout: 10 * time.Second}
	srv := r.srv
	lab := r.h.lab
	lab.wg.Add(1)
	go func() {
		defer lab.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			lab.log.Warn("engine server ended", "unit", r.u.name, "err", err)
		}
	}()
	if r.flavor == "vllm" {
		r.logf("INFO:     Started server process [%d]", r.main.nsPID(r.h.ct))
		r.markReady("INFO:     Application startup complete.")
		return
	}
	r.logf("%s INFO:     Uvicorn running on http://0.0.0.0:%d (Press CTRL+C to quit)", r.stamp(""), portOrDefault(modelPort(r.main.args), 30000))
	r.timer = w.after(r.h.lab.opts.WarmUp, func() {
		if r.alive && !r.stopping {
			r.logf("%s INFO:     127.0.0.1:41062 - \"GET /get_model_info HTTP/1.1\" 200 OK", r.stamp(""))
			r.markReady(r.stamp("") + " The server is fired up and ready to roll!")
		}
	})
}

func (r *engineRun) markReady(line string) {
	r.ready = true
	inst := r.inst
	r.h.w.later(func() { inst.SetReady(true) })
	r.logf("%s", line)
}

func modelPort(argv []string) int {
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, "--port="); ok {
			p, _ := strconv.Atoi(v)
			return p
		}
		if a == "--port" && i+1 < len(argv) {
			p, _ := strconv.Atoi(argv[i+1])
			return p
		}
	}
	return 0
}

func portOrDefault(p, d int) int {
	if p > 0 {
		return p
	}
	return d
}

// onSignal is the main process's signal handler (mu held).
func (r *engineRun) onSignal(sig syscall.Signal) {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP:
	default:
		return
	}
	if r.stopping || !r.alive {
		return
	}
	r.stopping = true
	r.h.w.stopTimer(r.timer)
	r.closeServer()
	if r.flavor == "vllm" {
		r.logf("INFO:     Shutting down")
	} else {
		r.logf("%s INFO:     Shutting down", r.stamp(""))
	}
	w, main := r.h.w, r.main
	r.timer = w.after(shutdownTime, func() { w.exit(main, 0, 0) })
}

// closeServer stops serving (mu held; the I/O runs after unlock).
func (r *engineRun) closeServer() {
	r.ready = false
	srv, inst := r.srv, r.inst
	r.srv, r.ln, r.inst = nil, nil, nil
	r.h.w.later(func() {
		if srv != nil {
			srv.Close()
		}
		if inst != nil {
			inst.Close()
		}
	})
}

// shutdown is Lab.Close's cleanup (called without the lock).
func (r *engineRun) shutdown() {
	w := r.h.w
	w.lock()
	r.closeServer()
	w.unlock()
}

// mainDied reacts to the end of the main process (mu held): workers exit with it, except the
// ones a fault keeps alive (orphans stay in the unit's cgroup keeping their memory; D state stays).
func (r *engineRun) mainDied() {
	w := r.h.w
	r.alive = false
	w.stopTimer(r.timer)
	r.closeServer()
	if r.u.run == r {
		r.u.run = nil
	}
	for _, p := range r.workers {
		if p.dead || p.state == 'D' {
			continue
		}
		if (r.h.lab.faults.orphans || r.keepWorkers) && p.heldMiB() > 0 {
			p.leftover = true // stays in the unit's cgroup, as under systemd
			continue
		}
		if (r.u.cfg.KillMode == "process" || r.u.cfg.KillMode == "none") && p.heldMiB() > 0 {
			continue // nobody reaps the workers: they keep their memory (DOMAIN section 6)
		}
		w.exit(p, 0, 0)
	}
	if r.u.stopping {
		r.u.checkStopDone()
	}
}

func parseSleep(s string) (time.Duration, error) {
	mult := time.Second
	switch {
	case strings.HasSuffix(s, "m"):
		mult, s = time.Minute, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "h"):
		mult, s = time.Hour, strings.TrimSuffix(s, "h")
	case strings.HasSuffix(s, "d"):
		mult, s = 24*time.Hour, strings.TrimSuffix(s, "d")
	case strings.HasSuffix(s, "s"):
		s = strings.TrimSuffix(s, "s")
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid time interval %q", s)
	}
	return time.Duration(f * float64(mult)), nil
}
