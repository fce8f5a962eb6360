// Package testrun is what the test binaries of opsbot's packages share: how many of their
// tests run at once, and which tests are long enough to leave out of `go test -short`.
//
// Most of opsbot's tests wait, not compute: on the lab's simulated clock, on child processes,
// on a homeserver, on systemd. go test runs at most one parallel test per CPU at once, which on
// a small machine leaves the CPU idle while each test waits in turn; Main raises that.
package testrun

import (
	"flag"
	"os"
	"strconv"
	"sync"
	"testing"
)

// Parallel is how many tests that call t.Parallel run at once in a package's test binary when
// -test.parallel is not given.
const Parallel = 8

// Main runs m's tests with up to Parallel parallel tests at once, unless the command line
// says otherwise (-test.parallel, -parallel to go test), and exits with their result.
func Main(m *testing.M) {
	RaiseParallel()
	code := m.Run()
	RunAtExit()
	os.Exit(code)
}

var (
	atExitMu sync.Mutex
	atExit   []func()
)

// AtExit registers fn to run once this test binary's tests have all ended, before it exits:
// for what a package's tests share and start lazily (a PostgreSQL cluster, see
// internal/pgtest). Functions run last registered first. A TestMain of its own calls RunAtExit
// after m.Run.
func AtExit(fn func()) {
	atExitMu.Lock()
	defer atExitMu.Unlock()
	atExit = append(atExit, fn)
}

// RunAtExit runs and forgets the functions AtExit registered, last first.
func RunAtExit() {
	atExitMu.Lock()
	fns := atExit
	atExit = nil
	atExitMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// RaiseParallel parses the command line and sets -test.parallel to Parallel unless it was
// given. For a TestMain that does more than Main.
func RaiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(Parallel)); err != nil {
			panic(err) // the testing package registers the flag: it is not there only if testing changed
		}
	}
}

// Long marks t as a long scenario (a whole job on the lab, a homeserver, a real systemd):
// it is skipped under -short, the inner loop's run, and runs in every full run and in CI.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("a long scenario: runs without -short")
	}
}
