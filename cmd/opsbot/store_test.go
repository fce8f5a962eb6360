package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// postgresStore rewrites the example config's store section to driver
// postgres at url (given through ${OPSBOT_TEST_DB_URL}, as an operator
// would), plus extra lines.
func postgresStore(url, extra string) func(string) string {
	return func(s string) string {
		i := strings.Index(s, "store:\n")
		j := strings.Index(s[i:], "\n\n")
		return s[:i] + "store:\n  driver: postgres\n  url: " + url + "\n" + extra + s[i+j+1:]
	}
}

// config check with store.driver postgres: the database is reached (and its
// schema checked), an unreachable one and store.path are named, and the
// URL's password is never shown.
func TestConfigCheckPostgres(t *testing.T) {
	pgtest.Skip(t)
	const password = "PgTopSecret42"
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	url := pgtest.Database(t)
	withPassword := strings.Replace(url, "postgres@", "postgres:"+password+"@", 1)
	t.Setenv("OPSBOT_TEST_DB_URL", withPassword)

	path := exampleIn(t, dir, postgresStore(`"${OPSBOT_TEST_DB_URL}"`, ""))
	code, stdout, stderr := configCheck(t, "config", "check", "--config", path)
	if code != 0 {
		t.Fatalf("a reachable database: exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "driver: postgres") || !strings.Contains(stdout, "url: '[redacted]'") || !strings.Contains(stdout, "max_conns: 8") {
		t.Errorf("the effective config does not show the store as expected:\n%s", stdout)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	t.Setenv("OPSBOT_TEST_DB_URL", "postgres://opsbot:"+password+"@"+closed+"/opsbot?sslmode=disable")
	code, _, stderr = configCheck(t, "config", "check", "--config", path)
	if code != 1 || !strings.Contains(stderr, "store.url: postgres "+closed+"/opsbot") {
		t.Errorf("an unreachable database: exit %d:\n%s", code, stderr)
	}

	path = exampleIn(t, dir, postgresStore(`"${OPSBOT_TEST_DB_URL}"`, "  path: "+filepath.Join(dir, "opsbot.db")+"\n"))
	code, _, stderr = configCheck(t, "config", "check", "--config", path)
	if code != 1 || !strings.Contains(stderr, "store.path is for store.driver sqlite") {
		t.Errorf("store.path with postgres: exit %d:\n%s", code, stderr)
	}
	for _, out := range []string{stdout, stderr} {
		if strings.Contains(out, password) {
			t.Errorf("config check shows store.url's password:\n%s", out)
		}
	}
}

// opsbot store copy moves a SQLite store into an empty PostgreSQL one and
// prints the counts; a second copy into the now full store is refused;
// store backup on the PostgreSQL config points at pg_dump.
func TestStoreCopyCommand(t *testing.T) {
	pgtest.Skip(t)
	ctx := context.Background()
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	from := exampleIn(t, dir, nil)
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := st.CreateJob(ctx, store.Job{Command: fmt.Sprintf("mtp steps %d", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	toDir := t.TempDir()
	writeSSHFiles(t, toDir, 0o600)
	t.Setenv("OPSBOT_TEST_DB_URL", pgtest.Database(t))
	to := exampleIn(t, toDir, postgresStore(`"${OPSBOT_TEST_DB_URL}"`, ""))

	code, stdout, stderr := configCheck(t, "store", "copy", "--config", from, to)
	if code != 0 {
		t.Fatalf("store copy: exit %d:\n%s", code, stderr)
	}
	for _, want := range []string{"copied " + filepath.Join(dir, "opsbot.db") + " to postgres 127.0.0.1:", "  jobs             3\n",
		"not copied (what describes the processes that ran on the source, and tables the target lacks):", "  owners           0\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("store copy output lacks %q:\n%s", want, stdout)
		}
	}
	code, _, stderr = configCheck(t, "store", "copy", "--config", from, to)
	if code != 1 || !strings.Contains(stderr, "the target store is not empty (jobs: 3)") {
		t.Errorf("a second copy: exit %d:\n%s", code, stderr)
	}
	code, _, stderr = configCheck(t, "store", "backup", "--config", to, filepath.Join(toDir, "backup.db"))
	if code != 1 || !strings.Contains(stderr, "back it up with pg_dump") {
		t.Errorf("store backup of a PostgreSQL store: exit %d:\n%s", code, stderr)
	}
	if code, _, _ := configCheck(t, "store", "copy", to); code != 2 {
		t.Errorf("store copy without --config: exit %d, want 2", code)
	}
}

// opsbot store copy from a store that a live opsbot process uses (its owner
// and its lease unexpired, as a running serve leaves them) is refused with
// exit 1, naming the lease, its holder and until when, and the target stays
// empty; with --live it copies and says that the copy is the source as of
// the cut and that later writes are not copied; leases are never counted
// as copied.
func TestStoreCopyRefusesALiveSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, toDir := t.TempDir(), t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	writeSSHFiles(t, toDir, 0o600)
	from, to := exampleIn(t, dir, nil), exampleIn(t, toDir, nil)
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateJob(ctx, store.Job{Command: "mtp steps 3"}); err != nil {
		t.Fatal(err)
	}
	o, err := st.RegisterOwner(ctx, store.Owner{ID: "gpu-ops:4242:ab12", Host: "gpu-ops", PID: 4242}, time.Hour)
	if err == nil {
		_, err = st.AcquireLease(ctx, "scheduler", o.ID, 0, time.Hour)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	until := o.ExpiresAt.UTC().Format("2006-01-02 15:")
	code, _, stderr := configCheck(t, "store", "copy", "--config", from, to)
	for _, want := range []string{"is in use by live opsbot processes: lease scheduler held by opsbot on gpu-ops (pid 4242) until " + until,
		"Nothing was copied.", "--live"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("store copy of a live source: exit %d, want 1 and %q:\n%s", code, want, stderr)
		}
	}
	if dst, err := store.Open(ctx, filepath.Join(toDir, "opsbot.db")); err == nil {
		if js, _ := dst.ListJobs(ctx, store.JobFilter{}); len(js) != 0 {
			t.Errorf("a refused copy wrote %d jobs", len(js))
		}
		dst.Close()
	}
	code, stdout, stderr := configCheck(t, "store", "copy", "--config", from, "--live", to)
	if code != 0 {
		t.Fatalf("store copy --live: exit %d:\n%s", code, stderr)
	}
	for _, want := range []string{"  jobs             1\n", "live source: this is the source as of 20",
		"what was written to it after that is not copied.", "lease scheduler was held by opsbot on gpu-ops (pid 4242) until " + until,
		"not copied (what describes the processes that ran on the source, and tables the target lacks):\n  owners           1\n  leases           1\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("store copy --live output lacks %q:\n%s", want, stdout)
		}
	}
	if i := strings.Index(stdout, "not copied"); strings.Contains(stdout[:i], "leases") {
		t.Errorf("leases counted as copied:\n%s", stdout)
	}
}

// `opsbot serve` on PostgreSQL, with the database taken away under it and
// given back: /readyz turns 503 naming the store within 10 s, a command is
// refused with the store-down answer (nothing started), and once the
// database is back /readyz is 200 again and commands run, without a
// restart. Away is the network cut (a proxy that drops every connection
// and refuses new ones) or the server stopped (a fast shutdown, then
// started again on the same data).
func TestServePostgresDownAndBack(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	pgtest.Skip(t)
	t.Run("cut", func(t *testing.T) {
		t.Parallel()
		proxy, url := pgtest.NewProxy(t, pgtest.Database(t))
		testServeStoreAway(t, url, proxy.Addr(), proxy.Cut, proxy.Restore)
	})
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		c := pgtest.Own(t)
		url := c.Database(t)
		testServeStoreAway(t, url, fmt.Sprintf("127.0.0.1:%d", c.Port()), c.Halt, func() {
			if err := c.Resume(); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// testServeStoreAway runs TestServePostgresDownAndBack on the database at
// url (addr as the store names it), taken away by away and given back by back.
func testServeStoreAway(t *testing.T, url, addr string, away, back func()) {
	ctx := context.Background()
	// The lab's engine loads for an hour after a restart: a job waits in
	// "wait until ready". lease_ttl is 3 s.
	_, cfg, st := leaseLabOn(t, ctx, []lab.Fault{{Name: "slow-load", Duration: time.Hour}}, url)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.WriteString(f, "http: {listen: \"127.0.0.1:0\"}\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "extra", nil, "serve", "--config", cfg)
	base := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	if r := command(t, base, "tester", "gpu status"); r.Outcome != "queued" || r.JobID == 0 {
		t.Fatalf("gpu status with the database up: %+v", r)
	}
	mid := command(t, base, "tester", "mtp steps 10 qwen")
	if mid.Outcome != "queued" {
		t.Fatalf("mtp steps 10 with the database up: %+v", mid)
	}
	waitForStep(t, st, "mtp steps 10 qwen", "wait until ready", p)

	away()
	t0 := time.Now()
	var body string
	pollServe(t, p, 10*time.Second, "/readyz 503 naming the store", func() bool {
		var code int
		code, body = httpGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "store postgres "+addr+"/")
	})
	t.Logf("/readyz 503 after %s: %s", time.Since(t0).Round(time.Millisecond), strings.TrimSpace(body))
	t1 := time.Now()
	r := command(t, base, "tester", "gpu status")
	if r.Outcome != "failed" || r.JobID != 0 || !strings.HasPrefix(r.Text, "opsbot cannot reach its store: nothing was started") {
		t.Errorf("a command with the database away: %+v", r)
	}
	if took := time.Since(t1); took > 3*time.Second {
		t.Errorf("the refusal took %s, over Slack's 3 s", took)
	}

	// The job in flight stops at its next safe point once its lease could
	// not be renewed for lease_ttl, and says so in its thread.
	pollServe(t, p, 30*time.Second, "the job in flight told the store refuses writes and stopped", func() bool {
		_, posts := httpGet(t, base+"/test/posts")
		return strings.Contains(posts, fmt.Sprintf("#%d: opsbot's store refuses writes", mid.JobID)) &&
			strings.Contains(posts, "this opsbot process lost its hold on")
	})
	back()
	pollServe(t, p, 30*time.Second, "/readyz 200 again", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	// Once back, what the job could not record is recorded, and its status
	// message follows the store.
	var j store.Job
	pollServe(t, p, time.Minute, "the job in flight recorded", func() bool {
		j, _ = st.Job(ctx, mid.JobID)
		return j.Status.Final()
	})
	_, posts := httpGet(t, base+"/test/posts")
	if i := strings.Index(posts, "now: "); i >= 0 {
		t.Logf("the job's result says: %s", strings.SplitN(posts[i:], `\n`, 2)[0])
	}
	if j.Status != store.Failed || !strings.Contains(j.Error, "lost its hold on") {
		t.Errorf("the job in flight recorded %s %q; want failed, saying it lost its hold", j.Status, j.Error)
	}
	pollServe(t, p, 30*time.Second, "its status message edited to failed", func() bool {
		_, body := httpGet(t, base+"/test/edits")
		var es []testEdit
		_ = json.Unmarshal([]byte(body), &es)
		for _, e := range es {
			if e.ID == j.Thread && strings.Contains(e.Text, fmt.Sprintf("#%d `mtp steps 10 qwen` — failed", mid.JobID)) {
				return true
			}
		}
		return false
	})
	pollServe(t, p, 30*time.Second, "a command runs again", func() bool {
		r := command(t, base, "tester", "gpu status")
		return r.Outcome == "queued" && r.JobID != 0
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}
