package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestMatrixRecoveryKeyRefuses: `opsbot matrix recovery-key` on a config
// without a matrix section, or on a store that has kept no keys for the
// account, exits 1 saying why, and prints no key. (The key itself is
// printed in TestServeMatrixEncrypted, after serve made it.)
func TestMatrixRecoveryKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	noMatrix := filepath.Join(dir, "plain.yaml")
	writeFile(t, noMatrix, "store: {path: opsbot.db}\n")
	withMatrix := filepath.Join(dir, "matrix.yaml")
	writeFile(t, withMatrix, `store: {path: opsbot.db}
matrix:
  enabled: true
  homeserver: http://127.0.0.1:1
  user_id: "@opsbot:example.org"
  password: pw
  rooms: ["!abc:example.org"]
`)
	for _, c := range []struct{ config, want string }{
		{noMatrix, "has no enabled matrix section"},
		{withMatrix, "keeps no encryption keys for @opsbot:example.org"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"matrix", "recovery-key", "--config", c.config}, strings.NewReader(""), &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 saying %q", c.config, code, stdout.String(), stderr.String(), c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"matrix", "recovery"}, strings.NewReader(""), &stdout, &stderr); code != 2 {
		t.Errorf("an unknown matrix subcommand: exit %d, %q", code, stderr.String())
	}
}
