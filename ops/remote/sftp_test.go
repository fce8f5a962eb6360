package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
)

func TestWriteReadFile(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			p := tg.pool(t, nil)
			h := mustHost(t, p, tg.host)
			name := path.Join(tg.fileDir, "remote-test.conf")
			for i, data := range [][]byte{[]byte("first\n"), bytes.Repeat([]byte("second line\n"), 50000), {}} {
				if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), name, data, 0o640); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
				got, err := h.ReadFile(testkit.Context(t, 30*time.Second), name)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("read back %d: %d bytes (want %d), err %v", i, len(got), len(data), err)
				}
			}
			// The command view agrees, and no temporary file is left beside it.
			out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "ls", tg.fileDir)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out.Stdout), "opsbot-tmp") || !strings.Contains(string(out.Stdout), "remote-test.conf") {
				t.Fatalf("ls %s: %q, want remote-test.conf and no temporary file", tg.fileDir, out.Stdout)
			}
			if n := p.Dials(); n != 1 {
				t.Fatalf("files and commands made %d connections, want 1", n)
			}
		})
	}
}

func TestReadFileMissing(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			h := mustHost(t, tg.pool(t, nil), tg.host)
			name := path.Join(tg.fileDir, "no-such-file")
			_, err := h.ReadFile(testkit.Context(t, 30*time.Second), name)
			if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), tg.host) {
				t.Fatalf("read missing file: %v, want an error naming file and host", err)
			}
		})
	}
}

// A write that cannot complete changes nothing and leaves no temporary file.
func TestWriteFileAtomicFailureLeavesNothing(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			h := mustHost(t, tg.pool(t, nil), tg.host)
			// The target is a directory: the rename fails after the temp file was written.
			dir := path.Join(tg.fileDir, "a-dir")
			if out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "mkdir", dir); err != nil || out.ExitStatus != 0 {
				t.Fatalf("mkdir: %+v %v", out, err)
			}
			if out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "mkdir", path.Join(dir, "sub")); err != nil || out.ExitStatus != 0 {
				t.Fatalf("mkdir: %+v %v", out, err)
			}
			if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), dir, []byte("x"), 0o644); err == nil {
				t.Fatal("write over a non-empty directory: no error")
			}
			out, _ := h.Run(testkit.Context(t, 30*time.Second), nil, "ls", tg.fileDir)
			if strings.Contains(string(out.Stdout), "opsbot-tmp") {
				t.Fatalf("temporary file left behind: %q", out.Stdout)
			}
			// A missing directory: nothing is created.
			missing := path.Join(tg.fileDir, "no-dir", "f")
			if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), missing, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), missing) {
				t.Fatalf("write into a missing directory: %v, want an error naming %s", err, missing)
			}
			if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), "", []byte("x"), 0o644); err == nil {
				t.Fatal("write to an empty path: no error")
			}
		})
	}
}

// Readers see the old or the new content, never a mix or nothing.
func TestWriteFileAtomicReaders(t *testing.T) {
	tg := sshdTarget(t, sshdtest.Start(t))
	h := mustHost(t, tg.pool(t, nil), "local")
	name := path.Join(tg.fileDir, "swap.conf")
	a, b := bytes.Repeat([]byte("A"), 256<<10), bytes.Repeat([]byte("B"), 300<<10)
	if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), name, a, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bad error
	var reads int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			out, err := h.Run(context.Background(), nil, "cat", name)
			if err == nil && !bytes.Equal(out.Stdout, a) && !bytes.Equal(out.Stdout, b) {
				err = fmt.Errorf("read %d bytes that are neither version (exit %d, %s)", len(out.Stdout), out.ExitStatus, out.Stderr)
			}
			if err != nil {
				bad = err
				return
			}
			reads++
		}
	}()
	for i := range 20 {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	if bad != nil {
		t.Fatal(bad)
	}
	t.Logf("%d reads during 20 replacements", reads)
}

func TestWriteFileMode(t *testing.T) {
	tg := sshdTarget(t, sshdtest.Start(t))
	h := mustHost(t, tg.pool(t, nil), "local")
	name := path.Join(tg.fileDir, "mode.conf")
	if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), name, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "stat", "-c", "%a", name)
	if err != nil || strings.TrimSpace(string(out.Stdout)) != "600" {
		t.Fatalf("mode: %q %v, want 600", out.Stdout, err)
	}
}

func TestFileCancel(t *testing.T) {
	tg := sshdTarget(t, sshdtest.Start(t))
	h := mustHost(t, tg.pool(t, nil), "local")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.ReadFile(ctx, "/etc/hostname"); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with a cancelled ctx: %v", err)
	}
	// Still usable afterwards.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := h.ReadFile(ctx2, "/etc/hostname"); err != nil {
		t.Fatal(err)
	}
}

// Lstat describes a name itself over sftp: a regular file, a directory, a
// missing name (fs.ErrNotExist) and, on OpenSSH, a symbolic link, which is
// not followed. The lab's links are checked in ops' per-load tests.
func TestLstat(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			h := mustHost(t, tg.pool(t, nil), tg.host)
			file, dir := path.Join(tg.fileDir, "lstat.json"), path.Join(tg.fileDir, "lstat-dir")
			if err := h.WriteFileAtomic(testkit.Context(t, 30*time.Second), file, []byte("{}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "mkdir", dir); err != nil || out.ExitStatus != 0 {
				t.Fatalf("mkdir: %+v %v", out, err)
			}
			if fi, err := h.Lstat(testkit.Context(t, 30*time.Second), file); err != nil || !fi.Mode().IsRegular() || fi.Size() != 3 {
				t.Errorf("lstat a file: %v %v", fi, err)
			}
			if fi, err := h.Lstat(testkit.Context(t, 30*time.Second), dir); err != nil || !fi.IsDir() {
				t.Errorf("lstat a directory: %v %v", fi, err)
			}
			missing := path.Join(tg.fileDir, "no-such-file")
			if _, err := h.Lstat(testkit.Context(t, 30*time.Second), missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
				t.Errorf("lstat a missing name: %v, want fs.ErrNotExist naming it", err)
			}
			if tg.name != "sshd" {
				return
			}
			link := path.Join(tg.fileDir, "lstat-link.json")
			if out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "ln", "-s", file, link); err != nil || out.ExitStatus != 0 {
				t.Fatalf("ln -s: %+v %v", out, err)
			}
			if fi, err := h.Lstat(testkit.Context(t, 30*time.Second), link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("lstat a symbolic link: %v %v, want the link itself", fi, err)
			}
		})
	}
}
