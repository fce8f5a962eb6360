package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"
)

// appendN appends n audit entries to s, every third one with a job
// (CreateJobAudited), the rest alone (AppendAudit), at times from at on,
// one second apart, their detail naming who wrote them.
func appendN(t testing.TB, s *Store, who string, n int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		e := AuditEntry{At: at.Add(time.Duration(i) * time.Second), Platform: "slack", User: "U" + who, Room: "C1",
			Command: "mtp steps 10", Decision: DecisionAccepted, Detail: fmt.Sprintf("%s #%d: ünïcode \"quoted\"\n", who, i)}
		if i%3 == 0 {
			if _, err := s.CreateJobAudited(ctx, Job{Command: "mtp steps 10", Status: Queued, CreatedAt: e.At}, e); err != nil {
				t.Errorf("CreateJobAudited: %v", err)
				return
			}
			continue
		}
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Errorf("AppendAudit: %v", err)
			return
		}
	}
}

// verified checks s's chain and returns the report.
func verified(t testing.TB, s *Store) ChainReport {
	t.Helper()
	rep, err := s.VerifyAudit(context.Background())
	if err != nil {
		t.Fatalf("VerifyAudit: %v", err)
	}
	return rep
}

// exported returns s's whole audit log as an export.
func exported(t testing.TB, s *Store) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := s.ExportAudit(context.Background(), &b, time.Unix(0, 0), time.Time{}); err != nil {
		t.Fatalf("ExportAudit: %v", err)
	}
	return b.Bytes()
}

// A store's entries form one chain, on both drivers (PostgreSQL's trigger
// and the Go code hash the same bytes): the store verifies, its export
// verifies without it, to the same last hash, and a window of it
// (--since/--until) is an unbroken stretch that verifies too.
func TestAuditChainVerifies(t *testing.T) { t.Parallel(); eachDriver(t, testAuditChainVerifies) }

func testAuditChainVerifies(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	t0 := time.Date(2026, 4, 1, 3, 0, 0, 123456789, time.UTC)
	if rep := verified(t, s); rep.Entries != 0 || rep.Anchor != GenesisHash {
		t.Fatalf("empty store: %+v, want no entries after the genesis", rep)
	}
	appendN(t, s, "alice", 30, t0)
	rep := verified(t, s)
	if rep.Entries != 30 || rep.First != 1 || rep.Last != 30 || rep.Before != 0 {
		t.Fatalf("store: %+v, want entries 1..30", rep)
	}
	file, err := VerifyAuditFile(bytes.NewReader(exported(t, s)))
	if err != nil {
		t.Fatalf("VerifyAuditFile: %v", err)
	}
	if file.Entries != 30 || file.LastHash != rep.LastHash || file.Anchor != GenesisHash {
		t.Fatalf("file: %+v, want the store's 30 entries ending at %s", file, rep.LastHash)
	}
	var b bytes.Buffer
	ex, err := s.ExportAudit(context.Background(), &b, t0.Add(10*time.Second), t0.Add(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Entries != 10 || ex.First != 11 || ex.Last != 20 {
		t.Fatalf("window export: %+v, want entries 11..20", ex)
	}
	if w, err := VerifyAuditFile(&b); err != nil || w.First != 11 || w.Last != 20 {
		t.Fatalf("window verify: %+v, %v", w, err)
	}
}

// tamper runs stmts on s's database as an operator with write access
// would, the append-only triggers dropped first.
func tamper(t *testing.T, s *Store, stmts ...string) {
	t.Helper()
	drop := []string{`DROP TRIGGER audit_log_no_update`, `DROP TRIGGER audit_log_no_delete`}
	if s.dialect == postgresSQL {
		for i := range drop {
			drop[i] += ` ON audit_log`
		}
	}
	for _, q := range append(drop, stmts...) {
		if _, err := s.wdb.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// chainBroken fails unless err is a *ChainError naming entry id (and line,
// when not 0) for a reason that contains why.
func chainBroken(t *testing.T, err error, id int64, line int, why string) {
	t.Helper()
	var ce *ChainError
	if !errors.As(err, &ce) || !errors.Is(err, ErrChainBroken) {
		t.Fatalf("got %v, want a broken chain at entry %d", err, id)
	}
	if ce.ID != id || ce.Line != line || !strings.Contains(ce.Reason, why) {
		t.Fatalf("got %v (entry %d, line %d), want entry %d, line %d, %q", err, ce.ID, ce.Line, id, line, why)
	}
}

// An operator who edits or deletes rows in the database is caught: the
// store's verify names the first entry that does not match.
func TestAuditChainDetectsStoreTampering(t *testing.T) {
	t.Parallel()
	eachDriver(t, testAuditChainDetectsStoreTampering)
}

func testAuditChainDetectsStoreTampering(t *testing.T, drv driver) {
	t.Parallel()
	cases := []struct {
		name  string
		stmts []string
		id    int64
		why   string
	}{
		{"edit", []string{`UPDATE audit_log SET decision = 'refused' WHERE id = 4`}, 4, "does not match its hash"},
		{"edit and rehash", nil, 5, "is not the hash"},
		{"delete", []string{`DELETE FROM audit_log WHERE id = 4`}, 5, "entry 4 should come next: entries 4 are missing"},
		{"delete several", []string{`DELETE FROM audit_log WHERE id IN (3, 4, 5)`}, 6, "entries 3..5 are missing"},
		{"delete the last", []string{`DELETE FROM audit_log WHERE id >= 9`}, 0, "entries 9..10 were removed"},
		{"move", []string{`UPDATE audit_log SET at = at + 1 WHERE id = 7`}, 7, "does not match its hash"},
		{"unhash", []string{`UPDATE audit_log SET hash = NULL, prev = NULL WHERE id = 2`}, 2, "it has no hash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := drv.openTemp(t)
			appendN(t, s, "bob", 10, time.Now().Add(-time.Hour))
			verified(t, s)
			stmts := c.stmts
			if stmts == nil {
				// Entry 4 changed, with its hash recomputed to match.
				var e AuditEntry
				err := scanAudit(context.Background(), s.rdb, 4, 4, func(got *AuditEntry) error { e = *got; return nil })
				if err != nil {
					t.Fatal(err)
				}
				e.Decision = DecisionRefused
				h, _ := chainHash(nil, e.Prev, &e)
				stmts = []string{`UPDATE audit_log SET decision = 'refused', hash = '` + h + `' WHERE id = 4`}
			}
			tamper(t, s, stmts...)
			_, err := s.VerifyAudit(context.Background())
			chainBroken(t, err, c.id, 0, c.why)
		})
	}
}

// An export handed to an auditor shows an edited, removed or reordered
// line, naming the first entry (and its line) that does not match.
func TestAuditChainDetectsFileTampering(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	appendN(t, s, "carol", 8, time.Now().Add(-time.Hour))
	lines := strings.SplitAfter(string(exported(t, s)), "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline
	join := func(ls ...string) string { return strings.Join(ls, "") }
	cases := []struct {
		name string
		file string
		id   int64
		line int
		why  string
	}{
		{"edit", join(append(append(append([]string{}, lines[:2]...), strings.Replace(lines[2], `"accepted"`, `"refused"`, 1)), lines[3:]...)...),
			3, 3, "does not match its hash"},
		{"delete", join(append(append([]string{}, lines[:2]...), lines[3:]...)...), 4, 3, "entry 3 should come next"},
		{"reorder", join(append(append([]string{}, lines[:2]...), append([]string{lines[3], lines[2]}, lines[4:]...)...)...),
			4, 3, "entry 3 should come next"},
		{"duplicate", join(append(append([]string{}, lines[:3]...), lines[2:]...)...), 3, 4, "comes after entry 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyAuditFile(strings.NewReader(c.file))
			chainBroken(t, err, c.id, c.line, c.why)
		})
	}
	if _, err := VerifyAuditFile(strings.NewReader(join(lines...) + "{\"id\": 9\n")); err == nil || errors.Is(err, ErrChainBroken) {
		t.Fatalf("a line that is not JSON: %v, want it named as not an entry", err)
	}
}

// Pruning removes the oldest entries and keeps the rest verifiable: the
// anchor becomes the last pruned entry, and entries appended after a prune
// that removed everything chain on from it.
func TestPruneKeepsAuditChain(t *testing.T) { t.Parallel(); eachDriver(t, testPruneKeepsAuditChain) }

func testPruneKeepsAuditChain(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	old := time.Now().Add(-100 * 24 * time.Hour)
	appendN(t, s, "dave", 6, old)
	appendN(t, s, "dave", 4, time.Now().Add(-time.Hour))
	before := exported(t, s)
	p, err := s.Prune(ctx, time.Now().Add(-90*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if p.Audit != 6 {
		t.Fatalf("pruned %d audit entries, want 6", p.Audit)
	}
	rep := verified(t, s)
	if rep.First != 7 || rep.Last != 10 {
		t.Fatalf("after prune: %+v, want entries 7..10", rep)
	}
	// The anchor is entry 6's hash, as the export before the prune has it.
	sixth := strings.Split(string(before), "\n")[5]
	if !strings.Contains(sixth, `"hash":"`+rep.Anchor+`"`) {
		t.Fatalf("anchor %s is not entry 6's hash: %s", rep.Anchor, sixth)
	}
	if _, err := s.Prune(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if rep := verified(t, s); rep.Entries != 0 {
		t.Fatalf("after pruning everything: %+v", rep)
	}
	appendN(t, s, "dave", 2, time.Now())
	if rep := verified(t, s); rep.First != 11 || rep.Last != 12 {
		t.Fatalf("after appending again: %+v, want entries 11..12", rep)
	}
}

// Two store handles on one database (two processes) appending at once
// keep one chain: every entry is in it, none twice, and it verifies.
func TestAuditChainConcurrentStores(t *testing.T) {
	t.Parallel()
	eachDriver(t, testAuditChainConcurrentStores)
}

func testAuditChainConcurrentStores(t *testing.T, drv driver) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	a, b := drv.openAt(t, path), drv.openAt(t, path)
	const per, writers = 20, 8
	var wg sync.WaitGroup
	for i := range writers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			appendN(t, s, fmt.Sprintf("w%d", i), per, time.Now())
		}()
	}
	wg.Wait()
	for _, s := range []*Store{a, b} {
		rep := verified(t, s)
		if rep.Entries != per*writers || rep.First != 1 || rep.Last != per*writers {
			t.Fatalf("%+v, want %d entries, 1..%d", rep, per*writers, per*writers)
		}
	}
	if _, err := VerifyAuditFile(bytes.NewReader(exported(t, b))); err != nil {
		t.Fatal(err)
	}
}

// A store from before the chain keeps its entries, unchained and counted
// apart; the chain starts after them at the genesis.
func TestAuditChainMigration(t *testing.T) { t.Parallel(); eachDriver(t, testAuditChainMigration) }

func testAuditChainMigration(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	d, old := sqliteSQL, fstest.MapFS{}
	entries, err := fs.ReadDir(migrationFS, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "0012_") {
			break
		}
		data, _ := fs.ReadFile(migrationFS, e.Name())
		old[e.Name()] = &fstest.MapFile{Data: data}
	}
	if drv.pg {
		d = postgresSQL
	}
	// An older opsbot's store: a fresh database migrated to 0011 only,
	// with entries of its own.
	db := rawDB(t, path)
	if drv.pg {
		var err error
		if db, err = sql.Open("pgx", drv.where(t, path)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
	}
	if err := migrate(ctx, db, old, d); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := db.Exec(d.rebind(`INSERT INTO audit_log (at, platform, user_id, decision) VALUES (?, 'slack', 'UOLD', 'accepted')`), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := drv.openAt(t, path)
	appendN(t, s, "erin", 2, time.Now())
	rep := verified(t, s)
	if rep.Before != 3 || rep.Entries != 2 || rep.First != 4 || rep.Anchor != GenesisHash {
		t.Fatalf("%+v, want 3 entries before the chain, then 4..5 after the genesis", rep)
	}
	file, err := VerifyAuditFile(bytes.NewReader(exported(t, s)))
	if err != nil || file.Before != 3 || file.Entries != 2 {
		t.Fatalf("export: %+v, %v", file, err)
	}
}

// A copy of a pruned store keeps its chain as it was: the entries their
// ids and hashes (not chained again by the target), the anchor and the
// head, into either driver.
func TestCopyKeepsPrunedAuditChain(t *testing.T) {
	t.Parallel()
	for _, from := range drivers {
		for _, to := range drivers {
			t.Run(from.name+"_to_"+to.name, func(t *testing.T) {
				t.Parallel()
				if from.pg || to.pg {
					drivers[1].openTemp(t) // skips without PostgreSQL
				}
				ctx := context.Background()
				src := from.openTemp(t)
				dst := to.openTemp(t)
				appendN(t, src, "frank", 5, time.Now().Add(-100*24*time.Hour))
				appendN(t, src, "frank", 3, time.Now().Add(-time.Hour))
				if _, err := src.Prune(ctx, time.Now().Add(-90*24*time.Hour)); err != nil {
					t.Fatal(err)
				}
				want := verified(t, src)
				if _, err := Copy(ctx, src, dst, CopyOptions{}); err != nil {
					t.Fatal(err)
				}
				if got := verified(t, dst); got != want || got.First != 6 {
					t.Fatalf("the copy's chain %+v, the source's %+v", got, want)
				}
			})
		}
	}
}
