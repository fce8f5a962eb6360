package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// copyTables are the store's tables that Copy moves, in an order that
// satisfies their foreign keys (jobs first). What describes running
// processes (owners, leases, cancel_requests) is not copied: those
// processes are not the target's.
var copyTables = []string{
	"jobs", "job_events", "bench_results", "schedules", "schedule_firings", "audit_log", "kv",
	"chat_events", "confirmations", "approvals", "incidents", "silences", "lease_epochs",
}

// SkippedTables are what Copy leaves behind: they describe running
// processes, which belong to the source.
var SkippedTables = []string{"owners", "leases", "cancel_requests"}

// idTables are the copied tables whose id the database assigns: Copy moves
// their sequences past the copied ids (and past the source's own sequence,
// so an id the source used and deleted is not reused).
var idTables = []string{"jobs", "bench_results", "schedules", "audit_log", "incidents"}

// copyBatch is how many rows one write transaction of Copy carries.
const copyBatch = 500

// CopyCount is how many rows of one table Copy copied (or, for the skipped
// tables, left behind).
type CopyCount struct {
	Table string
	Rows  int64
}

// ErrNotEmpty is wrapped by Copy's error when the target store already
// holds something: Copy only fills an empty store, and changes nothing.
var ErrNotEmpty = fmt.Errorf("the target store is not empty")

// CopyOptions configure Copy.
type CopyOptions struct {
	// Live copies a source in use: the snapshot Copy always reads is all
	// it copies, and what is written after the cut is not. Without it,
	// Copy refuses a source that live opsbot processes hold leases on
	// (*LiveSourceError).
	Live bool

	// afterTable, when set (tests only), is called after each of the
	// store's own tables is copied, inside the snapshot: a test makes the
	// source's writers go on there, while the copy is under way.
	afterTable func(table string)
}

// CopyResult is what Copy did.
type CopyResult struct {
	Copied  []CopyCount // rows copied, per table
	Skipped []CopyCount // rows left behind: SkippedTables, then the side tables dst lacks
	// Cut is the time of the snapshot by the source's clock: the copy
	// holds the source as it was then (and not later).
	Cut time.Time
	// Live are the leases live processes held on the source at the cut
	// (with Live only; they are not copied).
	Live []Lease
}

// Copy copies every job, event, bench result, schedule, claimed schedule
// firing, incident, silence, confirmation, chat claim, audit entry, kv row
// and lease epoch, and the Matrix adapter's tables (SideDB) where the target has them, from src into
// dst, which must be empty (ErrNotEmpty, nothing written, otherwise),
// whatever the two stores' drivers. Ids and times are kept exactly (times
// are integers in both); dst's id sequences are moved past the copied ids.
// A library's tables (SideTables: the Matrix adapter's, which the caller
// has the library create in dst first) are copied by the columns both
// sides have; one that dst lacks is reported as skipped, one that dst
// already fills (a version table) is left as dst has it. It skips
// SkippedTables (leases are never copied), and returns the rows copied per
// table, then the rows skipped.
//
// Every read of src is in one read transaction (see snapshot), so the copy
// is one consistent cut of src, at CopyResult.Cut. A source that live
// opsbot processes use (their leases unexpired at the cut) is refused with
// a *LiveSourceError naming them, unless o.Live. A failure part way leaves
// dst partly filled: empty it (or drop the database) before trying again.
func Copy(ctx context.Context, src, dst *Store, o CopyOptions) (CopyResult, error) {
	if src.name == dst.name {
		return CopyResult{}, fmt.Errorf("copy store: %w: the source and the target are the same store (%s)", ErrInvalid, src.name)
	}
	if err := checkEmpty(ctx, dst); err != nil {
		return CopyResult{}, err
	}
	snap, cut, end, err := src.snapshot(ctx)
	if err != nil {
		return CopyResult{}, fmt.Errorf("copy store: %w", err)
	}
	defer end()
	res := CopyResult{Cut: cut}
	leases, owners, err := liveAt(ctx, snap, cut)
	if err != nil {
		return CopyResult{}, fmt.Errorf("copy store: %s: %w", src.name, err)
	}
	if (len(leases) > 0 || len(owners) > 0) && !o.Live {
		return CopyResult{}, fmt.Errorf("copy store: %w", &LiveSourceError{Store: src.name, Leases: leases, Owners: owners})
	}
	if o.Live {
		res.Live = leases
	}
	from := view{r: snap, d: src.dialect, name: src.name}
	if res.Copied, err = copyStoreTables(ctx, from, dst, o.afterTable); err != nil {
		return res, err
	}
	if res.Skipped, err = copySideTables(ctx, from, dst, &res.Copied); err != nil {
		return res, err
	}
	var left []CopyCount
	for _, t := range SkippedTables {
		n, err := tableRows(ctx, from, t)
		if err != nil {
			return res, fmt.Errorf("copy store: %w", err)
		}
		left = append(left, CopyCount{Table: t, Rows: n})
	}
	res.Skipped = append(left, res.Skipped...)
	return res, nil
}

// view is one way to read a store: its read pool (Store.view), or a
// snapshot of it.
type view struct {
	r    reader
	d    dialect
	name string
}

func (s *Store) view() view { return view{r: s.rdb, d: s.dialect, name: s.name} }

// checkEmpty returns an error wrapping ErrNotEmpty when dst holds rows.
func checkEmpty(ctx context.Context, dst *Store) error {
	var full []string
	for _, t := range append(append([]string{}, copyTables...), SkippedTables...) {
		n, err := tableRows(ctx, dst.view(), t)
		if err != nil {
			return fmt.Errorf("copy store: %w", err)
		}
		if n > 0 {
			full = append(full, fmt.Sprintf("%s: %d", t, n))
		}
	}
	if len(full) > 0 {
		return fmt.Errorf("copy store to %s: %w (%s): copy only into a new database or file", dst.name, ErrNotEmpty, strings.Join(full, ", "))
	}
	return nil
}

// copyStoreTables copies the store's own tables (copyTables) from src to
// dst and moves dst's id sequences past src's.
func copyStoreTables(ctx context.Context, src view, dst *Store, afterTable func(string)) ([]CopyCount, error) {
	var copied []CopyCount
	for _, t := range copyTables {
		n, err := copyTable(ctx, src, dst, t)
		if err != nil {
			return copied, fmt.Errorf("copy store: table %s: %w", t, err)
		}
		copied = append(copied, CopyCount{Table: t, Rows: n})
		if afterTable != nil {
			afterTable(t)
		}
	}
	for _, t := range idTables {
		if err := moveSequence(ctx, src, dst, t); err != nil {
			return copied, fmt.Errorf("copy store: move the id sequence of %s: %w", t, err)
		}
	}
	if err := copyAuditChain(ctx, src, dst); err != nil {
		return copied, fmt.Errorf("copy store: %w", err)
	}
	return copied, nil
}

// copySideTables copies the side tables src has and dst has too (adding
// their counts to copied), and returns those dst lacks, with src's rows.
func copySideTables(ctx context.Context, src view, dst *Store, copied *[]CopyCount) ([]CopyCount, error) {
	side, err := sideTables(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("copy store: %w", err)
	}
	have, err := sideTables(ctx, dst.view())
	if err != nil {
		return nil, fmt.Errorf("copy store: %w", err)
	}
	var skipped []CopyCount
	for _, t := range side {
		if !slices.Contains(have, t) {
			n, err := tableRows(ctx, src, t)
			if err != nil {
				return skipped, fmt.Errorf("copy store: %w", err)
			}
			skipped = append(skipped, CopyCount{Table: t, Rows: n})
			continue
		}
		n, err := copySideTable(ctx, src, dst, t)
		if err != nil {
			return skipped, fmt.Errorf("copy store: table %s: %w", t, err)
		}
		if n >= 0 {
			*copied = append(*copied, CopyCount{Table: t, Rows: n})
		}
	}
	return skipped, nil
}

func tableRows(ctx context.Context, v view, table string) (int64, error) {
	var n int64
	if err := v.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s in %s: %w", table, v.name, err)
	}
	return n, nil
}

// copyTable copies every row of table from src to dst, in batches of
// copyBatch rows per write transaction, in the order of the table's key,
// by every column src has, named (a column a migration added, such as
// jobs.args and jobs.dry_run, comes along as it is: the store's columns
// are text and integers, flags 0 or 1, in both databases).
func copyTable(ctx context.Context, src view, dst *Store, table string) (int64, error) {
	rows, err := src.r.QueryContext(ctx, `SELECT * FROM `+table+` ORDER BY 1`)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", src.name, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	insert := `INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) VALUES (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + `)`
	if table == "audit_log" && dst.dialect == postgresSQL {
		// The entries as they were, ids and hashes: not chained again by
		// the target's trigger (migration 0012).
		insert = verbatimAudit + insert
	}
	return copyRows(ctx, rows, len(cols), src, dst, insert, func(vals []any) {
		for i, v := range vals {
			// The store's tables hold no blobs: text a driver hands back
			// as bytes is text.
			if b, ok := v.([]byte); ok {
				vals[i] = string(b)
			}
		}
	})
}

// verbatimAudit marks copyRows's insert for audit entries kept as they
// were on PostgreSQL: copyRows sets opsbot.audit_verbatim for each of its
// transactions first.
const verbatimAudit = "-- verbatim audit\n"

// copyRows inserts every row of rows (ncols columns each, after convert
// changed them in place for dst) into dst with insert, in batches of
// copyBatch rows per write transaction, and returns how many it wrote.
func copyRows(ctx context.Context, rows *sql.Rows, ncols int, src view, dst *Store, insert string, convert func(vals []any)) (int64, error) {
	var n int64
	var batch [][]any
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := dst.writeLong(ctx, func(tx *wtx) error {
			q, verbatim := strings.CutPrefix(insert, verbatimAudit)
			if verbatim {
				if _, err := tx.ExecContext(context.Background(), `SELECT set_config('opsbot.audit_verbatim', 'on', true)`); err != nil {
					return err
				}
			}
			for _, vals := range batch {
				if _, err := tx.ExecContext(context.Background(), q, vals...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("write %s: %w", dst.name, err)
		}
		n += int64(len(batch))
		batch = batch[:0]
		return nil
	}
	for rows.Next() {
		vals := make([]any, ncols)
		ptrs := make([]any, ncols)
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return n, fmt.Errorf("read %s: %w", src.name, err)
		}
		convert(vals)
		batch = append(batch, vals)
		if len(batch) == copyBatch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read %s: %w", src.name, err)
	}
	return n, flush()
}

// sequence returns the last id table's sequence handed out in s (0 when
// none): SQLite's sqlite_sequence for AUTOINCREMENT tables, else the
// largest id; PostgreSQL's identity sequence.
func sequence(ctx context.Context, s view, table string) (int64, error) {
	var v sql.NullInt64
	var err error
	if s.d == postgresSQL {
		err = s.r.QueryRowContext(ctx, `SELECT GREATEST(
			(SELECT COALESCE(MAX(id), 0) FROM `+table+`),
			(SELECT COALESCE(MAX(last_value), 0) FROM pg_sequences
			  WHERE format('%I.%I', schemaname, sequencename) = pg_get_serial_sequence(?, 'id')))`, table).Scan(&v)
	} else {
		err = s.r.QueryRowContext(ctx, `SELECT MAX(v) FROM (
			SELECT COALESCE(MAX(id), 0) AS v FROM `+table+`
			UNION ALL SELECT seq FROM sqlite_sequence WHERE name = ?)`, table).Scan(&v)
	}
	return v.Int64, err
}

// moveSequence makes dst's next id for table larger than every id src
// has handed out.
func moveSequence(ctx context.Context, src view, dst *Store, table string) error {
	last, err := sequence(ctx, src, table)
	if err != nil {
		return err
	}
	if last <= 0 {
		return nil
	}
	return dst.write(ctx, func(tx *wtx) error {
		if dst.dialect == postgresSQL {
			_, err := tx.ExecContext(context.Background(), `SELECT setval(pg_get_serial_sequence(?, 'id'), GREATEST(?, (SELECT COALESCE(MAX(id), 0) FROM `+table+`)))`, table, last)
			return err
		}
		// jobs, bench_results and audit_log take max(id)+1, which is past
		// every copied id; the AUTOINCREMENT tables keep their counter.
		res, err := tx.ExecContext(context.Background(), `UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = ?`, last, table)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 && (table == "schedules" || table == "incidents") {
			_, err = tx.ExecContext(context.Background(), `INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)`, table, last)
		}
		return err
	})
}

// copyAuditChain gives dst src's audit chain ends (its anchor and head, see
// auditchain.go), so that the copied entries verify and the next one
// chains after them.
func copyAuditChain(ctx context.Context, src view, dst *Store) error {
	anchor, head, err := chainEnds(ctx, src.r)
	if err != nil {
		return err
	}
	return dst.write(ctx, func(tx *wtx) error {
		for name, l := range map[string]chainLink{"anchor": anchor, "head": head} {
			if _, err := tx.ExecContext(context.Background(), `UPDATE audit_chain SET seq = ?, hash = ? WHERE name = ?`, l.Seq, l.Hash, name); err != nil {
				return fmt.Errorf("copy the audit chain's %s: %w", name, err)
			}
		}
		return nil
	})
}

// storeTables are the tables the store's own migrations make, and the
// databases' own; SideTables are the others.
var storeTables = map[string]bool{"schema_migrations": true, "sqlite_sequence": true, "audit_chain": true}

func init() {
	for _, t := range append(append([]string{}, copyTables...), SkippedTables...) {
		storeTables[t] = true
	}
}

// SideTables lists, sorted, the tables in s that the store's migrations do
// not make: a library's tables kept through SideDB (the Matrix adapter's
// room state and encryption keys).
func SideTables(ctx context.Context, s *Store) ([]string, error) { return sideTables(ctx, s.view()) }

func sideTables(ctx context.Context, s view) ([]string, error) {
	q := s.d.pick(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`,
		`SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename`)
	rows, err := s.r.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", s.name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list the tables of %s: %w", s.name, err)
		}
		if !storeTables[name] {
			out = append(out, name)
		}
	}
	return out, rows.Err()
}

// columnTypes returns table's columns in s with their declared types,
// lower case.
func columnTypes(ctx context.Context, s view, table string) (map[string]string, error) {
	q := s.d.pick(`SELECT name, type FROM pragma_table_info(?)`,
		`SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?`)
	rows, err := s.r.QueryContext(ctx, q, table)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s in %s: %w", table, s.name, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		out[name] = strings.ToLower(typ)
	}
	return out, rows.Err()
}

func binaryType(t string) bool { return t == "bytea" || t == "blob" }

// copySideTable copies the rows of a side table that dst has too, by the
// columns both have, converting what the dialects keep differently: flags
// (PostgreSQL's boolean, SQLite's integers), bytes and text. A side table
// that already has rows in dst (a library's version table, written when
// the library prepared dst) is left as it is: it returns -1.
func copySideTable(ctx context.Context, src view, dst *Store, table string) (int64, error) {
	if n, err := tableRows(ctx, dst.view(), table); err != nil || n > 0 {
		return -1, err
	}
	st, err := columnTypes(ctx, src, table)
	if err != nil {
		return 0, err
	}
	dt, err := columnTypes(ctx, dst.view(), table)
	if err != nil {
		return 0, err
	}
	var cols []string
	for c := range st {
		if _, ok := dt[c]; ok {
			cols = append(cols, c)
		}
	}
	if len(cols) == 0 {
		return 0, nil
	}
	slices.Sort(cols)
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = `"` + strings.ReplaceAll(c, `"`, `""`) + `"`
	}
	rows, err := src.r.QueryContext(ctx, `SELECT `+strings.Join(quoted, ", ")+` FROM "`+table+`"`)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", src.name, err)
	}
	defer rows.Close()
	insert := `INSERT INTO "` + table + `" (` + strings.Join(quoted, ", ") + `) VALUES (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + `)`
	return copyRows(ctx, rows, len(cols), src, dst, insert, func(vals []any) {
		for i, v := range vals {
			c := cols[i]
			switch x := v.(type) {
			case []byte:
				if !binaryType(st[c]) && !binaryType(dt[c]) {
					vals[i] = string(x)
				}
			case string:
				if binaryType(dt[c]) {
					vals[i] = []byte(x)
				}
			case int64:
				if dt[c] == "boolean" && dst.dialect == postgresSQL {
					vals[i] = x != 0
				}
			}
		}
	})
}
