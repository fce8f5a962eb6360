package commands

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestHelpGolden renders the overview and every topic and compares them with
// testdata/help.golden (go test ./commands -run TestHelpGolden -update rewrites it).
func TestHelpGolden(t *testing.T) {
	var b strings.Builder
	for _, topic := range append([]string{""}, topics()...) {
		text, err := Help(topic)
		if err != nil {
			t.Fatalf("Help(%q): %v", topic, err)
		}
		b.WriteString("===== help " + topic + "\n")
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString("\n")
		}
	}
	golden := filepath.Join("testdata", "help.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("help differs from %s (run with -update after checking the change):\n%s", golden, b.String())
	}
}

func TestHelpContent(t *testing.T) {
	over, err := Help("")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Specs() {
		if !strings.Contains(over, s.Usage+"\n      "+s.Summary+" ["+s.Role.String()+"]") {
			t.Errorf("overview lacks %s with its summary and role", s.Path)
		}
	}
	for _, s := range Specs() {
		text, err := Help(s.Path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(text, s.Usage+"\n") || !strings.Contains(text, "Role: "+s.Role.String()) {
			t.Errorf("help %s lacks its usage or role:\n%s", s.Path, text)
		}
		for _, ex := range s.Examples {
			if !strings.Contains(text, "  "+ex+"\n") {
				t.Errorf("help %s lacks example %q", s.Path, ex)
			}
		}
		if got := strings.Contains(text, "asks for confirmation: yes"); got != s.Confirm {
			t.Errorf("help %s says confirmation %v, spec %v", s.Path, got, s.Confirm)
		}
		if got := strings.Contains(text, "Changes things: yes"); got != s.Mutating {
			t.Errorf("help %s says mutating %v, spec %v", s.Path, got, s.Mutating)
		}
	}
	// A group shows each of its commands; topics are normalised like commands.
	svc, _ := Help("svc")
	for _, p := range []string{"svc start", "svc stop", "svc restart", "svc status", "svc logs"} {
		if !strings.Contains(svc, Lookup(p).Usage) {
			t.Errorf("help svc lacks %s", p)
		}
	}
	if a, _ := Help("/MTP\u00a0Steps "); a != mustHelp(t, "mtp steps") {
		t.Error("Help does not normalise its topic")
	}
}

func mustHelp(t *testing.T, topic string) string {
	t.Helper()
	s, err := Help(topic)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHelpUnknown(t *testing.T) {
	_, err := Help("sweeep")
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("Help(sweeep) = %v, want *UsageError", err)
	}
	if ue.Suggestion != "did you mean `help sweep`?" || ue.Usage != "usage: help [COMMAND]" {
		t.Errorf("got %+v", *ue)
	}
}
