package store

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
)

// UnitChangeJobs lists the finished jobs of a service that changed its unit,
// newest first: not dry runs, not jobs that found nothing to change, not
// another service's, not jobs still running.
func testUnitChangeJobs(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx := context.Background()
	add := func(cmd, service string, st Status, result string) int64 {
		t.Helper()
		j := mustCreate(t, s, Job{Command: cmd, Service: service, Status: Queued})
		if st == Queued {
			return j.ID
		}
		if err := s.StartJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if st == Running {
			return j.ID
		}
		if err := s.FinishJob(ctx, j.ID, st, "", json.RawMessage(result)); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	changed := `{"unit":{"before":"a","after":"b"},"incidents":[]}`
	first := add("mtp steps 4 qwen", "qwen", Succeeded, changed)
	add("mtp steps 4 qwen --dry-run", "qwen", Succeeded, changed)
	add("mtp steps 4 qwen", "qwen", Succeeded, `{"unit":{"before":"b","after":"b"},"incidents":[]}`)
	add("mtp steps 4 coder", "coder", Succeeded, changed)
	add("gpu status", "qwen", Succeeded, `{"incidents":[]}`)
	cancelled := add("mtp steps 6 qwen", "qwen", Cancelled, `{"unit":{"before":"b","after":"c"},"incidents":[]}`)
	add("mtp steps 8 qwen", "qwen", Running, "")
	// The unit unchanged, the file beside it changed, created or removed: a change;
	// the file as it was: none.
	file := func(f string) string {
		return `{"unit":{"before":"c","after":"c","files":[` + f + `]},"incidents":[]}`
	}
	fileChanged := add("mtp per-load qwen 1:3 64:1", "qwen", Succeeded, file(`{"path":"/a.json","before":"x","after":"y"}`))
	add("mtp per-load qwen 1:3 64:1", "qwen", Succeeded, file(`{"path":"/a.json","before":"y","after":"y"}`))
	fileCreated := add("mtp per-load qwen 1:3 64:2", "qwen", Failed, file(`{"path":"/a.json","before":"","after":"","created":true}`))
	fileRemoved := add("mtp undo qwen", "qwen", Succeeded, file(`{"path":"/a.json","before":"","after":"","removed":true}`))
	add("mtp steps 4 qwen", "qwen", Succeeded, `{"unit":{"before":"c","after":"c","files":[]},"incidents":[]}`)
	jobs, err := s.UnitChangeJobs(ctx, "qwen", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	if want := []int64{fileRemoved, fileCreated, fileChanged, cancelled, first}; !slices.Equal(got, want) {
		t.Fatalf("got jobs %v, want %v", got, want)
	}
	audit, err := s.JobAudit(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 0 {
		t.Errorf("audit of a job created without one: %+v", audit)
	}
	j, err := s.CreateJobAudited(ctx, Job{Command: "svc stop qwen", Service: "qwen", Status: Queued},
		AuditEntry{Platform: "test", User: "olga", Decision: "confirmed by test:olga"})
	if err != nil {
		t.Fatal(err)
	}
	if audit, err = s.JobAudit(ctx, j.ID); err != nil || len(audit) != 1 || audit[0].Decision != "confirmed by test:olga" {
		t.Errorf("JobAudit = %+v, %v", audit, err)
	}
}

func TestUnitChangeJobs(t *testing.T) { t.Parallel(); eachDriver(t, testUnitChangeJobs) }
