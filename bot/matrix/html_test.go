package matrix

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opsbot/opsbot/config"
)

// TestToHTML: the bot's light markup becomes HTML, and everything else,
// text from users and hosts included, stays text.
func TestToHTML(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"*Result of #3* `mtp steps 10`", "<strong>Result of #3</strong> <code>mtp steps 10</code>"},
		{"a\nb", "a<br/>b"},
		{"<script>x</script> & `<b>`", "&lt;script&gt;x&lt;/script&gt; &amp; <code>&lt;b&gt;</code>"},
		{"`*not bold*` *bold*", "<code>*not bold*</code> <strong>bold</strong>"},
		{"2*3 and `unclosed", "2*3 and `unclosed"},
		// A preformatted block (report.Pre): one <pre>, its lines and spaces as they are,
		// no markup inside.
		{"GPU health: 1 healthy\n```\npve GPU 0: healthy\n  next: *x* `y` <z>\n```\nafter",
			"GPU health: 1 healthy<pre><code>pve GPU 0: healthy\n  next: *x* `y` &lt;z&gt;\n</code></pre>after"},
		{"```\ncut short", "<pre><code>cut short\n</code></pre>"},
	} {
		if got := toHTML(c.in); got != c.want {
			t.Errorf("toHTML(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestNewRefuses: New refuses what it cannot serve, naming each problem;
// Run refuses to start without the bot's store (Attach).
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	good := config.Matrix{Enabled: true, Homeserver: "http://127.0.0.1:8008", UserID: "@opsbot:example.org",
		Password: "pw", Rooms: []string{"!abc:example.org"}}
	a, err := New(good, Options{})
	if err != nil {
		t.Fatalf("a good config: %v", err)
	}
	if err := a.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "the store is required") {
		t.Errorf("Run without the store: %v", err)
	}
	bad := good
	bad.Homeserver, bad.UserID, bad.Password, bad.Rooms, bad.Encryption = "ftp://x", "opsbot", "", nil, true
	_, err = New(bad, Options{})
	for _, want := range []string{"matrix.homeserver", "matrix.user_id", "matrix.access_token or matrix.password",
		"matrix.rooms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want it to name %s", err, want)
		}
	}
	// matrix.encryption is refused only by a build without it.
	if named := strings.Contains(err.Error(), "matrix.encryption"); named == config.MatrixEncryptionBuilt {
		t.Errorf("built with encryption %v: err %v", config.MatrixEncryptionBuilt, err)
	}
}

// TestHead: long output is cut to whole lines and at most maxInline bytes of
// valid UTF-8.
func TestHead(t *testing.T) {
	t.Parallel()
	if got := head("a\nb\nc", 2); got != "a\nb" {
		t.Errorf("head: %q", got)
	}
	long := strings.Repeat("é", maxInline)
	if got := head(long, 20); len(got) > maxInline || !utf8Valid(got) {
		t.Errorf("head of a long line: %d bytes, valid %v", len(got), utf8Valid(got))
	}
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }
