// Package pgtest gives tests a real PostgreSQL database of their own: one throwaway cluster
// per test binary (started on first use, stopped and removed when the binary's tests end,
// through testrun.AtExit), one fresh database per call.
//
// The cluster is PostgreSQL's own binaries (Debian's postgresql package, BinDir), run as the
// postgres user when the tests run as root (initdb refuses root), in a temporary directory,
// listening on 127.0.0.1 at a free port and on a private unix socket directory, with fsync
// off. It never touches a cluster the machine already has. Without the binaries the tests
// skip, unless OPSBOT_REQUIRE_POSTGRES=1 (CI), where they fail.
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testrun"
)

// BinDir is where Debian's postgresql package keeps the server's binaries.
const BinDir = "/usr/lib/postgresql/15/bin"

// RequireEnv, set to 1, makes a test that needs PostgreSQL fail instead of skipping when the
// binaries are missing.
const RequireEnv = "OPSBOT_REQUIRE_POSTGRES"

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	dir  string // the temporary directory: data/ and sock/
	port int
	cred *syscall.Credential // the server's user (postgres when the tests run as root)
	cmd  *exec.Cmd
	done chan struct{} // closed when the server process has exited
	log  bytes.Buffer
	mu   sync.Mutex // guards log, cmd and done
	// admin is a connection to the postgres database, for CREATE DATABASE.
	admin *sql.DB
	seq   atomic.Int64
}

var (
	once    sync.Once
	shared  *Cluster
	initErr error
)

// Available reports whether this machine has the PostgreSQL binaries.
func Available() bool {
	_, err := os.Stat(filepath.Join(BinDir, "postgres"))
	return err == nil
}

// Skip skips t (or fails it when RequireEnv is set) when PostgreSQL is not installed.
func Skip(t testing.TB) {
	t.Helper()
	if Available() {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("pgtest: PostgreSQL is not installed (%s/postgres is missing) and %s=1", BinDir, RequireEnv)
	}
	t.Skipf("pgtest: PostgreSQL is not installed (%s/postgres is missing; apt-get install postgresql); set %s=1 to fail instead", BinDir, RequireEnv)
}

// Database creates a new empty database on the test binary's cluster (starting it on first
// use) and returns its connection URL (loopback TCP, trust authentication). The database is
// dropped with the cluster when the test binary ends.
func Database(t testing.TB) string {
	t.Helper()
	return Shared(t).Database(t)
}

// Database creates a new empty database on c and returns its connection URL.
func (c *Cluster) Database(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return c.URL(name)
}

// Shared returns the test binary's cluster, starting it on first use.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	Skip(t)
	once.Do(func() {
		shared, initErr = start()
		if shared != nil {
			testrun.AtExit(shared.Stop)
		}
	})
	if initErr != nil {
		t.Fatalf("pgtest: %v", initErr)
	}
	return shared
}

// Own starts a cluster for t alone, stopped and removed when t ends: for a
// test that stops the server under a running opsbot (Halt, Resume).
func Own(t testing.TB) *Cluster {
	t.Helper()
	Skip(t)
	c, err := start()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Halt stops the server as `pg_ctl stop -m fast` does (SIGINT: every
// session is ended, then the server shuts down cleanly); its data stays.
func (c *Cluster) Halt() {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	c.mu.Lock()
	c.cmd = nil
	c.mu.Unlock()
}

// Resume starts a halted server again, on the same data and port.
func (c *Cluster) Resume() error {
	return c.run(c.cred, filepath.Join(c.dir, "data"), filepath.Join(c.dir, "sock"), c.port)
}

// URL is the connection URL of database db on the cluster.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// Port is the TCP port the cluster listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// Log returns what the server has written so far.
func (c *Cluster) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

type lockedWriter struct{ c *Cluster }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.log.Write(p)
}

// asPostgres returns the credentials to run the server with: the postgres user's when
// running as root, none (this user) otherwise.
func asPostgres() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("initdb refuses root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func start() (*Cluster, error) {
	cred, err := asPostgres()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "opsbot-pgtest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, cred: cred}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	sock := filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, sock} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(BinDir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// A port free a moment ago may be taken by the time the server binds it:
	// try a few.
	for attempt := 0; ; attempt++ {
		port, err := sshdtest.FreePort()
		if err != nil {
			return nil, err
		}
		err = c.run(cred, data, sock, port)
		if err == nil {
			break
		}
		if attempt == 4 {
			return nil, err
		}
	}
	db, err := sql.Open("pgx", c.URL("postgres"))
	if err != nil {
		return nil, err
	}
	c.admin = db
	ok = true
	return c, nil
}

// run starts the server on port and waits until it accepts connections.
func (c *Cluster) run(cred *syscall.Credential, data, sock string, port int) error {
	c.mu.Lock()
	c.log.Reset()
	c.mu.Unlock()
	cmd := exec.Command(filepath.Join(BinDir, "postgres"), "-D", data, "-k", sock, "-h", "127.0.0.1",
		"-p", strconv.Itoa(port), "-F", "-c", "max_connections=400", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Stdout = lockedWriter{c}
	cmd.Stderr = lockedWriter{c}
	cmd.Dir = c.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.port = port
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("postgres exited at start:\n%s", c.Log())
		default:
		}
		if err := ping(c.URL("postgres")); err == nil {
			c.mu.Lock()
			c.cmd, c.done = cmd, done
			c.mu.Unlock()
			return nil
		} else if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("postgres did not accept connections within 60s: %v\n%s", err, c.Log())
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-done:
			t.Stop()
		}
	}
}

func ping(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// Stop stops the server (a fast shutdown, then a kill after 30 s) and removes its directory.
func (c *Cluster) Stop() {
	if c.admin != nil {
		c.admin.Close()
	}
	c.Halt()
	_ = os.RemoveAll(c.dir)
}
