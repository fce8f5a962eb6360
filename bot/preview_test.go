package bot

import (
	"github.com/opsbot/opsbot/auth"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opsbot/opsbot/commands"
)

// The confirmation of mtp per-load names, from the configuration in
// effect, every file the change writes: the adaptive config, then the unit.
func TestPerLoadConfirmationNamesItsFiles(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, countingBackend(&ran), roles)
	auth, err := auth.New("none", roles)
	if err != nil {
		t.Fatal(err)
	}
	h.disp.Reload(auth, commands.Options{Services: []commands.ServiceRef{
		{Name: "qwen", Host: "gpu1", Unit: "sglang-qwen.service", Engine: "sglang", Adaptive: "/etc/sglang/qwen-adaptive.json"}}, Hosts: []string{"gpu1"}})
	r := h.handle("olga", "mtp per-load qwen 1:7 8:5")
	if r.Outcome != NeedsConfirm || !strings.Contains(r.Text, "write two files: SGLang's adaptive config /etc/sglang/qwen-adaptive.json, then the unit sglang-qwen.service") {
		t.Fatalf("%s: %s", r.Outcome, r.Text)
	}
	if ran.Load() != 0 {
		t.Fatal("a confirmation ran the command")
	}
}
