package engine

import "math"

// GPU memory an SGLang start needs beyond --mem-fraction-static on each GPU. SGLang reserves
// mem-fraction-static of the GPU for weights and the KV cache; the CUDA context and the CUDA
// graphs it captures for every batch size up to --cuda-graph-max-bs come out of the rest. Under
// speculation each captured request verifies DraftTokens tokens, so the graphs grow with the
// draft tokens times the batch: deeper speculation can leave a start that no longer fits, with
// the GPU otherwise empty. SGLang then fails in CudaGraphRunner with "Capture cuda graph
// failed: CUDA out of memory" and its list of remedies (python/sglang/srt/model_executor/
// cuda_graph_runner.py, CUDA_GRAPH_CAPTURE_FAILED_MSG).
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

// GraphMiB is the memory the CUDA graphs of a checked start take on each GPU: 0 with
// --disable-cuda-graph, for vLLM the fixed allowance of its context and graphs; with
// SGLang's adaptive speculation, for its widest candidate.
func (s Settings) GraphMiB() int {
	if s.Flavor == "vllm" {
		return vllmBeyondStaticMiB - ContextMiB
	}
	if b, _ := s.Args["disable_cuda_graph"].(bool); b {
		return 0
	}
	tokens := 1
	if s.Speculative() && s.DraftTokens > 0 {
		tokens = s.DraftTokens
	}
	if s.Adaptive != nil {
		// Adaptive SGLang sizes its graphs for the widest candidate
		// (model_runner's decode rows cover every candidate's steps + 1).
		c := s.Adaptive.CandidateSteps()
		tokens = max(tokens, c[len(c)-1]+1)
	}
	return int(math.Round(float64(max(s.CudaGraphMaxBS, 1)*tokens) * graphMiBPerBSToken))
}
