package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// ServerInfo is what SGLang's /server_info says about speculative decoding.
// Missing or null fields are zero. AvgAcceptLen is the first internal
// state's average accept length since start or the last /flush_cache
// (warm-up included), as of the last decode log line: 0 until the first line
// after either, and not a window measure unless a flush began the window.
// RunningSteps is the first internal state's speculative_num_steps: the
// steps the engine runs now, which SGLang's adaptive mode changes with the
// batch (HasRunningSteps false when the engine does not say; 0 is
// speculation off). Raw is the whole decoded answer (numbers as json.Number).
type ServerInfo struct {
	Algorithm                string
	Steps, TopK, DraftTokens int
	AvgAcceptLen             float64
	RunningSteps             int
	HasRunningSteps          bool
	Raw                      map[string]any
}

// ServerInfo reads /server_info, or /get_server_info when the first answers
// 404 (older SGLang). vLLM has neither: the error is then a *StatusError.
func (c *Client) ServerInfo(ctx context.Context) (ServerInfo, error) {
	body, err := c.get(ctx, "/server_info", 16<<20)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		body, err = c.get(ctx, "/get_server_info", 16<<20)
	}
	if err != nil {
		return ServerInfo{}, fmt.Errorf("server info: %w", err)
	}
	return ParseServerInfo(body)
}

// ParseServerInfo decodes a /server_info body. Numbers may be JSON numbers or
// strings ("3"); a field of the wrong type is an error naming it.
func ParseServerInfo(body []byte) (ServerInfo, error) {
	var raw map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		return ServerInfo{}, fmt.Errorf("server info: decoding JSON: %w", err)
	}
	if raw == nil {
		return ServerInfo{}, errors.New("server info: answer is null, not an object")
	}
	info := ServerInfo{Raw: raw}
	if v, ok := raw["speculative_algorithm"]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return ServerInfo{}, fmt.Errorf("server info: speculative_algorithm is %T, not a string", v)
		}
		info.Algorithm = Excerpt(s) // shown in chat
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"speculative_num_steps", &info.Steps}, {"speculative_eagle_topk", &info.TopK}, {"speculative_num_draft_tokens", &info.DraftTokens}} {
		n, err := number(raw[f.key])
		if err != nil {
			return ServerInfo{}, fmt.Errorf("server info: %s: %w", f.key, err)
		}
		if n != float64(int(n)) {
			return ServerInfo{}, fmt.Errorf("server info: %s is %v, not a whole number", f.key, n)
		}
		*f.dst = int(n)
	}
	if states, ok := raw["internal_states"].([]any); ok && len(states) > 0 {
		if st, ok := states[0].(map[string]any); ok {
			n, err := number(st["avg_spec_accept_length"])
			if err != nil {
				return ServerInfo{}, fmt.Errorf("server info: internal_states[0].avg_spec_accept_length: %w", err)
			}
			info.AvgAcceptLen = n
			if v := st["speculative_num_steps"]; v != nil && !blank(v) {
				n, err := number(v)
				if err != nil || n != float64(int(n)) || n < 0 {
					return ServerInfo{}, fmt.Errorf("server info: internal_states[0].speculative_num_steps is %v, not a whole number of steps", v)
				}
				info.RunningSteps, info.HasRunningSteps = int(n), true
			}
		}
	}
	return info, nil
}

// blank reports whether v is a string that stands for no value.
func blank(v any) bool {
	s, ok := v.(string)
	s = strings.TrimSpace(s)
	return ok && (s == "" || strings.EqualFold(s, "none") || strings.EqualFold(s, "null"))
}

// number reads a JSON number, a numeric string, or null/absent (0).
func number(v any) (float64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case json.Number:
		return strconv.ParseFloat(string(x), 64)
	case float64:
		return x, nil
	case string:
		s := strings.TrimSpace(x)
		if s == "" || strings.EqualFold(s, "none") || strings.EqualFold(s, "null") {
			return 0, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", Excerpt(x))
		}
		return f, nil
	}
	return 0, fmt.Errorf("%T is not a number", v)
}

// Models lists the ids of /v1/models (OpenAI format: {"data": [{"id": ...}]}),
// in the server's order. An empty list is not an error.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	body, err := c.get(ctx, "/v1/models", 4<<20)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("list models of %s: decoding JSON: %w", c.BaseURL, err)
	}
	ids := make([]string, 0, len(m.Data))
	for _, d := range m.Data {
		if d.ID != "" {
			ids = append(ids, d.ID)
		}
	}
	return ids, nil
}
