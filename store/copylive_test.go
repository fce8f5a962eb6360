package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// A source that live opsbot processes use is refused, naming each lease
// (its name, its holder, until when) and each live process that holds
// none; nothing is written to the target. Leases of a process that died
// (expired) do not count. With Live the same source is copied.
func TestCopyRefusesALiveSource(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, drv driver) {
		ctx := context.Background()
		src := drv.openTemp(t)
		dst := openTemp(t)
		j := must(src.CreateJob(ctx, Job{Command: "mtp steps 3"}))(t)
		serve := must(src.RegisterOwner(ctx, Owner{ID: "h1:4242:aa", Host: "h1", PID: 4242}, time.Minute))(t)
		must(src.AcquireLease(ctx, "scheduler", serve.ID, 0, time.Minute))(t)
		must(src.AcquireLease(ctx, "service:qwen", serve.ID, j.ID, time.Minute))(t)
		must(src.RegisterOwner(ctx, Owner{ID: "h2:77:bb", Host: "h2", PID: 77}, time.Minute))(t) // a standby
		dead := must(src.RegisterOwner(ctx, Owner{ID: "h3:9:cc", Host: "h3", PID: 9}, time.Millisecond))(t)
		must(src.AcquireLease(ctx, "watchdog", dead.ID, 0, time.Millisecond))(t)
		testkit.WaitFor(t, 10*time.Second, "the dead process's lease to expire", func() bool {
			n, _ := src.Now(ctx)
			return n.After(dead.ExpiresAt.Add(time.Millisecond))
		})

		_, err := Copy(ctx, src, dst, CopyOptions{})
		var live *LiveSourceError
		if !errors.As(err, &live) || !errors.Is(err, ErrSourceLive) {
			t.Fatalf("copy of a live source: %v; want a LiveSourceError", err)
		}
		until := serve.ExpiresAt.UTC().Format("2006-01-02 15:")
		for _, want := range []string{
			"the source store " + src.Name() + " is in use by live opsbot processes: ",
			"lease scheduler held by opsbot on h1 (pid 4242) until " + until,
			fmt.Sprintf("lease service:qwen held by job #%d of opsbot on h1 (pid 4242) until %s", j.ID, until),
			"opsbot on h2 (pid 77) live until " + until, "holding no lease",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal lacks %q:\n%s", want, err)
			}
		}
		if strings.Contains(err.Error(), "watchdog") || strings.Contains(err.Error(), "h3") {
			t.Errorf("the refusal names the dead process:\n%s", err)
		}
		if n := must(tableRows(ctx, dst.view(), "jobs"))(t); n != 0 {
			t.Fatalf("a refused copy wrote %d jobs", n)
		}
		res, err := Copy(ctx, src, dst, CopyOptions{Live: true})
		if err != nil {
			t.Fatalf("a live copy: %v", err)
		}
		if keys := leaseKeys(res.Live); keys != "scheduler service:qwen" {
			t.Errorf("live leases at the cut: %s", keys)
		}
		if fmt.Sprint(res.Skipped) != "[{owners 3} {leases 3} {cancel_requests 0}]" {
			t.Errorf("skipped %v", res.Skipped)
		}
		for _, c := range res.Copied {
			if c.Table == "leases" || c.Table == "owners" {
				t.Errorf("%s counted as copied", c.Table)
			}
		}
	})
}

func leaseKeys(ls []Lease) string {
	var keys []string
	for _, l := range ls {
		keys = append(keys, l.Key)
	}
	return strings.Join(keys, " ")
}

// A live copy is one consistent cut, as of CopyResult.Cut: while a writer
// keeps adding jobs, each with two events and a bench result written after
// it, the target holds jobs 1..M exactly, every event and bench result of
// those before the last, none of a later job (no orphans, nothing from
// after the cut), and the source went on past M.
func TestCopyLiveIsOneSnapshot(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, drv driver) {
		ctx := context.Background()
		src := drv.openTemp(t)
		dst := openTemp(t)
		fill(t, src)
		var stop atomic.Bool
		var wg sync.WaitGroup
		var wrote atomic.Int64
		wg.Go(func() {
			for !stop.Load() {
				j, err := src.CreateJob(ctx, Job{Command: "status", Service: "qwen"})
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				for _, step := range []string{"read", "verify"} {
					if err := src.AppendEvent(ctx, Event{JobID: j.ID, Step: step, Status: "done", At: time.Now()}); err != nil {
						t.Errorf("writer: %v", err)
						return
					}
				}
				if _, err := src.AddBenchResult(ctx, BenchResult{JobID: j.ID, Service: "qwen", Settings: "steps=1", At: time.Now(), OutputTokS: 1}); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				wrote.Add(1)
			}
		})
		testkit.WaitFor(t, 10*time.Second, "the writer to write", func() bool { return wrote.Load() > 3 })
		before := wrote.Load()
		// The writer goes on while the copy is under way: after the copy's
		// first table it writes two more jobs before the copy continues.
		var once sync.Once
		waitWriter := func(string) {
			once.Do(func() {
				n := wrote.Load()
				testkit.WaitFor(t, 10*time.Second, "the writer to go on during the copy", func() bool { return wrote.Load() >= n+2 })
			})
		}
		res, err := Copy(ctx, src, dst, CopyOptions{Live: true, afterTable: waitWriter})
		after := wrote.Load()
		stop.Store(true)
		wg.Wait()
		if err != nil {
			t.Fatalf("live copy: %v", err)
		}
		t.Logf("the writer wrote %d jobs while the copy ran (cut %s)", after-before, res.Cut.Format(time.RFC3339Nano))
		checkCut(t, src, dst)
	})
}

// checkCut checks that dst holds a prefix of src's jobs 1..M, and the
// events and bench results of exactly those, all of them but the last
// job's (written after it), and that src went on past M.
func checkCut(t *testing.T, src, dst *Store) {
	t.Helper()
	count := func(s *Store, q string, args ...any) int64 {
		var n int64
		if err := s.rdb.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	m := count(dst, `SELECT COALESCE(MAX(id), 0) FROM jobs`)
	if n := count(dst, `SELECT COUNT(*) FROM jobs`); n != m {
		t.Errorf("the copy holds %d jobs, max id %d: not a prefix", n, m)
	}
	if srcMax := count(src, `SELECT MAX(id) FROM jobs`); srcMax <= m {
		t.Errorf("the source's last job #%d is in the copy (#%d): the writer did not go on past the cut", srcMax, m)
	}
	for _, table := range []string{"job_events", "bench_results"} {
		orphans := count(dst, `SELECT COUNT(*) FROM `+table+` x WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = x.job_id)`)
		got := count(dst, `SELECT COUNT(*) FROM `+table+` WHERE job_id < ?`, m)
		want := count(src, `SELECT COUNT(*) FROM `+table+` WHERE job_id < ?`, m)
		if orphans != 0 || got != want {
			t.Errorf("%s: %d rows of jobs before #%d copied, the source has %d; %d rows of jobs not copied", table, got, m, want, orphans)
		}
	}
}
