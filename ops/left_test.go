package ops

import (
	"strings"
	"testing"
)

// TestLeftSentenceSaysWhyUnknown: a service left in an unknown state says
// why: its host did not answer, or this process no longer holds it and so
// sent the host nothing more (then with the unit text in place).
func TestLeftSentenceSaysWhyUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l    ServiceLeft
		want string
	}{
		{ServiceLeft{Service: "qwen", State: LeftUnknown, Changed: true}, "qwen is in an unknown state (its host did not answer)"},
		{ServiceLeft{Service: "qwen", State: LeftUnknown, Changed: true, Unit: UnitNew, Steps: 10, notRead: true},
			"qwen was not checked: this opsbot process no longer holds it, so it sent its host nothing more; its unit has the new text (steps 10)"},
		{ServiceLeft{Service: "qwen", State: LeftUnknown, Unit: UnitOld, Steps: 3, notRead: true},
			"its unit has the previous text (steps 3); the job changed nothing"},
	} {
		if got := tc.l.Sentence(); !strings.Contains(got, tc.want) {
			t.Errorf("Sentence() = %q, want it to contain %q", got, tc.want)
		}
	}
}
