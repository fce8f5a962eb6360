package store

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// AuditLine is one line of an audit export (ExportAudit): one entry as
// JSON, with its place in the chain. Times are RFC 3339 in UTC with
// nanoseconds (the hash covers them to the nanosecond); job_id, prev and
// hash are null when the entry has none (prev and hash: an entry from
// before the chain).
type AuditLine struct {
	ID       int64     `json:"id"`
	At       time.Time `json:"at"`
	Platform string    `json:"platform"`
	User     string    `json:"user"`
	Room     string    `json:"room"`
	Command  string    `json:"command"`
	Decision string    `json:"decision"`
	Detail   string    `json:"detail"`
	JobID    *int64    `json:"job_id"`
	Prev     *string   `json:"prev"`
	Hash     *string   `json:"hash"`
}

func lineOf(e *AuditEntry) AuditLine {
	l := AuditLine{ID: e.ID, At: e.At.UTC(), Platform: e.Platform, User: e.User, Room: e.Room,
		Command: e.Command, Decision: e.Decision, Detail: e.Detail}
	if e.JobID != 0 {
		l.JobID = &e.JobID
	}
	if e.Hash != "" {
		l.Prev, l.Hash = &e.Prev, &e.Hash
	}
	return l
}

func (l *AuditLine) entry() AuditEntry {
	e := AuditEntry{ID: l.ID, At: l.At, Platform: l.Platform, User: l.User, Room: l.Room,
		Command: l.Command, Decision: l.Decision, Detail: l.Detail}
	if l.JobID != nil {
		e.JobID = *l.JobID
	}
	if l.Prev != nil {
		e.Prev = *l.Prev
	}
	if l.Hash != nil {
		e.Hash = *l.Hash
	}
	return e
}

// ExportReport is what ExportAudit wrote.
type ExportReport struct {
	Entries     int64 // lines written
	First, Last int64 // the first and last entry's ids (0 when none)
	LastHash    string
}

// ExportAudit writes to w, one JSON line each (AuditLine), the entries
// from the first written at or after since to the last written before
// until (no bound when until is zero), and every entry between them, in
// id order: an unbroken stretch of the chain, which VerifyAuditFile checks
// without the store. (An entry's time is its caller's, and may be out of
// the chain's order by a little near either end.) It reads one snapshot.
func (s *Store) ExportAudit(ctx context.Context, w io.Writer, since, until time.Time) (ExportReport, error) {
	if err := checkTime("since", since); err != nil {
		return ExportReport{}, fmt.Errorf("export audit log: %w", err)
	}
	if err := checkTime("until", until); err != nil {
		return ExportReport{}, fmt.Errorf("export audit log: %w", err)
	}
	snap, _, end, err := s.snapshot(ctx)
	if err != nil {
		return ExportReport{}, fmt.Errorf("export audit log: %w", err)
	}
	defer end()
	var from, to sql.NullInt64
	if err := snap.QueryRowContext(ctx, `SELECT MIN(id) FROM audit_log WHERE at >= ?`, since.UnixNano()).Scan(&from); err != nil {
		return ExportReport{}, fmt.Errorf("export audit log: %w", err)
	}
	q, args := `SELECT MAX(id) FROM audit_log`, []any{}
	if !until.IsZero() {
		q, args = q+` WHERE at < ?`, append(args, until.UnixNano())
	}
	if err := snap.QueryRowContext(ctx, q, args...).Scan(&to); err != nil {
		return ExportReport{}, fmt.Errorf("export audit log: %w", err)
	}
	var rep ExportReport
	if !from.Valid || !to.Valid || from.Int64 > to.Int64 {
		return rep, nil
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	err = scanAudit(ctx, snap, from.Int64, to.Int64, func(e *AuditEntry) error {
		if err := enc.Encode(lineOf(e)); err != nil {
			return fmt.Errorf("write audit export: %w", err)
		}
		if rep.Entries == 0 {
			rep.First = e.ID
		}
		rep.Entries++
		rep.Last, rep.LastHash = e.ID, e.Hash
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("export audit log: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return rep, fmt.Errorf("write audit export: %w", err)
	}
	return rep, nil
}

// maxAuditLine bounds one line of an export that VerifyAuditFile reads.
const maxAuditLine = 16 << 20

// VerifyAuditFile checks an audit export (ExportAudit's lines) read from
// r: each entry follows the one before it (its id the next, its prev that
// entry's hash) and matches its own hash. The first chained entry's prev
// is taken as given: a file cannot show what came before it, nor entries
// removed after its last line (compare its last hash with one kept from an
// earlier export). Entries from before the chain may come first; they are
// counted, not checked. It returns what it checked, a *ChainError naming
// the first entry (and line) that does not match, or an error for a line
// that is not an entry.
func VerifyAuditFile(r io.Reader) (ChainReport, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxAuditLine)
	c := &chainCheck{}
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var l AuditLine
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return c.rep, fmt.Errorf("line %d is not an audit entry: %w", line, err)
		}
		if dec.More() {
			return c.rep, fmt.Errorf("line %d is not an audit entry: more than one JSON value", line)
		}
		if (l.Prev == nil) != (l.Hash == nil) {
			return c.rep, &ChainError{ID: l.ID, Line: line, Reason: "it has a prev without a hash, or a hash without a prev"}
		}
		e := l.entry()
		if err := c.add(&e, line); err != nil {
			return c.rep, err
		}
	}
	if err := sc.Err(); err != nil {
		return c.rep, fmt.Errorf("read audit export after line %d: %w", line, err)
	}
	return c.rep, nil
}
