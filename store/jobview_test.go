package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// typed is the Args of a job with this command, as the command language
// might encode it.
func typed(command string) json.RawMessage {
	return json.RawMessage(`{"v":1,"command":"` + command + `","args":{"service":"qwen","steps":4}}`)
}

func ids(jobs []Job) []int64 {
	out := make([]int64, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// FinishedJobs lists a service's jobs that ended (not refused) with a
// result, newest first, leaving out dry runs by their flag alone (the
// command text is not read), jobs without a result, jobs not final and
// another service's; it pages back with beforeID and stops at limit.
func testFinishedJobs(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx := context.Background()
	changed := json.RawMessage(`{"unit":{"before":"a","after":"b"},"incidents":[]}`)
	add := func(j Job, st Status, result json.RawMessage) int64 {
		t.Helper()
		if j.Service == "" {
			j.Service = "qwen"
		}
		j = mustCreate(t, s, j)
		if st == Queued {
			return j.ID
		}
		must(0, s.StartJob(ctx, j.ID))(t)
		if st == Running {
			return j.ID
		}
		must(0, s.FinishJob(ctx, j.ID, st, "", result))(t)
		return j.ID
	}
	var want []int64 // oldest first
	want = append(want, add(Job{Command: "mtp steps 4 qwen", Args: typed("mtp steps")}, Succeeded, changed))
	add(Job{Command: "mtp steps 4 qwen --dry-run", Args: typed("mtp steps"), DryRun: true}, Succeeded, changed)
	want = append(want, add(Job{Command: "mtp steps 5 qwen"}, Failed, changed))
	add(Job{Command: "mtp steps 4 coder", Service: "coder"}, Succeeded, changed)
	add(Job{Command: "gpu status"}, Succeeded, nil) // no result
	want = append(want, add(Job{Command: "mtp steps 6 qwen"}, Cancelled, changed))
	add(Job{Command: "mtp steps 8 qwen"}, Running, nil)
	add(Job{Command: "mtp steps 9 qwen"}, Queued, nil)
	mustCreate(t, s, Job{Command: "svc stop qwen", Service: "qwen", Status: Refused, Result: changed})
	add(Job{Command: "mtp undo qwen", DryRun: true}, Failed, changed) // a dry run is left out whatever its status
	// The store does not judge a result: one that changed nothing is the caller's to skip.
	want = append(want, add(Job{Command: "mtp steps 4 qwen"}, Interrupted, json.RawMessage(`{"unit":{"before":"b","after":"b"}}`)))
	// Only the flag makes a dry run, not the command text.
	textOnly := add(Job{Command: "mtp steps 4 qwen --dry-run"}, Succeeded, changed)
	want = append(want, textOnly)
	slices.Reverse(want) // newest first

	all := must(s.FinishedJobs(ctx, "qwen", 0, 0))(t)
	if got := ids(all); !slices.Equal(got, want) {
		t.Fatalf("FinishedJobs = %v, want %v", got, want)
	}
	for _, j := range all {
		if j.DryRun || !j.Status.Final() || j.Result == nil || j.Service != "qwen" {
			t.Errorf("listed %+v", j)
		}
	}
	if first := all[len(all)-1]; string(first.Args) != string(typed("mtp steps")) {
		t.Errorf("the listed job's Args = %s, want %s", first.Args, typed("mtp steps"))
	}

	// Pages of 2, each from below the last id of the one before.
	var paged []int64
	before := int64(0)
	for pages := 0; ; pages++ {
		page := must(s.FinishedJobs(ctx, "qwen", before, 2))(t)
		if len(page) > 2 || pages > len(want) {
			t.Fatalf("page %d: %v (limit 2)", pages, ids(page))
		}
		paged = append(paged, ids(page)...)
		if len(page) < 2 {
			break
		}
		before = page[len(page)-1].ID
	}
	if !slices.Equal(paged, want) {
		t.Errorf("paged = %v, want %v", paged, want)
	}
	if got := ids(must(s.FinishedJobs(ctx, "qwen", want[0], 0))(t)); !slices.Equal(got, want[1:]) {
		t.Errorf("before the newest (%d) = %v, want %v", want[0], got, want[1:])
	}
	if got := must(s.FinishedJobs(ctx, "qwen", want[len(want)-1], 10))(t); len(got) != 0 {
		t.Errorf("before the oldest = %v, want none", ids(got))
	}
	if got := ids(must(s.FinishedJobs(ctx, "qwen", -1, 0))(t)); !slices.Equal(got, want) {
		t.Errorf("beforeID -1 = %v, want every job %v", got, want)
	}
	if got := must(s.FinishedJobs(ctx, "nobody", 0, 0))(t); len(got) != 0 {
		t.Errorf("a service without jobs: %v", ids(got))
	}

	// limit <= 0 means 50.
	for i := range 52 {
		mustCreate(t, s, Job{Command: fmt.Sprintf("mtp steps %d coder", i), Service: "many", Status: Succeeded, Result: changed})
	}
	for _, limit := range []int{0, -1} {
		if got := must(s.FinishedJobs(ctx, "many", 0, limit))(t); len(got) != 50 {
			t.Errorf("limit %d: %d jobs, want 50", limit, len(got))
		}
	}
	if got := must(s.FinishedJobs(ctx, "many", 0, 60))(t); len(got) != 52 {
		t.Errorf("limit 60: %d jobs, want 52", len(got))
	}
}

func TestFinishedJobs(t *testing.T) { t.Parallel(); eachDriver(t, testFinishedJobs) }

// FinishedJobs walks the jobs_service index backwards from beforeID and
// sorts nothing: its cost is the page, not the service's history.
func TestFinishedJobsPlan(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	for _, before := range []int64{0, 10} {
		q, args := finishedJobsQuery("qwen", before, 5)
		rows, err := s.rdb.DB.Query(`EXPLAIN QUERY PLAN `+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "; ")
		want := "USING INDEX jobs_service (service=?)"
		if before > 0 {
			want = "USING INDEX jobs_service (service=? AND id<?)"
		}
		if !strings.Contains(p, want) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("plan before %d:\n%s\nwant %s and no sort", before, p, want)
		}
	}
}

// The audit entries of a job: none for a job created without one, the one
// CreateJobAudited wrote for its job.
func testJobAudit(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx := context.Background()
	plain := mustCreate(t, s, Job{Command: "mtp steps 4 qwen", Service: "qwen"})
	if audit := must(s.JobAudit(ctx, plain.ID))(t); len(audit) != 0 {
		t.Errorf("audit of a job created without one: %+v", audit)
	}
	j, err := s.CreateJobAudited(ctx, Job{Command: "svc stop qwen", Service: "qwen", Status: Queued},
		AuditEntry{Platform: "test", User: "olga", Decision: "confirmed by test:olga"})
	if err != nil {
		t.Fatal(err)
	}
	if audit, err := s.JobAudit(ctx, j.ID); err != nil || len(audit) != 1 || audit[0].Decision != "confirmed by test:olga" {
		t.Errorf("JobAudit = %+v, %v", audit, err)
	}
}

func TestJobAudit(t *testing.T) { t.Parallel(); eachDriver(t, testJobAudit) }

// Args and DryRun are kept as CreateJob and CreateJobAudited were given
// them, and read back by every call that returns jobs; Args that is not
// JSON is refused.
func testJobArgs(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx := context.Background()
	args := json.RawMessage(`{"v":1,"command":"mtp steps","args":{"service":"qwen","steps":4,"note":"it's \"quoted\", {braced}, back\\slash, naïve ☃"}}`)
	check := func(what string, j Job, wantArgs json.RawMessage, wantDry bool) {
		t.Helper()
		if string(j.Args) != string(wantArgs) || (j.Args == nil) != (wantArgs == nil) || j.DryRun != wantDry {
			t.Errorf("%s: Args %q (nil %v), DryRun %v; want %q (nil %v), %v", what, j.Args, j.Args == nil, j.DryRun, wantArgs, wantArgs == nil, wantDry)
		}
	}
	created := must(s.CreateJob(ctx, Job{Command: "mtp steps 4 qwen --dry-run", Service: "qwen", Args: args, DryRun: true}))(t)
	check("CreateJob's job", created, args, true)
	check("Job", must(s.Job(ctx, created.ID))(t), args, true)
	audited := must(s.CreateJobAudited(ctx, Job{Command: "mtp steps 4 qwen", Service: "qwen", Thread: "1.1", Args: args},
		AuditEntry{User: "U1", Decision: DecisionAccepted}))(t)
	check("CreateJobAudited's job", audited, args, false)
	check("Job (audited)", must(s.Job(ctx, audited.ID))(t), args, false)
	auditedDry := must(s.CreateJobAudited(ctx, Job{Command: "svc restart qwen --dry-run", Service: "qwen", Thread: "1.2", Args: typed("svc restart"), DryRun: true},
		AuditEntry{User: "U1", Decision: DecisionAccepted}))(t)
	check("Job (audited, dry run)", must(s.Job(ctx, auditedDry.ID))(t), typed("svc restart"), true)
	none := mustCreate(t, s, Job{Command: "gpu status", Service: "qwen"})
	check("Job without Args", must(s.Job(ctx, none.ID))(t), nil, false)

	listed := must(s.ListJobs(ctx, JobFilter{Service: "qwen"}))(t)
	if got := ids(listed); !slices.Equal(got, []int64{none.ID, auditedDry.ID, audited.ID, created.ID}) {
		t.Fatalf("ListJobs = %v", got)
	}
	check("ListJobs", listed[3], args, true)
	check("ListJobs", listed[1], typed("svc restart"), true)
	// InterruptUnfinished returns the jobs it ends (RETURNING), these with them.
	interrupted := must(s.InterruptUnfinished(ctx, nil))(t)
	if len(interrupted) != 4 {
		t.Fatalf("InterruptUnfinished = %v", ids(interrupted))
	}
	check("InterruptUnfinished", interrupted[0], args, true)
	check("InterruptUnfinished", interrupted[1], args, false)
	unshown := must(s.UnshownFinals(ctx, []string{""}, 10))(t)
	if len(unshown) != 2 {
		t.Fatalf("UnshownFinals = %v", ids(unshown))
	}
	check("UnshownFinals", unshown[1], typed("svc restart"), true)

	for _, bad := range []json.RawMessage{json.RawMessage(`{"v":1,`), json.RawMessage(`mtp steps`)} {
		if _, err := s.CreateJob(ctx, Job{Command: "x", Args: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateJob(Args %s) = %v, want ErrInvalid", bad, err)
		}
		if _, err := s.CreateJobAudited(ctx, Job{Command: "x", Args: bad}, AuditEntry{Decision: DecisionAccepted}); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateJobAudited(Args %s) = %v, want ErrInvalid", bad, err)
		}
	}
	if n := must(s.CountJobs(ctx, JobFilter{}))(t); n != 4 {
		t.Errorf("%d jobs after the refused ones, want 4", n)
	}
}

func TestJobArgs(t *testing.T) { t.Parallel(); eachDriver(t, testJobArgs) }

// migrationsBefore returns the binary's migrations older than the one
// named name (NNNN_name), and that one's version.
func migrationsBefore(t *testing.T, name string) (fs.FS, int) {
	t.Helper()
	version := 0
	m := fstest.MapFS{}
	entries, err := fs.ReadDir(migrationFS, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		sub := migrationName.FindStringSubmatch(e.Name())
		if sub == nil {
			t.Fatalf("migration %s: bad name", e.Name())
		}
		if sub[1] == name {
			version, _ = strconv.Atoi(sub[2])
		}
	}
	if version == 0 {
		t.Fatalf("no migration %s", name)
	}
	for _, e := range entries {
		sub := migrationName.FindStringSubmatch(e.Name())
		if v, _ := strconv.Atoi(sub[2]); v < version {
			m[e.Name()] = &fstest.MapFile{Data: must(fs.ReadFile(migrationFS, e.Name()))(t)}
		}
	}
	return m, version
}

// Jobs recorded by an opsbot older than migration 0011_job_args have no
// flag: the migration sets dry_run once from their command text (a
// --dry-run word), and FinishedJobs leaves those out. Jobs recorded since
// are judged by their flag alone, and a later open does not read the text
// again.
func testDryRunBackfill(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	older, version := migrationsBefore(t, "0011_job_args")
	d, drvName, where := sqliteSQL, "sqlite", dsn(path, false)
	if drv.pg {
		d, drvName, where = postgresSQL, "pgx", drv.where(t, path)
	}
	db, err := sql.Open(drvName, where)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must(0, migrate(ctx, db, older, d))(t)
	var v int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v != version-1 {
		t.Fatalf("schema version before = %d, %v; want %d", v, err, version-1)
	}
	old := []struct {
		command string
		dry     bool
	}{
		{"mtp steps 4 qwen --dry-run", true},
		{"mtp steps 4 qwen", false},
		{"mtp --dry-run steps 4 qwen", true},
		{"--dry-run", true},
		{"mtp steps 4 qwen --dry-runs", false},
		{"mtp steps 4 qwen---dry-run", false},
		{"svc restart qwen --dry-run=false", false},
		{"svc restart qwen", false},
	}
	for i, o := range old {
		if _, err := db.Exec(d.rebind(`INSERT INTO jobs (command, service, status, result, created_at, ended_at)
			VALUES (?, 'qwen', 'succeeded', '{"unit":{"before":"a","after":"b"}}', ?, ?)`), o.command, int64(1000+i), int64(2000+i)); err != nil {
			t.Fatal(err)
		}
	}
	must(0, db.Close())(t)

	s := drv.openAt(t, path) // migrates to the newest version
	if v := must(s.SchemaVersion(ctx))(t); v != known(t) {
		t.Fatalf("schema version after = %d, want %d", v, known(t))
	}
	var want []int64 // newest first
	for i := len(old) - 1; i >= 0; i-- {
		j := must(s.Job(ctx, int64(i+1)))(t)
		if j.Command != old[i].command || j.DryRun != old[i].dry || j.Args != nil {
			t.Errorf("job %d %q after the migration: DryRun %v, Args %q; want DryRun %v, no Args", j.ID, j.Command, j.DryRun, j.Args, old[i].dry)
		}
		if !old[i].dry {
			want = append(want, j.ID)
		}
	}
	if got := ids(must(s.FinishedJobs(ctx, "qwen", 0, 0))(t)); !slices.Equal(got, want) {
		t.Errorf("FinishedJobs after the backfill = %v, want %v", got, want)
	}

	// Recorded since: the flag alone counts, and a second process opening
	// the store does not backfill again.
	text := mustCreate(t, s, Job{Command: "mtp steps 5 qwen --dry-run", Service: "qwen", Status: Succeeded, Result: json.RawMessage(`{}`)})
	flagged := mustCreate(t, s, Job{Command: "mtp steps 5 qwen", Service: "qwen", Status: Succeeded, Result: json.RawMessage(`{}`), DryRun: true})
	s2 := drv.openAt(t, path)
	if j := must(s2.Job(ctx, text.ID))(t); j.DryRun {
		t.Errorf("a job recorded after the migration was backfilled from its text: %+v", j)
	}
	if j := must(s2.Job(ctx, flagged.ID))(t); !j.DryRun {
		t.Errorf("a job recorded as a dry run lost its flag: %+v", j)
	}
	if got := ids(must(s2.FinishedJobs(ctx, "qwen", 0, 0))(t)); !slices.Equal(got, append([]int64{text.ID}, want...)) {
		t.Errorf("FinishedJobs = %v, want %v", got, append([]int64{text.ID}, want...))
	}
}

func TestDryRunBackfill(t *testing.T) { t.Parallel(); eachDriver(t, testDryRunBackfill) }
