package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// fill writes at least one row into every table Copy copies (and into the
// ones it skips), with times that use every nanosecond digit.
func fill(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	base := time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.UTC)
	o, err := s.RegisterOwner(ctx, Owner{ID: "src-owner", Host: "a", PID: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var last Job
	for i := range 1203 { // more than two batches
		j := Job{Command: fmt.Sprintf("mtp steps %d", i%16+1), Service: "qwen", User: "U1",
			CreatedAt: base.Add(time.Duration(i) * 1001 * time.Nanosecond)}
		if i%2 == 0 { // typed commands, and jobs without one (NULL)
			j.Args = json.RawMessage(fmt.Sprintf(`{"v":1,"command":"mtp steps","args":{"steps":%d,"note":"ü \"✓\""}}`, i%16+1))
		}
		if i%5 == 0 {
			j.Command += " --dry-run"
			j.DryRun = true
		}
		j = must(s.CreateJob(ctx, j))(t)
		if i%3 == 0 {
			must(0, s.StartJob(ctx, j.ID))(t)
			must(0, s.AppendEvent(ctx, Event{JobID: j.ID, Step: "stop", Status: "done", Message: "ü ✓", At: base.Add(time.Duration(i) + 7)}))(t)
			must(0, s.FinishJob(ctx, j.ID, Succeeded, "", json.RawMessage(`{"unit":{"before":"a","after":"b"}}`)))(t)
		}
		last = j
	}
	must(s.AddBenchResult(ctx, BenchResult{JobID: last.ID, Service: "qwen", Settings: "steps=10", At: base, OutputTokS: 283.25, AcceptLen: 3.5,
		Concurrency: 1, Prompts: 8, InputLen: 512, OutputLen: 256, Raw: json.RawMessage(`{"x":1}`)}))(t)
	sc := must(s.AddSchedule(ctx, Schedule{Spec: "@daily", Command: "bench", Missed: "run", CreatedAt: base}))(t)
	sc2 := must(s.AddSchedule(ctx, Schedule{Spec: "@hourly", Command: "status"}))(t)
	must(0, s.RemoveSchedule(ctx, sc2.ID))(t) // the counter stays past it
	must(s.ClaimFiring(ctx, sc.ID, base.Add(time.Hour), base.Add(25*time.Hour)))(t)
	must(0, s.AppendAudit(ctx, AuditEntry{At: base, User: "U1", Decision: DecisionAccepted, JobID: last.ID}))(t)
	must(0, s.SetSyncToken(ctx, "matrix.next_batch", "s123_456"))(t)
	must(s.ClaimDelivery(ctx, "slack", "Ev1", time.Hour))(t)
	must(0, s.AddConfirmation(ctx, Confirmation{Token: "tok1", Platform: "slack", User: "U1", Room: "C1", Command: "gpu recover",
		Proposed: true, CreatedAt: base, Expires: base.Add(time.Minute)}, base, 10, 10))(t)
	must(0, s.AddApproval(ctx, Approval{Token: "tok2", Platform: "slack", User: "U1", Room: "C1", Command: "svc stop qwen",
		CreatedAt: base, Expires: base.Add(time.Minute)}, base, 10, 10))(t)
	in, _ := must2(s.OpenIncident(ctx, Incident{Service: "qwen", Kind: "down", Summary: "503", OpenedAt: base, UpdatedAt: base}))(t)
	must(0, s.CloseIncident(ctx, in.ID, "back", base.Add(time.Minute)))(t)
	must(0, s.Silence(ctx, "qwen", base.Add(time.Hour), "U1", base))(t)
	must(s.AcquireLease(ctx, "service:qwen", o.ID, last.ID, time.Minute))(t)
	must(0, s.RequestCancel(ctx, last.ID, "U1"))(t)
}

// must2 is must for a call with two results.
func must2[A, B any](a A, b B, err error) func(testing.TB) (A, B) {
	return func(t testing.TB) (A, B) {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return a, b
	}
}

// dump reads every row of table as Go values normalised across drivers.
func dump(t *testing.T, s *Store, table string) [][]any {
	t.Helper()
	rows, err := s.rdb.DB.Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				vals[i] = string(b)
			}
		}
		out = append(out, vals)
	}
	return out
}

// store copy moves every row exactly, in each direction between the
// drivers, skips what describes running processes, moves the id sequences
// past the copied ids, and refuses a target that is not empty.
func TestCopy(t *testing.T) {
	t.Parallel()
	for _, from := range drivers {
		for _, to := range drivers {
			t.Run(from.name+"_to_"+to.name, func(t *testing.T) {
				t.Parallel()
				if from.pg || to.pg {
					drivers[1].openTemp(t) // skips without PostgreSQL
				}
				ctx := context.Background()
				src := from.openAt(t, filepath.Join(t.TempDir(), "src.db"))
				dst := to.openAt(t, filepath.Join(t.TempDir(), "dst.db"))
				fill(t, src)
				// fill leaves a live owner and its lease: a live copy.
				res, err := Copy(ctx, src, dst, CopyOptions{Live: true})
				if err != nil {
					t.Fatalf("Copy: %v", err)
				}
				copied, skipped := res.Copied, res.Skipped
				if len(res.Live) != 1 || res.Live[0].Key != "service:qwen" || res.Cut.IsZero() {
					t.Errorf("live leases at the cut %+v, cut %s; want service:qwen", res.Live, res.Cut)
				}
				for _, c := range copied {
					if c.Rows == 0 {
						t.Errorf("no rows of %s copied", c.Table)
					}
					if want := dump(t, src, c.Table); !reflect.DeepEqual(dump(t, dst, c.Table), want) || int64(len(want)) != c.Rows {
						t.Errorf("%s differs after the copy (%d rows reported):\nsource %v\ntarget %v", c.Table, c.Rows, want[:min(2, len(want))], dump(t, dst, c.Table)[:min(2, len(want))])
					}
				}
				if got := fmt.Sprint(skipped); got != "[{owners 1} {leases 1} {cancel_requests 1}]" {
					t.Errorf("skipped %s", got)
				}
				for _, tb := range SkippedTables {
					if n := must(tableRows(ctx, dst.view(), tb))(t); n != 0 {
						t.Errorf("%s: %d rows copied, want none", tb, n)
					}
				}
				// Times are exact to the nanosecond.
				j1 := must(src.Job(ctx, 1))(t)
				j2 := must(dst.Job(ctx, 1))(t)
				if !reflect.DeepEqual(j1, j2) || j2.CreatedAt.Nanosecond() != 535897932 {
					t.Errorf("job 1: source %+v, copy %+v", j1, j2)
				}
				// The typed command and the dry-run flag come along, NULL and false too.
				if want := `{"v":1,"command":"mtp steps","args":{"steps":1,"note":"ü \"✓\""}}`; string(j2.Args) != want || !j2.DryRun {
					t.Errorf("job 1's copy: Args %s, DryRun %v; want %s, true", j2.Args, j2.DryRun, want)
				}
				if j := must(dst.Job(ctx, 2))(t); j.Args != nil || j.DryRun {
					t.Errorf("job 2's copy: Args %q, DryRun %v; want none, false", j.Args, j.DryRun)
				}
				if got, want := ids(must(dst.FinishedJobs(ctx, "qwen", 0, 1000))(t)), ids(must(src.FinishedJobs(ctx, "qwen", 0, 1000))(t)); !slices.Equal(got, want) || len(got) == 0 {
					t.Errorf("FinishedJobs in the copy: %v, in the source %v", got, want)
				}
				// New ids continue past the copied ones (and past a removed schedule's).
				if j := must(dst.CreateJob(ctx, Job{Command: "status"}))(t); j.ID != 1204 {
					t.Errorf("the next job in the copy is #%d, want #1204", j.ID)
				}
				if sc := must(dst.AddSchedule(ctx, Schedule{Spec: "@daily", Command: "x"}))(t); sc.ID != 3 {
					t.Errorf("the next schedule in the copy is #%d, want #3 (after the removed #2)", sc.ID)
				}
				// The audit chain comes along as it was, its ends too, and
				// the copy's next entry chains after the copied ones.
				chain := verified(t, src)
				if got := verified(t, dst); got != chain || chain.Entries == 0 {
					t.Errorf("the copy's audit chain %+v, the source's %+v", got, chain)
				}
				must(0, dst.AppendAudit(ctx, AuditEntry{User: "U2", Decision: DecisionAccepted}))(t)
				if got := verified(t, dst); got.Last != chain.Last+1 {
					t.Errorf("the copy's next audit entry: chain %+v, want entry %d", got, chain.Last+1)
				}
				// A second copy into the now non-empty target is refused and changes nothing.
				before := dump(t, dst, "jobs")
				if _, err := Copy(ctx, src, dst, CopyOptions{Live: true}); !errors.Is(err, ErrNotEmpty) {
					t.Errorf("second copy: %v, want ErrNotEmpty", err)
				}
				if !reflect.DeepEqual(dump(t, dst, "jobs"), before) {
					t.Error("a refused copy changed the target")
				}
			})
		}
	}
}
