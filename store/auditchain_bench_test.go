package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkAuditAppend is what an audit entry costs under load: about 100
// goroutines appending at once, on each driver (committed as durably as
// BenchmarkDurableAck's), alone (AppendAudit: a refusal, a confirmation)
// and with the job it accepts (CreateJobAudited: the ack path). Reports
// per-call latency quantiles. Run on a store before the chain for the
// figure without it: the benchmark uses only calls both have.
func BenchmarkAuditAppend(b *testing.B) {
	benchDrivers(b, func(b *testing.B, s *Store) {
		for _, mode := range []string{"append", "ack"} {
			b.Run(mode+"/concurrent=100", func(b *testing.B) {
				const conc = 100
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
							e := AuditEntry{Platform: "slack", User: user, Room: "C1", Command: "mtp steps 10 qwen", Decision: DecisionAccepted}
							t0 := time.Now()
							var err error
							if mode == "ack" {
								_, err = s.CreateJobAudited(ctx, Job{Command: e.Command, Platform: "slack", User: user, Room: "C1", Status: Queued}, e)
							} else {
								err = s.AppendAudit(ctx, e)
							}
							if err != nil {
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

// fillChain adds n chained entries to s's empty audit log directly, in
// large transactions (what a year of appends leaves, in seconds), and moves
// the head after them.
func fillChain(b *testing.B, s *Store, n int) {
	b.Helper()
	const rows = 1000
	prev := GenesisHash
	at := time.Now().Add(-365 * 24 * time.Hour)
	var buf []byte
	tx, err := s.wdb.Begin()
	if err != nil {
		b.Fatal(err)
	}
	insert := `INSERT INTO audit_log (id, at, platform, user_id, room, command, decision, detail, job_id, prev, hash) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", rows), ", ")
	for id := int64(1); id <= int64(n); {
		if s.dialect == postgresSQL {
			if _, err := tx.Exec(`SELECT set_config('opsbot.audit_verbatim', 'on', true)`); err != nil {
				b.Fatal(err)
			}
		}
		args := make([]any, 0, rows*11)
		for range rows {
			e := AuditEntry{ID: id, At: at.Add(time.Duration(id) * 30 * time.Second), Platform: "slack", User: fmt.Sprintf("U%03d", id%100),
				Room: "C1", Command: "mtp steps 10 qwen", Decision: DecisionAccepted, Detail: "role operator"}
			e.Prev = prev
			e.Hash, buf = chainHash(buf, prev, &e)
			args = append(args, e.ID, e.At.UnixNano(), e.Platform, e.User, e.Room, e.Command, e.Decision, e.Detail, nil, e.Prev, e.Hash)
			prev = e.Hash
			id++
		}
		if _, err := tx.Exec(s.dialect.rebind(insert), args...); err != nil {
			b.Fatal(err)
		}
		if id%100_000 == 1 && id <= int64(n) {
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			if tx, err = s.wdb.Begin(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := tx.Exec(s.dialect.rebind(`UPDATE audit_chain SET seq = ?, hash = ? WHERE name = 'head'`), n, prev); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAuditVerify1M is `opsbot audit verify` over a million entries,
// on each driver: the store itself (--config), and an export of it (FILE;
// exported once first, that time logged). Reports seconds per verify.
func BenchmarkAuditVerify1M(b *testing.B) {
	const n = 1_000_000
	benchDrivers(b, func(b *testing.B, s *Store) {
		t0 := time.Now()
		fillChain(b, s, n)
		b.Logf("filled %d entries in %s", n, time.Since(t0).Round(time.Millisecond))
		ctx := context.Background()
		b.Run("store", func(b *testing.B) {
			for b.Loop() {
				rep, err := s.VerifyAudit(ctx)
				if err != nil || rep.Entries != n {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
		})
		b.Run("file", func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "audit.jsonl")
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if _, err := s.ExportAudit(ctx, f, time.Unix(0, 0), time.Time{}); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
			b.Logf("exported %d entries in %s", n, time.Since(t0).Round(time.Millisecond))
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				rep, err := VerifyAuditFile(f)
				f.Close()
				if err != nil || rep.Entries != n {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
		})
	})
}
