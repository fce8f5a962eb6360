package engine

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

const engineVersion = "0.5.4"

// Handler serves the engine's HTTP API:
//
//	GET  /health, /health_generate   503 until SetReady(true), then 200 (/health_generate SGLang only)
//	GET  /server_info, /get_server_info, /get_model_info   SGLang server args (404 for vLLM);
//	     internal_states[0].avg_spec_accept_length moves only at decode log lines;
//	     internal_states[0].speculative_num_steps and speculative_num_draft_tokens are the
//	     steps running now (adaptive: those the last decode batch ran; the top-level keys
//	     keep the launch values)
//	GET|POST /flush_cache   SGLang: 200 and the cumulative acceptance and decode-log count
//	     restart when no request is running or waiting, else 400 (404 for vLLM)
//	GET  /v1/models
//	POST /v1/completions, /v1/chat/completions   OpenAI-compatible, SSE with stream
//	POST /generate   SGLang's native API: text or input_ids, sampling_params, stream;
//	     meta_info with completion_tokens and, at the end, spec_verify_ct (404 for vLLM)
//	GET  /get_load   SGLang: the requests running and waiting now (404 for vLLM)
//	GET  /metrics   Prometheus text (SGLang only with --enable-metrics)
//	GET  /lab/truth   ground truth (Truth as JSON)
//	GET  /lab/requests   per-request ground truth ([]RequestTruth as JSON)
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", e.health)
	mux.HandleFunc("/health_generate", e.sglangOnly(e.health))
	mux.HandleFunc("/server_info", e.sglangOnly(e.serverInfo))
	mux.HandleFunc("/get_server_info", e.sglangOnly(e.serverInfo))
	mux.HandleFunc("/get_model_info", e.sglangOnly(e.modelInfo))
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"version": engineVersion})
	})
	mux.HandleFunc("/v1/models", e.models)
	mux.HandleFunc("/v1/completions", e.post(func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, false) }))
	mux.HandleFunc("/v1/chat/completions", e.post(func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, true) }))
	mux.HandleFunc("/generate", e.sglangOnly(e.post(e.native)))
	mux.HandleFunc("/flush_cache", e.sglangOnly(e.flushCache))
	mux.HandleFunc("/get_load", e.sglangOnly(e.getLoad))
	mux.HandleFunc("/metrics", e.metrics)
	mux.HandleFunc("/lab/truth", e.truth)
	mux.HandleFunc("/lab/requests", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, e.Requests()) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	return mux
}

func (e *Engine) sglangOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if e.s.Flavor != "sglang" {
			writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
			return
		}
		h(w, r)
	}
}

func (e *Engine) post(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
			return
		}
		h(w, r)
	}
}

func (e *Engine) health(w http.ResponseWriter, r *http.Request) {
	if !e.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (e *Engine) serverInfo(w http.ResponseWriter, r *http.Request) {
	info := make(map[string]any, len(e.s.Args)+8)
	for k, v := range e.s.Args {
		info[k] = v
	}
	info["model_path"] = e.s.Model
	info["served_model_name"] = e.s.ServedModelName
	info["tp_size"] = e.s.TP
	info["mem_fraction_static"] = e.s.MemFractionStatic
	info["max_running_requests"] = e.s.MaxRunningRequests
	info["decode_log_interval"] = e.s.DecodeLogInterval
	info["chunked_prefill_size"] = e.s.ChunkedPrefillSize
	info["cuda_graph_max_bs"] = e.s.CudaGraphMaxBS
	info["version"] = engineVersion
	if e.s.Speculative() {
		info["speculative_algorithm"] = e.s.Algorithm
		info["speculative_num_steps"] = e.s.Steps
		info["speculative_eagle_topk"] = e.s.TopK
		info["speculative_num_draft_tokens"] = e.s.DraftTokens
	}
	e.mu.Lock()
	state := map[string]any{"last_gen_throughput": e.st.g.genTput,
		"memory_usage": map[string]any{"weight": 58.91, "kvcache": 21.72, "token_capacity": kvTokens,
			"cuda_graph": math.Round(float64(e.s.GraphMiB())/1024*100) / 100}}
	if e.s.Speculative() {
		// The scheduler's server args, which an adaptive state switch overrides
		// (EAGLEWorkerV2.apply_runtime_state: "Sync server_args"): the steps running now.
		steps, draft := e.s.Steps, e.s.DraftTokens
		if e.spec.policy != nil {
			steps, draft = e.curSteps, e.curSteps+1
		}
		state["speculative_num_steps"], state["speculative_num_draft_tokens"] = steps, draft
		if e.st.cumSteps > 0 {
			state["avg_spec_accept_length"] = float64(e.st.cumTokens) / float64(e.st.cumSteps)
		}
	}
	e.mu.Unlock()
	info["internal_states"] = []any{state}
	writeJSON(w, 200, info)
}

func (e *Engine) modelInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"model_path": e.s.Model, "tokenizer_path": e.s.Model,
		"is_generation": true, "preferred_sampling_params": nil})
}

func (e *Engine) models(w http.ResponseWriter, r *http.Request) {
	owner := "sglang"
	if e.s.Flavor == "vllm" {
		owner = "vllm"
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": e.s.ServedModelName, "object": "model", "created": e.start.Unix(), "owned_by": owner,
		"root": e.s.Model, "max_model_len": e.s.ContextLength}}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"detail":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b)
}

// apiError writes an OpenAI-style error object.
func apiError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": code})
}

func unixNow() int64 { return time.Now().Unix() }

// truth serves Truth with the names of the lab's contract: completion_tokens
// (the same count as output_tokens) and the engine's current settings.
func (e *Engine) truth(w http.ResponseWriter, r *http.Request) {
	s, t := e.s, e.Truth()
	writeJSON(w, 200, struct {
		Truth
		CompletionTokens int64          `json:"completion_tokens"`
		Settings         map[string]any `json:"settings"`
	}{t, t.OutputTokens, map[string]any{
		"engine": s.Flavor, "algorithm": s.Algorithm, "steps": s.Steps, "topk": s.TopK,
		"draft_tokens": s.DraftTokens, "tp": s.TP, "max_running_requests": s.MaxRunningRequests,
	}})
}

// flushCache answers like SGLang's /flush_cache: the same text either way, 200 when the
// flush was done, 400 when requests were running or waiting (then nothing changed).
func (e *Engine) flushCache(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
		return
	}
	code := http.StatusOK
	if !e.FlushCache() {
		code = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte("Cache flushed.\nPlease check backend logs for more details. " +
		"(When there are running or waiting requests, the operation will not be performed.)\n"))
}
