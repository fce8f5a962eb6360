package engine

import (
	"context"
	"encoding/json"
	"fmt"
)

// MaxModelLen reads max_model_len of the first model /v1/models lists:
// vLLM reports each model's context limit there (its ModelCard). ok is false
// when the answer lists no model or no such field (SGLang's has none).
func (c *Client) MaxModelLen(ctx context.Context) (n int, ok bool, err error) {
	body, err := c.get(ctx, "/v1/models", 4<<20)
	if err != nil {
		return 0, false, fmt.Errorf("list models: %w", err)
	}
	var m struct {
		Data []struct {
			MaxModelLen *json.Number `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return 0, false, fmt.Errorf("list models of %s: decoding JSON: %w", c.BaseURL, err)
	}
	if len(m.Data) == 0 || m.Data[0].MaxModelLen == nil {
		return 0, false, nil
	}
	v, err := m.Data[0].MaxModelLen.Int64()
	if err != nil {
		return 0, false, fmt.Errorf("list models of %s: max_model_len %q is not a whole number", c.BaseURL, Excerpt(m.Data[0].MaxModelLen.String()))
	}
	return int(v), true, nil
}
