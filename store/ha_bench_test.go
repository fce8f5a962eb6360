package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// benchDrivers opens a fresh store of each driver for a benchmark.
//
// Both commit as durably as the SQLite store does (synchronous=NORMAL in
// WAL mode: a commit survives a crash of the process, not a power loss).
// The throwaway PostgreSQL cluster runs with fsync off and
// synchronous_commit off; the benchmark's database is set to
// synchronous_commit = on before the store opens it, so that a commit
// returns only once its WAL is written out to the operating system, as
// SQLite's does (fsync stays off: no power-loss durability, on either
// side). Without this PostgreSQL would answer before writing its WAL and
// look faster than it is.
func benchDrivers(b *testing.B, run func(b *testing.B, s *Store)) {
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			var s *Store
			if d.pg {
				path := filepath.Join(b.TempDir(), "bench")
				synchronousCommit(b, d.where(b, path))
				s = d.openAt(b, path)
				var sc string
				if err := s.rdb.QueryRow(`SHOW synchronous_commit`).Scan(&sc); err != nil || sc != "on" {
					b.Fatalf("the benchmark's store runs with synchronous_commit = %q (%v), want on", sc, err)
				}
			} else {
				s = openTemp(b)
			}
			run(b, s)
		})
	}
}

// synchronousCommit sets synchronous_commit = on for new sessions of the
// PostgreSQL database url names.
func synchronousCommit(b *testing.B, url string) {
	b.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = on', current_database()); END $$`); err != nil {
		b.Fatalf("set synchronous_commit: %v", err)
	}
}

// BenchmarkDurableAck is what a chat command's ack waits for: its job row
// and the audit entry accepting it committed (CreateJobAudited), at 1 and
// at 100 requests at once, SQLite beside PostgreSQL on loopback. Reports
// per-request latency quantiles.
func BenchmarkDurableAck(b *testing.B) {
	benchDrivers(b, func(b *testing.B, s *Store) {
		for _, conc := range []int{1, 100} {
			b.Run(fmt.Sprintf("concurrent=%d", conc), func(b *testing.B) {
				ctx := context.Background()
				var lat latencies
				per := max(1, b.N/conc)
				b.ResetTimer()
				var wg sync.WaitGroup
				for g := range conc {
					wg.Go(func() {
						mine := make([]time.Duration, 0, per)
						for range per {
							user := fmt.Sprintf("U%03d", g)
							j := Job{Command: "mtp steps 10 qwen", Platform: "slack", User: user, Room: "C1", Status: Queued}
							e := AuditEntry{Platform: "slack", User: user, Room: "C1", Command: j.Command, Decision: DecisionAccepted}
							t0 := time.Now()
							if _, err := s.CreateJobAudited(ctx, j, e); err != nil {
								b.Error(err)
								return
							}
							mine = append(mine, time.Since(t0))
						}
						lat.add(mine)
					})
				}
				wg.Wait()
				lat.report(b)
			})
		}
	})
}

// BenchmarkListingsWith100kJobs is `jobs`, `jobs --all` and `history` on a
// store that holds 100,000 jobs and as many bench results, in each driver.
// Reports per-call latency quantiles.
func BenchmarkListingsWith100kJobs(b *testing.B) {
	benchDrivers(b, func(b *testing.B, s *Store) {
		ctx := context.Background()
		const n, batch = 100_000, 1000
		base := time.Now().Add(-30 * 24 * time.Hour).UnixNano()
		for i := 0; i < n; i += batch {
			err := s.write(ctx, func(tx *wtx) error {
				for k := i; k < i+batch; k++ {
					status := "succeeded"
					if k%500 == 0 {
						status = "running"
					}
					var id int64
					if err := tx.QueryRowContext(ctx, `INSERT INTO jobs (command, service, status, created_at, ended_at) VALUES (?, ?, ?, ?, ?) RETURNING id`,
						"mtp steps 10 qwen", []string{"qwen", "llama"}[k%2], status, base+int64(k)*1e9, base+int64(k)*1e9+5e9).Scan(&id); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, `INSERT INTO bench_results (job_id, service, settings, at, output_tok_s, concurrency) VALUES (?, ?, ?, ?, ?, ?)`,
						id, []string{"qwen", "llama"}[k%2], "steps=10", base+int64(k)*1e9, 280.5, 1); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		for _, q := range []struct {
			name string
			fn   func() error
		}{
			{"jobs", func() error { _, err := s.ListJobs(ctx, JobFilter{Active: true, Limit: 20}); return err }},
			{"jobs_all", func() error { _, err := s.ListJobs(ctx, JobFilter{Limit: 20}); return err }},
			{"history", func() error { _, err := s.BenchHistory(ctx, "qwen", 10); return err }},
		} {
			b.Run(q.name, func(b *testing.B) {
				var lat latencies
				var mine []time.Duration
				for b.Loop() {
					t0 := time.Now()
					if err := q.fn(); err != nil {
						b.Fatal(err)
					}
					mine = append(mine, time.Since(t0))
				}
				lat.add(mine)
				lat.report(b)
			})
		}
	})
}
