package config

import (
	"testing"
	"time"
)

// TestDurationPrintsAsWritten: durations print the way operators write them
// (whole days as 90d, no zero units), and every form reads back as the same
// duration.
func TestDurationPrintsAsWritten(t *testing.T) {
	for in, want := range map[string]string{
		"90d": "90d", "2160h": "90d", "24h": "1d", "36h": "36h", "1h30m": "1h30m", "15m": "15m",
		"60s": "1m", "30s": "30s", "1m30s": "1m30s", "1h0m5s": "1h0m5s", "1500ms": "1.5s", "0s": "0s",
	} {
		d, err := ParseDuration(in)
		if err != nil {
			t.Fatalf("ParseDuration(%q): %v", in, err)
		}
		got := Duration(d).String()
		if got != want {
			t.Errorf("%s prints as %q, want %q", in, got, want)
		}
		back, err := ParseDuration(got)
		if err != nil || back != d {
			t.Errorf("%q reads back as %v, %v; want %v", got, back, err, d)
		}
		if y, err := Duration(d).MarshalYAML(); err != nil || y != want {
			t.Errorf("MarshalYAML(%s) = %v, %v; want %q", in, y, err, want)
		}
	}
	if got := Duration(-90 * time.Minute).String(); got != "-1h30m" {
		t.Errorf("-90m prints as %q", got)
	}
}
