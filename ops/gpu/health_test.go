package gpu

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func sample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "health", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The health reads parse nvidia-smi's and the kernel log's real formats
// (testdata/health/README.md says where each comes from), unknown values
// as unknown, and the verdict follows what NVIDIA's documents say each
// fact calls for.
func TestHealthFromSamples(t *testing.T) {
	hs, err := ParseHealth(sample(t, "query-gpu.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 4 {
		t.Fatalf("%d GPUs, want 4", len(hs))
	}
	g0, g2, g3 := hs[0], hs[2], hs[3]
	if *g0.Persistence != true || *g0.TempC != 41 || *g0.PowerW != 312.45 || *g0.UsedMiB != 74213 || len(g0.Throttle) != 1 || g0.Throttle[0] != "sw_power_cap" {
		t.Errorf("GPU 0 parsed as %+v", g0)
	}
	if *g2.Persistence || *g2.PCIe.Width != 8 || *g2.PCIe.WidthMax != 16 || *g2.ECC.CorrectedVolatile != 3 || len(g2.Throttle) != 2 {
		t.Errorf("GPU 2 parsed as %+v", g2)
	}
	if g3.Persistence != nil || g3.TempC != nil || g3.Throttle != nil || g3.ECC.UncorrectedVolatile != nil || g3.PCIe.Gen != nil {
		t.Errorf("GPU 3's [N/A] figures should be unknown (nil): %+v", g3)
	}
	if g0.RetiredPending != nil {
		t.Errorf("retired_pages.pending [N/A] should be unknown")
	}
	if err := ParseRemap(sample(t, "remapped-rows.csv"), hs); err != nil {
		t.Fatal(err)
	}
	if p := hs[1].Remap.Pending; p == nil || !*p || *hs[1].Remap.Uncorrectable != 1 {
		t.Errorf("GPU 1 remap %+v, want 1 uncorrectable, pending", hs[1].Remap)
	}
	if hs[3].Remap.Pending != nil {
		t.Errorf("GPU 3 remap pending should be unknown")
	}
	evs := ParseXIDs(sample(t, "journal-k.txt"))
	if len(evs) != 4 {
		t.Fatalf("%d Xid events, want 4: %+v", len(evs), evs)
	}
	if e := evs[2]; e.XID != 79 || e.PCI != "0000:58:00" || !e.At.Equal(time.Date(2026, 3, 3, 4, 40, 51, 0, time.UTC)) || e.Text != "pid='<unknown>', name=<unknown>, GPU has fallen off the bus." {
		t.Errorf("Xid 79 parsed as %+v", e)
	}
	if e := evs[3]; e.XID != 13 || e.PCI != "0000:18:00" {
		t.Errorf("an old driver's line (no PCI: prefix) parsed as %+v", e)
	}
	dm := ParseXIDs(sample(t, "dmesg-iso.txt"))
	if len(dm) != 2 || dm[1].XID != 119 || dm[1].At.IsZero() {
		t.Errorf("dmesg --time-format iso parsed as %+v", dm)
	}
	AttachXIDs(hs, evs)
	if len(hs[1].XIDs) != 2 || len(hs[2].XIDs) != 1 || len(hs[0].XIDs) != 1 || len(hs[3].XIDs) != 0 {
		t.Errorf("XIDs attached by PCI address: %d %d %d %d", len(hs[0].XIDs), len(hs[1].XIDs), len(hs[2].XIDs), len(hs[3].XIDs))
	}
	now := time.Date(2026, 3, 3, 6, 0, 0, 0, time.UTC)
	for i, want := range []Verdict{Healthy, ResetNeeded, RebootNeeded, Healthy} {
		if v, fs := Judge(hs[i], JudgeOptions{Now: now}); v != want {
			t.Errorf("GPU %d: verdict %s, want %s (%+v)", i, v, want, fs)
		}
	}
	// A day later the XIDs are history: GPU 2 is degraded by its link and
	// its thermal slowdown, GPU 1 still has its pending remap.
	later := now.Add(25 * time.Hour)
	if v, _ := Judge(hs[2], JudgeOptions{Now: later}); v != Degraded {
		t.Errorf("GPU 2 a day later: %s, want degraded", v)
	}
	if v, _ := Judge(hs[1], JudgeOptions{Now: later}); v != ResetNeeded {
		t.Errorf("GPU 1 a day later: %s, want reset needed (remap pending)", v)
	}
}

// Memory held with no compute process calls for a reset; an idle GPU's
// link at gen 1 is no degradation, a busy one's is.
func TestJudgeMemoryAndIdleLink(t *testing.T) {
	i := func(v int) *int { return &v }
	h := Health{UsedMiB: i(60000), Apps: 0, UtilPct: i(0), PCIe: Link{Gen: i(1), GenMax: i(5), Width: i(16), WidthMax: i(16)}}
	if v, fs := Judge(h, JudgeOptions{Now: time.Now()}); v != ResetNeeded || len(fs) != 1 {
		t.Errorf("stranded memory: %s %+v, want reset needed alone", v, fs)
	}
	h.Apps, h.UtilPct = 1, i(90)
	if v, _ := Judge(h, JudgeOptions{Now: time.Now()}); v != Degraded {
		t.Errorf("a busy GPU at gen 1 of 5: %s, want degraded", v)
	}
	h.Apps = -1 // unknown: never judged as held by no process
	h.UtilPct = i(0)
	if v, _ := Judge(h, JudgeOptions{Now: time.Now()}); v != Healthy {
		t.Errorf("apps unknown, idle: %s, want healthy", v)
	}
}

func FuzzParseHealth(f *testing.F) {
	f.Add(string(sampleF(f, "query-gpu.csv")))
	f.Add(string(sampleF(f, "journal-k.txt")))
	f.Fuzz(func(t *testing.T, s string) {
		hs, _ := ParseHealth([]byte(s))
		_ = ParseRemap([]byte(s), hs)
		AttachXIDs(hs, ParseXIDs([]byte(s)))
		for _, h := range hs {
			Judge(h, JudgeOptions{Now: time.Now()})
		}
	})
}

func sampleF(f *testing.F, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "health", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}
