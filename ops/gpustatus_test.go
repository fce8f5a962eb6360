package ops_test

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// `gpu status` on the lab's shared node: a table of GPUs and a table of
// holders, each with column headers; every holder row says which GPU it
// holds, and that GPU's row lists its PID and the service it is for.
func TestGPUStatusTables(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(lab.Fault{Name: "orphans"}), nil)
	st, err := r.rb.GPUStatus(testkit.Context(t, 60*time.Second), "", ops.Discard)
	if err != nil || len(st.Details) == 0 {
		t.Fatalf("gpu status: %v %q", err, st.Details)
	}
	block := st.Details[0]
	lines := strings.Split(block, "\n")
	gpuHeader, holderHeader := -1, -1
	for i, l := range lines {
		switch strings.Join(strings.Fields(l), " ") {
		case "GPU USED MiB TOTAL MiB SERVICE HELD BY (PID)":
			gpuHeader = i
		case "PID GPU MiB KIND STATE WHOSE COMMAND":
			holderHeader = i
		}
	}
	if gpuHeader < 0 || holderHeader < gpuHeader {
		t.Fatalf("no column headers for GPUs and holders:\n%s", block)
	}
	gpuRow := map[string][]string{} // GPU index -> its row's fields
	for _, l := range lines[gpuHeader+1 : holderHeader] {
		if f := strings.Fields(l); len(f) == 5 {
			gpuRow[f[0]] = f
		}
	}
	if len(gpuRow) != 8 || gpuRow["0"][3] != "qwen" || gpuRow["4"][3] != "coder" {
		t.Fatalf("GPU rows %v: want 8, GPU 0 for qwen and GPU 4 for coder:\n%s", gpuRow, block)
	}
	engines := 0
	for _, l := range lines[holderHeader+1:] {
		f := strings.Fields(l)
		if len(f) < 7 || f[3] != "engine" {
			continue
		}
		engines++
		pid, on := f[0], f[1]
		row, ok := gpuRow[on]
		if !ok {
			t.Errorf("holder %s: GPU %q is not a GPU of the node:\n%s", pid, on, block)
			continue
		}
		if !strings.Contains(","+row[4]+",", ","+pid+",") {
			t.Errorf("holder %s says it holds GPU %s, whose row lists %s", pid, on, row[4])
		}
		if !strings.HasPrefix(f[5], row[3]+"'s:") {
			t.Errorf("holder %s on %s's GPU %s is said to be %s", pid, row[3], on, strings.Join(f[5:], " "))
		}
	}
	if engines < 8 {
		t.Errorf("%d engine holders listed, want one per GPU at least:\n%s", engines, block)
	}
}
