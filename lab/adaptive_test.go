package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// The lab's SGLang reads --speculative-adaptive-config as the pinned SGLang does, on the
// host: the old flat format stops the engine at start with SGLang's own error in the unit's
// journal. With the cap raised to 64, a table whose deep slot ("1": steps 11) ends below
// batch 64 fits the GPU when launched at its shallow steps (0), since each candidate's CUDA
// graphs are captured only where its slot reaches; launched at steps 11 it does not, the
// launch steps being captured at every batch size. Serving, the journal lists each adaptive
// state it built and /server_info reports the steps running and the graphs' memory.
func TestAdaptiveFileOnTheLab(t *testing.T) {
	t.Parallel()
	l := readyLab(t, fastOpts())
	h := l.Host("gpu1")
	c := dialHost(t, l, "gpu1")
	const cfgPath = "/etc/sglang/qwen-adaptive.json"
	deploy := func(steps int, file string) {
		t.Helper()
		if err := h.WriteFile(cfgPath, []byte(file)); err != nil {
			t.Fatal(err)
		}
		unit := strings.Replace(defaultUnit("sglang"), "    --speculative-num-steps 3 \\\n    --speculative-eagle-topk 1 \\\n    --speculative-num-draft-tokens 4 \\\n",
			fmt.Sprintf("    --speculative-num-steps %d \\\n    --speculative-eagle-topk 1 \\\n    --speculative-num-draft-tokens %d \\\n"+
				"    --max-running-requests 64 \\\n    --speculative-adaptive --speculative-adaptive-config %s \\\n", steps, steps+1, cfgPath), 1)
		if !strings.Contains(unit, "--speculative-adaptive-config") {
			t.Fatalf("the default unit changed; the test cannot add the adaptive flags:\n%s", unit)
		}
		if err := h.WriteFile(unitDir+"/"+qwenUnit, []byte(unit)); err != nil {
			t.Fatal(err)
		}
		c.must(t, "systemctl", "daemon-reload")
		c.must(t, "systemctl", "reset-failed", qwenUnit)
		c.must(t, "systemctl", "restart", qwenUnit)
	}
	journalHas := func(line string) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, "the journal to show "+line, func() bool {
			return strings.Contains(strings.Join(h.Journal(qwenUnit), "\n"), line)
		})
	}
	deploy(3, `{"candidate_steps": [1, 3, 5]}`)
	journalHas(`ValueError: speculative_adaptive_config must contain at least one integer-string BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: ['candidate_steps']`)

	const table = `{"1": {"candidate_steps": [11]}, "64": {"candidate_steps": [0]}}`
	deploy(11, table)
	journalHas("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 10.12 GiB.")

	deploy(0, table)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatalf("launched at steps 0: %v\n%s", err, strings.Join(h.Journal(qwenUnit), "\n"))
	}
	journalHas("Built adaptive runtime state steps=11: ")
	resp, err := http.Get(l.Topology().Services[0].URL + "/server_info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		States []struct {
			Steps  *int `json:"speculative_num_steps"`
			Memory struct {
				Graph float64 `json:"cuda_graph"`
			} `json:"memory_usage"`
		} `json:"internal_states"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || len(info.States) == 0 {
		t.Fatalf("server_info: %v", err)
	}
	// Steps 11 reaches batch 56 (the last graph below 64): 56 x 12 tokens x 13.5 MiB.
	if st := info.States[0]; st.Steps == nil || *st.Steps != 0 || st.Memory.Graph != 8.86 {
		t.Fatalf("internal state %+v: want steps 0 and 8.86 GB of graphs", st)
	}
}
