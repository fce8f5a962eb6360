package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestExplainNamesCause(t *testing.T) {
	t.Parallel()
	err := &jobStopped{cause: ErrCancelled, err: fmt.Errorf("wait until ready: %w", context.Canceled)}
	if got := Explain(err); !strings.Contains(got, "cancelled") || !strings.Contains(got, "wait until ready") {
		t.Fatalf("Explain = %q", got)
	}
	if got := Explain(errors.New("stop qwen on gpu1: exit 1")); got != "stop qwen on gpu1: exit 1" {
		t.Fatalf("Explain = %q", got)
	}
}
