package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// WarmUp sends one short generate request straight to the engine (POST
// /v1/completions, OpenAI-compatible, which SGLang and vLLM both serve:
// the first model of /v1/models, a short prompt, maxTokens tokens, no
// stream) and returns the completion tokens it reports. A replica is put
// back behind its router only after it served such a request.
func (c *Client) WarmUp(ctx context.Context, maxTokens int) (int, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return 0, err
	}
	if len(models) == 0 {
		return 0, fmt.Errorf("%s/v1/models lists no model", c.BaseURL)
	}
	body, _ := json.Marshal(map[string]any{"model": models[0], "prompt": "Say hello.", "max_tokens": maxTokens, "temperature": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := Do(c.HTTP, req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, &StatusError{Method: http.MethodPost, URL: c.BaseURL + "/v1/completions", Code: resp.StatusCode, Body: readSnippet(resp.Body)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("POST %s/v1/completions: reading body: %w", c.BaseURL, err)
	}
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Choices) == 0 {
		return 0, fmt.Errorf("POST %s/v1/completions: not a completion: %q", c.BaseURL, Excerpt(string(b)))
	}
	if out.Usage.CompletionTokens < 1 {
		return 0, fmt.Errorf("POST %s/v1/completions: the engine generated no token", c.BaseURL)
	}
	return out.Usage.CompletionTokens, nil
}
