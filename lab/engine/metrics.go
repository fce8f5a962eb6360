package engine

import (
	"math"
	"net/http"
	"strconv"
	"strings"
)

// metrics serves Prometheus text: SGLang gauges of the last decode log window (only with
// --enable-metrics), vLLM cumulative counters.
func (e *Engine) metrics(w http.ResponseWriter, r *http.Request) {
	if !e.s.EnableMetrics && e.s.Flavor == "sglang" {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return
	}
	e.mu.Lock()
	st := e.st
	st.acceptedPos = append([]int64(nil), e.st.acceptedPos...)
	e.mu.Unlock()
	var b strings.Builder
	if e.s.Flavor == "vllm" {
		e.vllmMetrics(&b, &st)
	} else {
		e.sglangMetrics(&b, &st)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}

type promWriter struct {
	b      *strings.Builder
	labels string
}

func (p promWriter) metric(name, typ, help string, v float64) {
	p.header(name, typ, help)
	p.sample(name, "", v)
}

func (p promWriter) header(name, typ, help string) {
	p.b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

func (p promWriter) sample(name, extra string, v float64) {
	p.b.WriteString(name + "{" + p.labels + extra + "} " + pyFloat(v) + "\n")
}

// pyFloat formats like Python's float repr: 12.0, 3.05, 1000000.0, 1e+20 (the shortest
// digits, positional from 1e-4 up to 1e16, exponent form beyond); infinities and NaN as Go
// writes them (+Inf, NaN), as Prometheus' text format wants.
func pyFloat(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(v, 'e', -1, 64)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

func (e *Engine) sglangMetrics(b *strings.Builder, st *stats) {
	p := promWriter{b: b, labels: `model_name="` + e.s.ServedModelName + `",engine_type="unified",tp_rank="0",pp_rank="0"`}
	g := st.g
	p.metric("sglang:num_running_reqs", "gauge", "The number of running requests.", float64(g.running))
	p.metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", float64(g.queued))
	p.metric("sglang:token_usage", "gauge", "The token usage.", g.tokenUsage)
	p.metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", g.genTput)
	p.metric("sglang:spec_accept_length", "gauge", "The average acceptance length of speculative decoding.", g.acceptLen)
	p.metric("sglang:spec_accept_rate", "gauge", "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).", g.acceptRate)
	p.metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(st.truth.PromptTokens))
	p.metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(st.truth.OutputTokens))
	p.metric("sglang:num_requests_total", "counter", "Number of requests processed.", float64(st.truth.Requests))
}

func (e *Engine) vllmMetrics(b *strings.Builder, st *stats) {
	p := promWriter{b: b, labels: `engine="0",model_name="` + e.s.ServedModelName + `"`}
	p.metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(st.running))
	p.metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float64(st.queued))
	p.metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(st.truth.PromptTokens))
	p.metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(st.truth.OutputTokens))
	p.metric("vllm:request_success_total", "counter", "Count of successfully processed requests.", float64(st.truth.Requests))
	// vLLM's config info gauge (v1/metrics/loggers.py, log_metrics_info("cache_config", ...)):
	// value 1, the cache config's fields as labels, gpu_memory_utilization among them.
	info := "vllm:cache_config_info"
	p.header(info, "gauge", "Information of the LLMEngine CacheConfig")
	p.sample(info, `,block_size="16",cache_dtype="auto",gpu_memory_utilization="`+pyFloat(e.s.MemFractionStatic)+
		`",swap_space="4",enable_prefix_caching="True"`, 1)
	if !e.s.Speculative() {
		return
	}
	p.metric("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", float64(st.truth.DraftSteps))
	p.metric("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", float64(st.truth.DraftsProposed))
	p.metric("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.", float64(st.truth.DraftsAccepted))
	name := "vllm:spec_decode_num_accepted_tokens_per_pos_total"
	p.header(name, "counter", "Accepted tokens per draft position.")
	for i, a := range st.acceptedPos {
		p.sample(name, `,position="`+strconv.Itoa(i)+`"`, float64(a))
	}
}
