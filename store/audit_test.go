package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func testAudit(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	at := time.Date(2026, 12, 2, 18, 0, 0, 42, time.UTC)
	entries := []AuditEntry{
		{At: at, Platform: "slack", User: "U1", Room: "C1", Command: "mtp steps 10", Decision: DecisionAccepted, Detail: "job 1"},
		{Platform: "slack", User: "U2", Room: "C1", Command: "gpu recover", Decision: DecisionRefused, Detail: "needs operator"},
		{Platform: "matrix", User: "U1", Command: "gpu recover", Decision: DecisionConfirmed},
	}
	for _, e := range entries {
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].Decision != DecisionConfirmed || all[2].Detail != "job 1" {
		t.Fatalf("Audit = %+v", all)
	}
	sameTime(t, "audit At", all[2].At, at)
	if all[1].At.IsZero() || all[0].ID <= all[1].ID {
		t.Errorf("At/ID not set: %+v", all)
	}
	u1 := must(s.Audit(ctx, AuditFilter{User: "U1", Limit: 1}))(t)
	if len(u1) != 1 || u1[0].Platform != "matrix" {
		t.Errorf("U1 limit 1 = %+v", u1)
	}
	if err := s.AppendAudit(ctx, AuditEntry{User: "U1"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AppendAudit(no decision) = %v, want ErrInvalid", err)
	}
}

func TestAudit(t *testing.T) { t.Parallel(); eachDriver(t, testAudit) }

// TestAuditAppendOnly goes around the Store: even raw SQL on another handle
// cannot change or delete audit entries.
func TestAuditAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	if err := s.AppendAudit(ctx, AuditEntry{User: "U1", Command: "gpu recover", Decision: DecisionRefused}); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, s.Path())
	for _, q := range []string{
		`UPDATE audit_log SET decision = 'accepted'`,
		`DELETE FROM audit_log`,
		`INSERT OR REPLACE INTO audit_log (id, at, decision) SELECT id, at, 'accepted' FROM audit_log`,
		`INSERT INTO audit_log (id, at, decision) SELECT id, at, 'x' FROM audit_log WHERE true ON CONFLICT (id) DO UPDATE SET decision = 'accepted'`,
		`REPLACE INTO audit_log (id, at, decision) VALUES (1, 0, 'accepted')`,
	} {
		_, err := db.ExecContext(ctx, q)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want the append-only refusal", q, err)
		}
	}
	got := must(s.Audit(ctx, AuditFilter{}))(t)
	if len(got) != 1 || got[0].Decision != DecisionRefused {
		t.Errorf("audit log changed: %+v", got)
	}
}

func testCreateJobAudited(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	j, err := s.CreateJobAudited(ctx, Job{Command: "mtp steps 10", User: "U1"},
		AuditEntry{Platform: "slack", User: "U1", Command: "mtp steps 10", Decision: DecisionAccepted})
	if err != nil {
		t.Fatal(err)
	}
	a := must(s.Audit(ctx, AuditFilter{}))(t)
	if len(a) != 1 || a[0].JobID != j.ID || !a[0].At.Equal(j.CreatedAt) {
		t.Fatalf("audit = %+v, want one entry for job %d at %v", a, j.ID, j.CreatedAt)
	}
	if got, err := s.Job(ctx, j.ID); err != nil || got.Status != Queued {
		t.Errorf("job = %+v, %v", got, err)
	}
	// Both or neither: a bad entry stores no job, a bad job no entry.
	if _, err := s.CreateJobAudited(ctx, Job{Command: "x"}, AuditEntry{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no decision: %v", err)
	}
	if _, err := s.CreateJobAudited(ctx, Job{}, AuditEntry{Decision: DecisionAccepted}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no command: %v", err)
	}
	if _, err := s.CreateJobAudited(ctx, Job{Command: "x"}, AuditEntry{Decision: DecisionAccepted, JobID: 3}); !errors.Is(err, ErrInvalid) {
		t.Errorf("preset job id: %v", err)
	}
	if n, m := count(t, s.rdb, "jobs"), count(t, s.rdb, "audit_log"); n != 1 || m != 1 {
		t.Errorf("rejected calls wrote: %d jobs, %d entries", n, m)
	}
	if err := s.AppendAudit(ctx, AuditEntry{Decision: DecisionCancelled, JobID: 999}); !errors.Is(err, ErrNotFound) {
		t.Errorf("AppendAudit(missing job) = %v, want ErrNotFound", err)
	}
	if err := s.AppendAudit(ctx, AuditEntry{Decision: DecisionCancelled, JobID: j.ID}); err != nil {
		t.Errorf("AppendAudit(job) = %v", err)
	}
}

func TestCreateJobAudited(t *testing.T) { t.Parallel(); eachDriver(t, testCreateJobAudited) }
