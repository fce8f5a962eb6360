package ops

import (
	"strings"
	"testing"
)

// A unit that crashed once and waits for Restart= has not been restarted: it
// is a crash at start, never "a restart loop (NRestarts 0)".
func TestStartErrorWording(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e         StartError
		want, not string
	}{
		{StartError{Unit: "u.service", State: "activating/auto-restart"}, "u.service crashed while starting (activating/auto-restart, before any automatic restart)", "loop"},
		{StartError{Unit: "u.service", Loop: true, Restarts: 3, State: "activating/auto-restart"}, "u.service is in a restart loop (NRestarts 3)", "crashed"},
		{StartError{Unit: "u.service", State: "failed/failed"}, "u.service failed to start (failed/failed)", "loop"},
	} {
		got := tc.e.Error()
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, tc.not) {
			t.Errorf("%+v: %q, want it to begin %q without %q", tc.e, got, tc.want, tc.not)
		}
	}
}
