package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// TestMain lets a test run this binary as opsbot itself: with OPSBOT_TEST_MAIN
// set, the process is `opsbot` with the arguments after "--", signals handled
// as main handles them.
func TestMain(m *testing.M) {
	if os.Getenv("OPSBOT_TEST_MAIN") == "1" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		ctx, stop := signalContext()
		code := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// Killed mid-job with SIGKILL, opsbot finds the job interrupted at its next
// start and says so; the unit on the host is the old text or the new one.
func TestKilledMidJobIsInterruptedAtNextStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A load that takes an hour of lab time: the job waits in "wait until ready".
	l, err := lab.Start(ctx, lab.Options{Faults: []lab.Fault{{Name: "slow-load", Duration: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	cfg, err := l.WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	unitPath := "/etc/systemd/system/" + l.Topology().Services[0].Unit
	before, err := l.Host("gpu1").ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^$", "--", "run", "--config", cfg, "--json", "mtp steps 10")
	child.Env = append(os.Environ(), "OPSBOT_TEST_MAIN=1")
	var childOut bytes.Buffer
	child.Stdout, child.Stderr = &childOut, &childOut
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		evs, _ := st.Events(ctx, 1)
		waiting := false
		for _, e := range evs {
			waiting = waiting || strings.HasPrefix(e.Step, "wait until ready")
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			child.Process.Kill()
			t.Fatalf("the job never got to wait until ready:\n%s", childOut.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the store for a condition
	}
	st.Close()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()

	var out, errb bytes.Buffer
	if code := run(ctx, []string{"run", "--config", cfg, "--json", "jobs all"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("next start: exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), "#1 `mtp steps 10 qwen` interrupted") {
		t.Fatalf("jobs after the crash do not show #1 interrupted:\n%s", out.String())
	}
	after, err := l.Host("gpu1").ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(strings.Replace(string(before), "--speculative-num-steps 3", "--speculative-num-steps 10", 1),
		"--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 11", 1)
	if string(after) != string(before) && string(after) != want {
		t.Fatalf("unit is neither the old nor the new text:\n%s", after)
	}
}
