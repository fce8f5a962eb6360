package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// copyTables are the store's tables that Copy moves, in an order that
// satisfies their foreign keys (jobs first). What describes running
// processes (owners, leases, cancel_requests) is not copied: those
// processes are not the target's.
var copyTables = []string{
	"jobs", "job_events", "bench_results", "schedules", "audit_log", "kv",
	"chat_events", "confirmations", "incidents", "silences", "lease_epochs",
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

// Copy copies every job, event, bench result, schedule, incident, silence,
// confirmation, chat claim, audit entry, kv row and lease epoch, and the
// Matrix adapter's tables (SideDB) where the target has them, from src into
// dst, which must be empty (ErrNotEmpty, nothing written, otherwise),
// whatever the two stores' drivers. Ids and times are kept exactly (times
// are integers in both); dst's id sequences are moved past the copied ids.
// It skips SkippedTables, and returns the rows copied per table, then the
// rows skipped. src should not be in use: what is written to it meanwhile
// may or may not be copied. A failure part way leaves dst partly filled:
// empty it (or drop the database) before trying again.
func Copy(ctx context.Context, src, dst *Store) (copied, skipped []CopyCount, err error) {
	if src.name == dst.name {
		return nil, nil, fmt.Errorf("copy store: %w: the source and the target are the same store (%s)", ErrInvalid, src.name)
	}
	var full []string
	for _, t := range append(append([]string{}, copyTables...), SkippedTables...) {
		n, err := tableRows(ctx, dst, t)
		if err != nil {
			return nil, nil, fmt.Errorf("copy store: %w", err)
		}
		if n > 0 {
			full = append(full, fmt.Sprintf("%s: %d", t, n))
		}
	}
	if len(full) > 0 {
		return nil, nil, fmt.Errorf("copy store to %s: %w (%s): copy only into a new database or file", dst.name, ErrNotEmpty, strings.Join(full, ", "))
	}
	for _, t := range copyTables {
		n, err := copyTable(ctx, src, dst, t)
		if err != nil {
			return copied, nil, fmt.Errorf("copy store: table %s: %w", t, err)
		}
		copied = append(copied, CopyCount{Table: t, Rows: n})
	}
	for _, t := range idTables {
		if err := moveSequence(ctx, src, dst, t); err != nil {
			return copied, nil, fmt.Errorf("copy store: move the id sequence of %s: %w", t, err)
		}
	}
	for _, t := range SkippedTables {
		n, err := tableRows(ctx, src, t)
		if err != nil {
			return copied, nil, fmt.Errorf("copy store: %w", err)
		}
		skipped = append(skipped, CopyCount{Table: t, Rows: n})
	}
	return copied, skipped, nil
}

func tableRows(ctx context.Context, s *Store, table string) (int64, error) {
	var n int64
	if err := s.rdb.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s in %s: %w", table, s.name, err)
	}
	return n, nil
}

// copyTable copies every row of table from src to dst, in batches of
// copyBatch rows per write transaction, in the order of the table's key.
func copyTable(ctx context.Context, src, dst *Store, table string) (int64, error) {
	rows, err := src.rdb.DB.QueryContext(ctx, `SELECT * FROM `+table+` ORDER BY 1`)
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
	var n int64
	var batch [][]any
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := dst.write(ctx, func(tx *wtx) error {
			for _, vals := range batch {
				if _, err := tx.ExecContext(context.Background(), insert, vals...); err != nil {
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
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return n, fmt.Errorf("read %s: %w", src.name, err)
		}
		for i, v := range vals {
			// The store's tables hold no blobs: text a driver hands back
			// as bytes is text.
			if b, ok := v.([]byte); ok {
				vals[i] = string(b)
			}
		}
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
func sequence(ctx context.Context, s *Store, table string) (int64, error) {
	var v sql.NullInt64
	var err error
	if s.dialect == postgresSQL {
		err = s.rdb.QueryRowContext(ctx, `SELECT GREATEST(
			(SELECT COALESCE(MAX(id), 0) FROM `+table+`),
			(SELECT COALESCE(MAX(last_value), 0) FROM pg_sequences
			  WHERE format('%I.%I', schemaname, sequencename) = pg_get_serial_sequence(?, 'id')))`, table).Scan(&v)
	} else {
		err = s.rdb.QueryRowContext(ctx, `SELECT MAX(v) FROM (
			SELECT COALESCE(MAX(id), 0) AS v FROM `+table+`
			UNION ALL SELECT seq FROM sqlite_sequence WHERE name = ?)`, table).Scan(&v)
	}
	return v.Int64, err
}

// moveSequence makes dst's next id for table larger than every id src
// has handed out.
func moveSequence(ctx context.Context, src, dst *Store, table string) error {
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
