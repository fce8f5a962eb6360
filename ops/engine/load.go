package engine

import (
	"context"
	"encoding/json"
	"fmt"
)

// Load is the requests an engine holds now: running in its batch, and
// waiting in its queue. A drain waits for both to reach zero.
type Load struct {
	Running, Waiting int
	// Source names where the figures come from ("/get_load", "/metrics").
	Source string
}

// InFlight is the requests the engine has not finished: Running + Waiting.
func (l Load) InFlight() int { return l.Running + l.Waiting }

// SGLangLoad reads SGLang's GET /get_load: a JSON list with one object per
// data-parallel rank, whose num_reqs is the scheduler's running batch plus
// its waiting queue and num_waiting_reqs the waiting queue alone (SGLang
// python/sglang/srt/entrypoints/http_server.py `get_load`, answered by the
// scheduler's get_load: num_reqs=len(self.running_batch.reqs) +
// num_waiting_reqs). Newer versions keep /get_load as a shim of /v1/loads
// with the same fields. The ranks are summed.
func (c *Client) SGLangLoad(ctx context.Context) (Load, error) {
	body, err := c.get(ctx, "/get_load", 1<<20)
	if err != nil {
		return Load{}, fmt.Errorf("read the engine's load: %w", err)
	}
	return ParseSGLangLoad(body)
}

// ParseSGLangLoad parses the body of SGLang's /get_load (a list of ranks, or
// one rank's object).
func ParseSGLangLoad(body []byte) (Load, error) {
	type rank struct {
		NumReqs        *int `json:"num_reqs"`
		NumWaitingReqs *int `json:"num_waiting_reqs"`
	}
	var ranks []rank
	if err := json.Unmarshal(body, &ranks); err != nil {
		var one rank
		if err2 := json.Unmarshal(body, &one); err2 != nil {
			return Load{}, fmt.Errorf("/get_load: not SGLang's load list: %q", Excerpt(string(body)))
		}
		ranks = []rank{one}
	}
	l := Load{Source: "/get_load"}
	for _, r := range ranks {
		if r.NumReqs == nil {
			return Load{}, fmt.Errorf("/get_load: no num_reqs in %q", Excerpt(string(body)))
		}
		w := 0
		if r.NumWaitingReqs != nil {
			w = *r.NumWaitingReqs
		}
		l.Running += *r.NumReqs - w
		l.Waiting += w
	}
	return l, nil
}

// VLLMLoad reads vLLM's gauges vllm:num_requests_running and
// vllm:num_requests_waiting from /metrics (vllm/v1/metrics/loggers.py,
// PrometheusStatLogger: the scheduler's running and waiting requests).
func (c *Client) VLLMLoad(ctx context.Context) (Load, error) {
	m, err := c.Metrics(ctx)
	if err != nil {
		return Load{}, err
	}
	run, ok1 := m.Value("vllm:num_requests_running")
	wait, ok2 := m.Value("vllm:num_requests_waiting")
	if !ok1 || !ok2 {
		return Load{}, fmt.Errorf("%s/metrics has no vllm:num_requests_running and vllm:num_requests_waiting", c.BaseURL)
	}
	return Load{Running: int(run), Waiting: int(wait), Source: "/metrics"}, nil
}
