package remote_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops/remote"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"systemctl", "show", "-p", "ActiveState,SubState", "x.service"}, "systemctl show -p ActiveState,SubState x.service"},
		{[]string{""}, "''"},
		{[]string{"a b"}, "'a b'"},
		{[]string{"it's"}, `'it'\''s'`},
		{[]string{"$HOME", "`id`", "*", "~", "a=b"}, `'$HOME' '` + "`id`" + `' '*' '~' 'a=b'`},
		{[]string{"line\nbreak"}, "'line\nbreak'"},
		{nil, ""},
	} {
		if got := remote.Quote(c.argv); got != c.want {
			t.Errorf("Quote(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}

// A real shell splits Quote's output back into exactly the words.
func TestQuoteRoundTripSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	words := []string{"a b", "", "it's", `"dq"`, "$HOME", "${x:-y}", "`id`", "$(id)", "back\\slash", "\\n",
		"line1\nline2", "tab\tx", "ünïcødé ✓", "*", "?", "[a]", ";", "|", "&&", ">f", "<f", "#c", "~", "~root",
		"a=b", "(", ")", "{", "}", "!", "--", "-n", "'", "''", "\x01\x7f"}
	out, err := exec.Command(sh, "-c", "printf '%s\\0' "+remote.Quote(words)).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(words, "|") || len(got) != len(words) {
		t.Fatalf("sh split Quote's output into\n%q\nwant\n%q", got, words)
	}
	// An assignment-looking first word stays a command word.
	out, _ = exec.Command(sh, "-c", remote.Quote([]string{"X=1", "true"})+" 2>&1; echo $?").Output()
	if !strings.Contains(string(out), "127") {
		t.Fatalf("X=1 as a first word ran as an assignment: %q", out)
	}
}
