package ops_test

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// TestSSHDropDuringUnitWriteLeavesOldOrNewUnit drops the connection while
// `mtp steps` replaces the unit: during the upload of the new text (the unit
// is still the old one), right after the rename (the new one is in place but
// the job did not hear so) and at daemon-reload. Each time the unit on disk
// is exactly the old text or exactly the new one, no temporary file is left
// beside it, the service serves, and the job's final message says which text
// the unit has.
func TestSSHDropDuringUnitWriteLeavesOldOrNewUnit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stage   string
		wantNew bool // the unit on disk afterwards
	}{
		{"upload", false},
		{"write", true},
		{"reload", true},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			r := newRig(t, labOpts(lab.Fault{Name: "ssh-drop", Stage: tc.stage}), nil)
			before := r.unitText(t)
			want := strings.Replace(strings.Replace(before, "--speculative-num-steps 3", "--speculative-num-steps 10", 1),
				"--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 11", 1)
			ev := &events{}
			res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 10, false, ev)
			after := r.unitText(t)
			if after != before && after != want {
				t.Fatalf("unit is neither old nor new:\n%s", after)
			}
			if (after == want) != tc.wantNew {
				t.Fatalf("unit on disk is the new text: %v, want %v\n%s", after == want, tc.wantNew, ev.text())
			}
			names, lerr := r.lab.Host(r.svc.Host).ReadDir("/etc/systemd/system")
			if lerr != nil {
				t.Fatal(lerr)
			}
			for _, n := range names {
				if strings.Contains(n, ".opsbot-tmp-") {
					t.Errorf("temporary file left in /etc/systemd/system: %s", n)
				}
			}
			if !res.HasIncident(ops.IncidentConnectionLost) {
				t.Errorf("incidents %v lack connection_lost\n%s", res.Incidents, ev.text())
			}
			// The final message: a failed job says the unit is unchanged; a job
			// whose write landed goes on and reports the new steps.
			final := res.Summary
			if err != nil {
				final = err.Error()
			}
			switch {
			case tc.wantNew && (err != nil || !strings.Contains(res.Summary, "steps 3 -> 10")):
				t.Errorf("new unit in place, but the job says: %s\n%s", final, ev.text())
			case !tc.wantNew && (err == nil || !strings.Contains(err.Error(), "the unit on disk is the previous text (steps 3)")):
				t.Errorf("old unit in place, but the job says: %s\n%s", final, ev.text())
			}
			if u := r.lab.Host(r.svc.Host).Unit(r.svc.Unit); u.ActiveState != "active" {
				t.Errorf("service is %s after the job, want active\n%s", u.ActiveState, ev.text())
			}
			t.Logf("ssh-drop=%s: %s; incidents %v", tc.stage, final, res.Incidents)
		})
	}
}
