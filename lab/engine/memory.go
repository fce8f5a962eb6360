package engine

import (
	"math"
	"slices"
	"strconv"
)

// GPU memory an SGLang start needs beyond --mem-fraction-static on each GPU. SGLang reserves
// mem-fraction-static of the GPU for weights and the KV cache; the CUDA context and the CUDA
// graphs it captures come out of the rest. Under speculation each captured request verifies
// steps + 1 tokens, so a graph grows with the verified tokens times its batch size: deeper
// speculation can leave a start that no longer fits, with the GPU otherwise empty. SGLang
// then fails in CudaGraphRunner with "Capture cuda graph failed: CUDA out of memory" and its
// list of remedies (python/sglang/srt/model_executor/cuda_graph_runner.py,
// CUDA_GRAPH_CAPTURE_FAILED_MSG).
//
// Every graph runner captures into one shared memory pool (runner_backend/
// full_cuda_graph_backend.py: get_or_create_global_graph_memory_pool), so what a start needs
// is the largest graph it captures: its batch size times its verified tokens, at
// graphMiBPerBSToken. With adaptive speculation SGLang captures each steps value only at the
// batch sizes whose slot lists it (see GraphCaptures): the graphs follow the table.
//
// Calibration: on the lab's H100 (81559 MiB) at the default 0.88, 9787 MiB remain. The default
// service (steps 3, topk 1, 4 draft tokens; speculation caps the batch at 48, so graphs up to
// bs 48) needs 500 + 48 x 4 x 13.5 = 3092 MiB; steps 13 (14 tokens) need 9572 and fit; steps 14
// (15 tokens) need 10220 and do not. --mem-fraction-static 0.8, --cuda-graph-max-bs 16 or
// --disable-cuda-graph each make steps 14 fit again, as SGLang's remedies say.
const (
	ContextMiB          = 500  // CUDA context and the process's own allocations, per GPU
	graphMiBPerBSToken  = 13.5 // captured graph memory per request of the largest batch, per verified token
	vllmBeyondStaticMiB = 2600 // vLLM: context and graphs beyond --gpu-memory-utilization (not modelled further)
)

// GraphCapture is one set of decode CUDA graphs an SGLang start captures: those of one
// speculative shape at its batch sizes.
type GraphCapture struct {
	Steps      int   // speculative steps of the shape (0: decoding without drafting)
	Tokens     int   // tokens each request verifies in these graphs
	BatchSizes []int // captured batch sizes, ascending; empty: none for this shape
	MiB        int   // memory the largest of these graphs needs
}

// GraphMiB is the memory the CUDA graphs of a checked start take on each GPU: 0 with
// --disable-cuda-graph, for vLLM the fixed allowance of its context and graphs, for SGLang
// the largest graph GraphCaptures lists.
func (s Settings) GraphMiB() int {
	if s.Flavor == "vllm" {
		return vllmBeyondStaticMiB - ContextMiB
	}
	most := 0
	for _, c := range s.GraphCaptures() {
		most = max(most, c.MiB)
	}
	return most
}

// GraphCaptures lists the decode graphs a checked SGLang start captures (nil for vLLM or
// with --disable-cuda-graph). Without adaptive speculation: one shape at every graph batch
// size. With it, as SGLang's EAGLEWorkerV2.init_cuda_graphs does
// (python/sglang/srt/speculative/eagle_worker_v2.py): first the launch steps
// (--speculative-num-steps), captured by the worker's own start at every graph batch size,
// then AdaptiveController.init_states (adaptive_runtime_state.py) builds each other
// candidate, ascending, only at the batch sizes cuda_graph_bs_for_step gives it
// (adaptive_step_router.py): those whose slot, after padding, lists that step.
func (s Settings) GraphCaptures() []GraphCapture {
	bs := s.graphBatchSizes()
	if s.Flavor == "vllm" || bs == nil {
		return nil
	}
	tokens := settingsShape(s).Verified()
	out := []GraphCapture{capture(s.Steps, tokens, bs)}
	if !s.Speculative() {
		out[0].Steps = 0
	}
	if s.Adaptive == nil {
		return out
	}
	for _, step := range s.Adaptive.CandidateSteps() {
		if step == s.Steps {
			continue
		}
		out = append(out, capture(step, step+1, cudaGraphBSForStep(s.Adaptive, bs, step)))
	}
	return out
}

func capture(steps, tokens int, bs []int) GraphCapture {
	c := GraphCapture{Steps: steps, Tokens: tokens, BatchSizes: bs}
	if len(bs) > 0 {
		c.MiB = int(math.Round(float64(bs[len(bs)-1]*tokens) * graphMiBPerBSToken))
	}
	return c
}

// graphBatchSizes are the batch sizes SGLang captures decode graphs for, ascending; nil
// with --disable-cuda-graph. --cuda-graph-bs gives them; by default 1, 2, 4, 8, 12, then
// every 8 up to --cuda-graph-max-bs (server_args.py's generated list). Like
// get_batch_sizes_to_capture (model_executor/runner/base_cuda_graph_runner.py), a list
// reaching beyond the most requests that can run gets that number added, and nothing above
// it is kept.
func (s Settings) graphBatchSizes() []int {
	if off, _ := s.Args["disable_cuda_graph"].(bool); off {
		return nil
	}
	var bs []int
	if given, ok := s.Args["cuda_graph_bs"].([]string); ok && len(given) > 0 {
		for _, g := range given {
			if n, err := strconv.Atoi(g); err == nil && n > 0 {
				bs = append(bs, n)
			}
		}
	} else {
		top := max(s.CudaGraphMaxBS, 1)
		for _, b := range []int{1, 2, 4, 8, 12} {
			if b <= top {
				bs = append(bs, b)
			}
		}
		for b := 16; b <= top; b += 8 {
			bs = append(bs, b)
		}
	}
	if limit := s.MaxRunningRequests; limit > 0 {
		if len(bs) > 0 && slices.Max(bs) > limit {
			bs = append(bs, limit)
		}
		bs = slices.DeleteFunc(bs, func(b int) bool { return b > limit })
	}
	slices.Sort(bs)
	bs = slices.Compact(bs)
	if len(bs) == 0 {
		return nil
	}
	return bs
}
