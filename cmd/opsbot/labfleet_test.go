package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/testkit"
)

// `opsbot lab --per-node` is refused, with the flag's range and exit 2,
// where it means nothing or is out of range, and so is --services beyond
// what a fleet takes; nothing is started.
func TestLabFleetFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "--per-node", "2"}, "--per-node goes with --services"},
		{[]string{"lab", "--services", "8", "--per-node", "9"}, "--per-node must be 1 to 8, got 9"},
		{[]string{"lab", "--services", "8", "--per-node", "-1"}, "--per-node must be 1 to 8, got -1"},
		{[]string{"lab", "--services", "1025"}, "--services must be 1 to 1024, got 1025"},
	} {
		code, out, errs := runArgs(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errs, c.want)
		}
	}
}

// `opsbot lab --services 4 --per-node 2` runs 4 services on 2 nodes, each
// node and each container an SSH host of its own, writes a config that
// names them all, and says once every service serves.
func TestLabFleetPerNode(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir) // where the fleet keeps its keys and host files: checked empty at the end
	cfgPath := filepath.Join(dir, "fleet.yaml")
	ctx, cancel := context.WithCancel(testkit.Context(t, 2*time.Minute))
	defer cancel()
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	code := -1
	go func() {
		defer wg.Done()
		code = run(ctx, []string{"lab", "--services", "4", "--per-node", "2", "--config-out", cfgPath}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	out, err := readUntil(pr, "every service serves")
	if err != nil {
		t.Fatalf("lab output %q: %v", out, err)
	}
	if !strings.Contains(out, "every service serves (4 on 2 nodes)") || !strings.Contains(out, "config written to "+cfgPath) {
		t.Errorf("lab output %q", out)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var svcs, hosts []string
	for n := range cfg.Services {
		svcs = append(svcs, n)
	}
	for n := range cfg.Hosts {
		hosts = append(hosts, n)
	}
	if len(svcs) != 4 || len(hosts) != 6 {
		t.Errorf("config: services %v on hosts %v, want 4 on 6 (2 nodes and 4 containers)", svcs, hosts)
	}
	for _, want := range []string{"n1-s1", "n1-s2", "n2-s1", "n2-s2"} {
		if _, ok := cfg.Services[want]; !ok {
			t.Errorf("config lacks service %s: %v", want, svcs)
		}
	}
	cancel()
	go io.Copy(io.Discard, pr)
	wg.Wait()
	if code != 0 {
		t.Errorf("lab exited %d after its context ended, want 0", code)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "opsbot-fleet-*")); len(left) != 0 {
		t.Errorf("the lab left %v", left)
	}
	_ = os.Remove(cfgPath)
}

// readUntil reads r until a line starting with prefix has been read, and
// returns what it read.
func readUntil(r io.Reader, prefix string) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		s := b.String()
		if i := strings.Index(s, prefix); i >= 0 && (i == 0 || s[i-1] == '\n') && strings.Contains(s[i:], "\n") {
			return s, nil
		}
		if err != nil {
			return s, err
		}
	}
}
