package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// TestMain lets a test run this binary as opsbot itself: with OPSBOT_TEST_MAIN
// set, the process is `opsbot` with the arguments after "--", signals handled
// as main handles them.
func TestMain(m *testing.M) {
	if spec := os.Getenv(floodEnv); spec != "" {
		os.Exit(floodMain(spec))
	}
	if os.Getenv("OPSBOT_TEST_MAIN") == "1" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		if host := os.Getenv(machineEnv); host != "" {
			if err := becomeMachine(host); err != nil {
				fmt.Fprintln(os.Stderr, "opsbot test: become machine", host+":", err)
				os.Exit(125)
			}
		}
		if os.Getenv("OPSBOT_TEST_ADAPTER") != "" {
			hostTestAdapter(os.Getenv("OPSBOT_TEST_ADAPTER"))
		}
		ctx, stop := signalContext()
		code := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	testrun.RaiseParallel()
	code := m.Run()
	testrun.RunAtExit()
	os.Exit(code)
}

// Killed mid-job with SIGKILL, opsbot finds the job interrupted at its next
// start and says so; the unit on the host is the old text or the new one,
// never a mix, and no temporary file is left where systemd reads units. The
// kill lands while the job waits for the engine to serve, and, held there by
// the lab, inside the unit's write (the new text uploaded, not yet renamed
// over the unit).
func TestKilledMidJobIsInterruptedAtNextStart(t *testing.T) {
	t.Parallel()
	t.Run("waiting until ready", func(t *testing.T) {
		killedMidJob(t, func(t *testing.T, l *lab.Lab) (func(ctx context.Context, st *store.Store) bool, func()) {
			return func(ctx context.Context, st *store.Store) bool {
				evs, err := st.Events(ctx, 1)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("read the job's events: %v", err)
				}
				for _, e := range evs {
					if strings.HasPrefix(e.Step, "wait until ready") {
						return true
					}
				}
				return false
			}, func() {}
		})
	})
	t.Run("during the unit write", func(t *testing.T) {
		killedMidJob(t, func(t *testing.T, l *lab.Lab) (func(ctx context.Context, st *store.Store) bool, func()) {
			hold := l.HoldUnitWrite()
			t.Cleanup(hold.Release)
			return func(context.Context, *store.Store) bool {
				select {
				case <-hold.Reached():
					return true
				default:
					return false
				}
			}, hold.Release // the rename the dead process had sent goes ahead, or not, as it may on a real host
		})
	})
}

// killedMidJob runs `opsbot run 'mtp steps 10'` in a child process against
// a lab whose engine loads for an hour, kills it with SIGKILL as soon as
// armed's first result holds, runs its second, and checks what the next
// start finds.
func killedMidJob(t *testing.T, armed func(*testing.T, *lab.Lab) (func(context.Context, *store.Store) bool, func())) {
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
	unitDir := "/etc/systemd/system/"
	unitPath := unitDir + l.Topology().Services[0].Unit
	before, err := l.Host("gpu1").ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	reached, afterKill := armed(t, l)
	child := exec.Command(os.Args[0], "-test.run=^$", "--", "run", "--config", cfg, "--json", "mtp steps 10")
	child.Env = append(os.Environ(), "OPSBOT_TEST_MAIN=1", "TMPDIR="+t.TempDir()) // it is killed: nothing it makes may outlive the test
	var childOut bytes.Buffer
	child.Stdout, child.Stderr = &childOut, &childOut
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	if !testkit.Poll(time.Minute, func() bool { return reached(ctx, st) }) {
		child.Process.Kill()
		t.Fatalf("the job never got to the point of the kill:\n%s", childOut.String())
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = child.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL:\n%s", err, childOut.String())
	}
	afterKill()

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
	names, err := l.Host("gpu1").ReadDir(unitDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.Contains(n, ".opsbot-tmp-") {
			t.Logf("left by the killed process beside the unit: %s (not a unit: systemd ignores it)", n)
		}
	}
	t.Logf("after the kill the unit is the %s text", map[bool]string{true: "new", false: "old"}[string(after) == want])
}
