package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testrun"
)

// readmeLabCommands returns the README's `go run ./cmd/opsbot run|demo`
// lines of its sh blocks that run on the lab, as argv (after the binary),
// each with its line for messages.
func readmeLabCommands(t *testing.T) (cmds [][]string, lines []string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	inSh := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			inSh = l == "```sh"
			continue
		case !inSh:
			continue
		}
		rest, ok := strings.CutPrefix(l, "go run ./cmd/opsbot ")
		if !ok || !(strings.HasPrefix(rest, "demo") || strings.HasPrefix(rest, "run --lab")) {
			continue
		}
		args, err := shellWords(rest)
		if err != nil {
			t.Fatalf("README line %q: %v", l, err)
		}
		cmds, lines = append(cmds, args), append(lines, l)
	}
	return cmds, lines
}

// shellWords splits a line as sh would for the README's commands: words,
// 'single-quoted' words, and a # comment after a blank ending the line.
func shellWords(s string) ([]string, error) {
	var out []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteByte(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == ' ' || c == '\t':
			if inWord {
				out, inWord = append(out, w.String()), false
				w.Reset()
			}
		case c == '#' && !inWord:
			return out, nil
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, os.ErrInvalid
	}
	if inWord {
		out = append(out, w.String())
	}
	return out, nil
}

// readmeExit is the exit code a README command line says it ends with, in
// its comment ("# exits 1: ..."), 0 when it says none: a walkthrough may
// show a job that fails on purpose.
func readmeExit(line string) int {
	m := regexp.MustCompile(`#.*\bexits (\d+)\b`).FindStringSubmatch(line)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Every lab command README shows (`go run ./cmd/opsbot run --lab ...`,
// `demo`) runs as written and exits 0, or the code its comment names: the first command at its top, and
// those of "Try it". A --chart-dir, relative in README, lies in a fresh
// directory of the test's (it does not exist yet: the run creates it), so
// that the commands run side by side.
func TestReadmeLabCommandsRun(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	cmds, lines := readmeLabCommands(t)
	if len(cmds) < 5 {
		t.Fatalf("found %d lab commands in README, want the first one and Try it's:\n%s", len(cmds), strings.Join(lines, "\n"))
	}
	for i, args := range cmds {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			charts := ""
			for j := range args[:len(args)-1] {
				if args[j] == "--chart-dir" {
					charts = filepath.Join(t.TempDir(), args[j+1])
					args = append(append(append([]string(nil), args[:j+1]...), charts), args[j+2:]...)
					break
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out, errb bytes.Buffer
			want := readmeExit(lines[i])
			if code := run(ctx, args, strings.NewReader("mtp show\n"), &out, &errb); code != want {
				t.Errorf("%s\nexit %d, want %d\nstdout:\n%s\nstderr:\n%s", lines[i], code, want, out.String(), errb.String())
			}
			if charts != "" {
				if ents, err := os.ReadDir(charts); err != nil || len(ents) != 1 {
					t.Errorf("%s: %s holds %d files (%v), want the chart", lines[i], charts, len(ents), err)
				}
			}
		})
	}
}
