package main

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// A "machine" for tests of several opsbot processes on several machines:
// the child runs in PID, UTS and mount namespaces of its own (machineAttr),
// and, told so by machineEnv, names itself and mounts a /proc of its own
// namespace before it runs as opsbot (becomeMachine), so it can neither see
// nor signal the other's processes and its lease owner names its own host.
// It shares the network (loopback), the database and the lab with the test.
// Killing its PID 1 (the opsbot process) with SIGKILL ends the whole
// namespace, as a machine that loses power.

// machineEnv names the machine (its hostname) a child should become.
const machineEnv = "OPSBOT_TEST_MACHINE"

// machineAttr starts a child in namespaces of its own, killed when the
// test's process dies.
func machineAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
}

// becomeMachine, in a child started with machineAttr, sets its hostname and
// mounts a /proc that shows only its PID namespace, with mount propagation
// to the test's namespace turned off first (nothing it mounts is seen
// outside, and it all goes with the namespace).
func becomeMachine(host string) error {
	if os.Getpid() != 1 {
		return fmt.Errorf("not the first process of a PID namespace (pid %d)", os.Getpid())
	}
	if err := syscall.Sethostname([]byte(host)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// skipWithoutMachines skips t when this process cannot make the namespaces
// (not root, or a sandbox that forbids them: tried once, with true(1)).
func skipWithoutMachines(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("namespaces of their own need root")
	}
	machinesOnce.Do(func() {
		cmd := exec.Command("true")
		cmd.SysProcAttr = machineAttr()
		machinesErr = cmd.Run()
	})
	if machinesErr != nil {
		t.Skipf("cannot make PID, UTS and mount namespaces here: %v", machinesErr)
	}
}

var (
	machinesOnce sync.Once
	machinesErr  error
)
