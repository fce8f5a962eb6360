package arch

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// hypothetical names ARCHITECTURE.md uses in its example of adding a
// command: they are meant not to exist.
var hypothetical = map[string]bool{"commands/mtp_draft.go": true, "ops/draft.go": true}

// codeSpan is a name in backquotes that may be a path of the module:
// lower-case words joined by slashes, optionally ending in a .go file.
var codeSpan = regexp.MustCompile("`([a-z][a-z0-9_]*(?:/[a-z0-9_]+)*(?:/[a-z0-9_]+\\.go|\\.go)?)`")

// TestArchitectureNamesExist fails when ARCHITECTURE.md names a package or
// a file the repository no longer has: the map is kept true in the same
// change as the code.
func TestArchitectureNamesExist(t *testing.T) {
	root := filepath.Join("..", "..")
	text, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			top[e.Name()] = true
		}
	}
	// Every room of the Rooms table (its first column) must exist, whatever
	// its first word; elsewhere a name counts as a path when its first word
	// is a folder of the module.
	checked := 0
	for _, line := range strings.Split(string(text), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			top[strings.SplitN(m[1], "/", 2)[0]] = true
		}
	}
	for _, m := range codeSpan.FindAllStringSubmatch(string(text), -1) {
		name := m[1]
		first, _, _ := strings.Cut(name, "/")
		if !top[first] || hypothetical[name] {
			continue // a word, not a path of ours
		}
		checked++
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err != nil {
			t.Errorf("ARCHITECTURE.md names %s, which does not exist", name)
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d names: the pattern no longer finds the paths", checked)
	}
}
