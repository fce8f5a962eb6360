package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Prune deletes the events of jobs that ended before the cutoff and older
// audit entries, and nothing newer; the audit log still refuses every other
// delete.
func TestPruneKeepsWhatIsNewer(t *testing.T) { t.Parallel(); eachDriver(t, testPruneKeepsWhatIsNewer) }

func testPruneKeepsWhatIsNewer(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	old := time.Now().Add(-100 * 24 * time.Hour)
	mk := func(at time.Time) Job {
		j, err := s.CreateJobAudited(ctx, Job{Command: "mtp steps 3", Platform: "console", User: "alice", Status: Queued, CreatedAt: at},
			AuditEntry{At: at, Platform: "console", User: "alice", Command: "mtp steps 3", Decision: DecisionAccepted})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvent(ctx, Event{JobID: j.ID, At: at, Step: "stop", Status: "done"}); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishJob(ctx, j.ID, Succeeded, "", nil); err != nil {
			t.Fatal(err)
		}
		return j
	}
	oldJob := mk(old)
	// FinishJob stamps now: date the old job's end back as it would be.
	if _, err := s.wdb.Exec(s.dialect.rebind(`UPDATE jobs SET ended_at = ? WHERE id = ?`), old.UnixNano(), oldJob.ID); err != nil {
		t.Fatal(err)
	}
	newJob := mk(time.Now())

	p, err := s.Prune(ctx, time.Now().Add(-90*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if p.Events != 1 || p.Audit != 1 {
		t.Fatalf("pruned %+v, want 1 event and 1 audit entry", p)
	}
	if evs, err := s.Events(ctx, oldJob.ID); err != nil || len(evs) != 0 {
		t.Fatalf("old job's events after prune: %v, %v", evs, err)
	}
	if evs, err := s.Events(ctx, newJob.ID); err != nil || len(evs) != 1 {
		t.Fatalf("new job's events after prune: %v, %v", evs, err)
	}
	if _, err := s.Job(ctx, oldJob.ID); err != nil {
		t.Fatalf("the old job itself is kept: %v", err)
	}
	if a, err := s.Audit(ctx, AuditFilter{}); err != nil || len(a) != 1 {
		t.Fatalf("audit after prune: %d entries, %v; want the new one", len(a), err)
	}
	if _, err := s.wdb.Exec(`DELETE FROM audit_log`); err == nil {
		t.Fatal("the audit log let a plain DELETE through after a prune")
	}
}

// Backup copies a store in use into a new 0600 file that opens as a store
// with the same jobs, and refuses to overwrite a file.
func TestBackupWhileOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	j, err := s.CreateJob(ctx, Job{Command: "gpu status", Status: Queued})
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "backup.db")
	if err := Backup(ctx, s.Path(), dest); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %04o, want 0600", fi.Mode().Perm())
	}
	b, err := Open(ctx, dest)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got, err := b.Job(ctx, j.ID); err != nil || got.Command != "gpu status" {
		t.Fatalf("job in the backup: %+v, %v", got, err)
	}
	if err := Backup(ctx, s.Path(), dest); err == nil {
		t.Fatal("a second backup overwrote the first")
	}
}
