package console

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// A chart posted in a thread is saved as a new file in ChartDir and its path
// printed where the image would show; a second chart of the same name in
// the same second gets a new file, never the first one's.
func TestConsoleSavesCharts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out bytes.Buffer
	c := New(&out)
	c.ChartDir = dir
	ctx := context.Background()
	ref, _ := c.Post(ctx, Room, bot.Message{Kind: bot.KindStatus, Text: "#7 running"})
	png1, png2 := []byte("\x89PNG first"), []byte("\x89PNG second")
	c.Reply(ctx, ref, bot.Message{Kind: bot.KindResult, Text: "Result of #7", Image: &bot.Image{Name: bot.ChartName(7), PNG: png1}})
	c.Reply(ctx, ref, bot.Message{Kind: bot.KindResult, Text: "Result of #7", Image: &bot.Image{Name: bot.ChartName(7), PNG: png2}})
	var paths []string
	for _, line := range strings.Split(out.String(), "\n") {
		if p, ok := strings.CutPrefix(line, "    chart: "); ok {
			paths = append(paths, p)
		}
	}
	if len(paths) != 2 || paths[0] == paths[1] || strings.Contains(out.String(), "[image") {
		t.Fatalf("printed:\n%s\nwant two chart lines with different paths", out.String())
	}
	for i, want := range [][]byte{png1, png2} {
		if filepath.Dir(paths[i]) != dir || !strings.HasPrefix(filepath.Base(paths[i]), "chart-job-7-") {
			t.Errorf("chart %d saved as %s, want chart-job-7-... in %s", i, paths[i], dir)
		}
		if got, err := os.ReadFile(paths[i]); err != nil || !bytes.Equal(got, want) {
			t.Errorf("chart %d: %q %v", i, got, err)
		}
	}
	// A directory gone since: the line says the chart was not saved, and why.
	c.ChartDir = filepath.Join(dir, "gone")
	out.Reset()
	c.Reply(ctx, ref, bot.Message{Kind: bot.KindResult, Text: "Result", Image: &bot.Image{Name: bot.ChartName(8), PNG: png1}})
	if !strings.Contains(out.String(), "    chart not saved: save chart "+filepath.Join(dir, "gone", "chart-job-8-")) {
		t.Errorf("printed:\n%s", out.String())
	}
}

// SaveChart names files after the chart and the UTC time, counting up past
// files that exist, and never replaces one.
func TestSaveChartNeverOverwrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at := time.Date(2026, 12, 4, 16, 5, 9, 0, time.FixedZone("CET", 3600))
	if err := os.WriteFile(filepath.Join(dir, "chart-job-1-20261204-150509.png"), []byte("earlier"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"chart-job-1-20261204-150509-2.png", "chart-job-1-20261204-150509-3.png"} {
		p, err := SaveChart(dir, "chart-job-1.png", []byte{byte(i)}, at)
		if err != nil || p != filepath.Join(dir, want) {
			t.Fatalf("save %d: %s %v, want %s", i, p, err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "chart-job-1-20261204-150509.png")); string(b) != "earlier" {
		t.Errorf("the earlier file was replaced: %q", b)
	}
	// A name cannot lead out of the directory.
	if p, err := SaveChart(dir, "../x.png", nil, at); err != nil || filepath.Dir(p) != dir {
		t.Errorf("../x.png saved as %s (%v)", p, err)
	}
}

// CheckChartDir refuses what cannot take a chart, saying why, and leaves
// nothing behind in a directory it accepts.
func TestCheckChartDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckChartDir(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the check left files behind: %v", ents)
	}
	for _, tc := range []struct {
		dir, says string
		is        error
	}{
		{filepath.Join(dir, "missing"), "the directory does not exist", fs.ErrNotExist},
		{file, "it is not a directory", errNotDir},
	} {
		err := CheckChartDir(tc.dir)
		var ce *ChartDirError
		if !errors.As(err, &ce) || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), "charts cannot be saved in "+tc.dir+": "+tc.says) {
			t.Errorf("%s: %v", tc.dir, err)
		}
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(ro, 0o700) })
		if err := CheckChartDir(ro); !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "no permission to write there") {
			t.Errorf("read-only dir: %v", err)
		}
	}
}
