package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestStoreFilesArePrivate opens a new store under umask 0 (the most
// permissive): the directory, the database and its -wal and -shm files
// are still private to the owner.
func TestStoreFilesArePrivate(t *testing.T) {
	t.Parallel()
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "opsbot.db")
	s := openAt(t, path)
	mustCreate(t, s, Job{Command: "jobs"})
	want := map[string]fs.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600, path + "-shm": 0o600}
	for p, mode := range want {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", filepath.Base(p), err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", filepath.Base(p), fi.Mode().Perm(), mode)
		}
	}
}

// TestEmptyFileIsNotAStore: an existing 0-byte file is refused with the
// message that says what to do, and is left as it was.
func TestEmptyFileIsNotAStore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of an empty file succeeded: it would be a silently fresh store")
	}
	if !errors.Is(err, ErrEmptyFile) || !strings.Contains(err.Error(), path+": empty file: not an opsbot store; move it away or delete it") {
		t.Fatalf("Open = %v, want it to name the file and say it is empty", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the refused file changed: %v, %v", fi, err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused file got a WAL: %v", err)
	}
}

// TestNotADatabaseIsNamed: a file that is not SQLite is refused as damaged.
func TestNotADatabaseIsNamed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	text := strings.Repeat("store: {path: opsbot.db}\n", 400)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a text file succeeded")
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "not an SQLite database") || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open = %v, want a *CorruptError naming the file", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != text {
		t.Fatalf("the refused file changed (%v)", err)
	}
}

// TestDamagedStoreRefusedAtOpen damages a table page of a closed store: the
// next Open names the damage (quick_check) instead of starting jobs on it.
func TestDamagedStoreRefusedAtOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		j, err := s.CreateJob(ctx, Job{Command: fmt.Sprintf("mtp steps %d", i%16+1), Service: "qwen"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvent(ctx, Event{JobID: j.ID, Step: "stop", Message: strings.Repeat("m", 200)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check of a sound store: %v", err)
	}
	if err := s.Close(); err != nil { // checkpoints the WAL into the file
		t.Fatal(err)
	}
	if err := CheckFile(ctx, path); err != nil {
		t.Fatalf("CheckFile of a sound store: %v", err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatalf("the WAL outlived Close; the damage below would not reach the tables")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// Overwrite the middle of a page in the second half of the file: table
	// pages of jobs and events, far from the schema on page 1.
	const page = 4096
	at := (fi.Size()/page*3/4)*page + 100
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", 2000)), at); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a damaged store succeeded")
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "restore it from a backup") {
		t.Fatalf("Open = %v, want a *CorruptError naming the file and the fix", err)
	}
	t.Logf("Open said: %v", err)
	if err := CheckFile(ctx, path); !errors.As(err, &ce) {
		t.Fatalf("CheckFile = %v, want a *CorruptError", err)
	}
}

// TestCheckFileChangesNothing: the check `opsbot config check` runs reads a
// store without creating or migrating it, and refuses an empty file.
func TestCheckFileChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	if err := CheckFile(ctx, missing); err != nil {
		t.Fatalf("CheckFile of a missing store: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("CheckFile created the store: %v", err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(ctx, empty); !errors.Is(err, ErrEmptyFile) {
		t.Fatalf("CheckFile of an empty file = %v, want ErrEmptyFile", err)
	}
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not sqlite\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if err := CheckFile(ctx, junk); !errors.As(err, &ce) {
		t.Fatalf("CheckFile of a text file = %v, want a *CorruptError", err)
	}
}

// BenchmarkQuickCheck10kJobs measures what quick_check adds to Open on a
// store of 10,000 jobs with five events each.
func BenchmarkQuickCheck10kJobs(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "opsbot.db")
	s, err := Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 100 {
		wg.Go(func() {
			for i := range 100 {
				j, err := s.CreateJob(ctx, Job{Command: fmt.Sprintf("mtp steps %d qwen", (g+i)%16+1), Service: "qwen", Host: "gpu1"})
				for e := 0; err == nil && e < 5; e++ {
					err = s.AppendEvent(ctx, Event{JobID: j.ID, Step: "step", Status: "done", Message: strings.Repeat("m", 80)})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for b.Loop() {
		if err := integrity(ctx, s.rdb.DB, path, "quick_check"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
}
