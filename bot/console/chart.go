package console

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// maxChartTries bounds the names SaveChart tries ("-2" ... "-N") before it
// gives up: a directory with that many charts of one job in one second is
// not one to write more into.
const maxChartTries = 100

// ChartDirError says why charts cannot be written to Dir; Err is the file
// system's error.
type ChartDirError struct {
	Dir string
	Err error
}

func (e *ChartDirError) Error() string {
	what := "it cannot be written to"
	switch {
	case errors.Is(e.Err, fs.ErrNotExist):
		what = "the directory does not exist"
	case errors.Is(e.Err, errNotDir):
		what = "it is not a directory"
	case errors.Is(e.Err, fs.ErrPermission):
		what = "no permission to write there"
	}
	return fmt.Sprintf("charts cannot be saved in %s: %s (%v)", e.Dir, what, e.Err)
}

func (e *ChartDirError) Unwrap() error { return e.Err }

var errNotDir = errors.New("not a directory")

// CheckChartDir returns nil when a chart can be saved in dir ("": the
// current directory): it is a directory and a file can be created in it
// (one is created and removed again); else a *ChartDirError. Call it before
// running anything that makes a chart.
func CheckChartDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return &ChartDirError{Dir: dir, Err: err}
	}
	if !fi.IsDir() {
		return &ChartDirError{Dir: dir, Err: errNotDir}
	}
	f, err := os.CreateTemp(dir, ".opsbot-chart-check-*")
	if err != nil {
		return &ChartDirError{Dir: dir, Err: err}
	}
	name := f.Name()
	cerr := f.Close()
	if err := os.Remove(name); err != nil {
		return &ChartDirError{Dir: dir, Err: err}
	}
	if cerr != nil {
		return &ChartDirError{Dir: dir, Err: cerr}
	}
	return nil
}

// SaveChart writes png to a new file in dir ("": the current directory)
// named after name (the job's chart, bot.ChartName) and the time it is
// saved, UTC: "chart-job-7-20261204-153501.png", or "...-2.png", "...-3.png"
// when that exists. It never replaces a file. It returns the file's path
// (dir joined with its name); on an error no file is left behind.
func SaveChart(dir, name string, png []byte, now time.Time) (string, error) {
	base := strings.TrimSuffix(filepath.Base(name), ".png") + "-" + now.UTC().Format("20060102-150405")
	for i := 1; i <= maxChartTries; i++ {
		file := base + ".png"
		if i > 1 {
			file = fmt.Sprintf("%s-%d.png", base, i)
		}
		path := filepath.Join(dir, file)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("save chart %s: %w", path, err)
		}
		_, werr := f.Write(png)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(path)
			return "", fmt.Errorf("save chart %s: %w", path, werr)
		}
		return path, nil
	}
	return "", fmt.Errorf("save chart %s in %s: %d files of that name exist", base, dir, maxChartTries)
}
