package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The audit log is a hash chain. Every entry carries Prev, the hash of the
// entry chained before it, and Hash, the SHA-256 of its own content with
// Prev (chainHash), in lowercase hex; its id is the one after the entry
// before it, so a chain's ids run without gaps. Changing an entry breaks
// its hash, and recomputing that hash breaks the next entry's Prev;
// removing or reordering entries breaks the ids and the links. One chain
// per store, whatever the driver and however many processes write:
//
//   - the chain's head (the last entry: its id and hash) is a row of
//     audit_chain that every append reads and moves in its own write
//     transaction: on SQLite the database's write lock (BEGIN IMMEDIATE)
//     serialises appenders of every process; on PostgreSQL a BEFORE INSERT
//     trigger takes the head row's lock, held until the appending
//     transaction ends, and computes the hash itself (migration 0012 has
//     its SQL; chainHash here builds the same bytes);
//   - the anchor (audit_chain's other row) is the entry the first one
//     still in the store links to: the genesis (GenesisHash, after the
//     entries recorded before the chain) or, once Prune removed entries,
//     the last one it removed. So pruning keeps the rest verifiable.
//
// Entries recorded before the chain (before migration 0012) keep no hash;
// they all come before the anchor, and nothing vouches for them.
//
// What it proves: an export (ExportAudit) or the store itself (VerifyAudit)
// shows an entry changed, removed or reordered inside the range checked.
// What it does not: anyone who may write to the database can rewrite the
// entries after a point and their hashes, and the head, consistently; only
// a hash kept outside the database (an export's last hash handed to an
// auditor) shows that. It is not a signature by a third party.

// GenesisHash is the anchor's hash where the chain starts: the Prev of the
// first entry a store ever chained.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// chainVersion begins every hashed form; a new form gets a new version.
const chainVersion = "opsbot-audit-v1"

// chainHash returns the hash of e (its ID, At and fields) chained after the
// entry whose hash is prev: hex SHA-256 of the lines
//
//	opsbot-audit-v1
//	PREV
//	ID
//	AT (Unix nanoseconds)
//	LEN:PLATFORM   (LEN: the field's length in bytes; likewise below)
//	LEN:USER
//	LEN:ROOM
//	LEN:COMMAND
//	LEN:DECISION
//	LEN:DETAIL
//	JOB (the job's id, empty when none)
//
// each ended by a newline. buf is scratch space, returned for reuse.
func chainHash(buf []byte, prev string, e *AuditEntry) (string, []byte) {
	b := append(buf[:0], chainVersion...)
	b = append(b, '\n')
	b = append(b, prev...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, e.ID, 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, e.At.UnixNano(), 10)
	b = append(b, '\n')
	for _, f := range [...]string{e.Platform, e.User, e.Room, e.Command, e.Decision, e.Detail} {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, '\n')
	}
	if e.JobID != 0 {
		b = strconv.AppendInt(b, e.JobID, 10)
	}
	b = append(b, '\n')
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), b
}

// chainLink is a row of audit_chain: an entry's id and hash.
type chainLink struct {
	Seq  int64
	Hash string
}

// insertAuditChained is insertAudit on SQLite: it reads the head, inserts e
// as the entry after it, and moves the head, in the caller's write
// transaction. Only the insert can fail on its own (a constraint); it runs
// before the head moves, so a failed call changes nothing (write1's rule).
func insertAuditChained(tx *wtx, e AuditEntry) error {
	bg := context.Background()
	var head chainLink
	if err := tx.QueryRowContext(bg, `SELECT seq, hash FROM audit_chain WHERE name = 'head'`).Scan(&head.Seq, &head.Hash); err != nil {
		return fmt.Errorf("read the audit chain's head: %w", err)
	}
	e.ID = head.Seq + 1
	e.Prev = head.Hash
	e.Hash, _ = chainHash(nil, e.Prev, &e)
	if _, err := tx.ExecContext(bg, `INSERT INTO audit_log
		(id, at, platform, user_id, room, command, decision, detail, job_id, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.At.UnixNano(), e.Platform, e.User, e.Room, e.Command, e.Decision, e.Detail, nullID(e.JobID), e.Prev, e.Hash); err != nil {
		return err
	}
	if _, err := tx.ExecContext(bg, `UPDATE audit_chain SET seq = ?, hash = ? WHERE name = 'head'`, e.ID, e.Hash); err != nil {
		return fmt.Errorf("move the audit chain's head: %w", err)
	}
	return nil
}

// ChainError names the first entry that does not match the chain: the
// entry (its id; for a file, its line too) and why.
type ChainError struct {
	ID     int64 // the entry's id; 0 when the problem is past the last entry (the head)
	Line   int   // the line of the file (VerifyAuditFile); 0 for a store
	Reason string
}

func (e *ChainError) Error() string {
	var b strings.Builder
	switch {
	case e.ID != 0 && e.Line != 0:
		fmt.Fprintf(&b, "audit entry %d (line %d) does not match the chain: ", e.ID, e.Line)
	case e.ID != 0:
		fmt.Fprintf(&b, "audit entry %d does not match the chain: ", e.ID)
	case e.Line != 0:
		fmt.Fprintf(&b, "line %d does not match the chain: ", e.Line)
	default:
		b.WriteString("the audit chain does not match: ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// ErrChainBroken is wrapped by every *ChainError; test with errors.Is.
var ErrChainBroken = errors.New("audit chain broken")

func (e *ChainError) Unwrap() error { return ErrChainBroken }

// ChainReport is what a verification found when every entry matched.
type ChainReport struct {
	Entries  int64  // chained entries checked
	Before   int64  // entries from before the chain (no hash): not covered
	First    int64  // the first chained entry's id (0 when none)
	Last     int64  // the last chained entry's id (0 when none)
	LastHash string // the last chained entry's hash: keep it to check a later export against
	// Anchor is what the first entry links to, when known (a store: the
	// genesis or the last pruned entry); for a file, the first entry's
	// own Prev, taken as given.
	Anchor string
}

// chainCheck walks entries in order and stops at the first that does not
// match. want is the link the next entry must follow; unknown until the
// first chained entry of a file.
type chainCheck struct {
	rep   ChainReport
	want  chainLink
	known bool // want is set
	buf   []byte
}

// add checks the next entry, read at line (0 for a store).
func (c *chainCheck) add(e *AuditEntry, line int) error {
	bad := func(format string, a ...any) error {
		return &ChainError{ID: e.ID, Line: line, Reason: fmt.Sprintf(format, a...)}
	}
	if e.Hash == "" {
		if c.rep.Entries > 0 || (c.known && e.ID > c.want.Seq) {
			return bad("it has no hash, but comes after the chain began (at entry %d): the entry was changed, or added outside opsbot", c.rep.First)
		}
		c.rep.Before++
		return nil
	}
	if !c.known {
		c.want, c.known = chainLink{Seq: e.ID - 1, Hash: e.Prev}, true
		c.rep.Anchor = e.Prev
	}
	switch {
	case e.ID <= c.want.Seq:
		return bad("it comes after entry %d: the entries are out of order, or this one is a copy", c.want.Seq)
	case e.ID > c.want.Seq+1:
		return bad("entry %d should come next: entries %s are missing (removed), or out of order", c.want.Seq+1, span(c.want.Seq+1, e.ID-1))
	case e.Prev != c.want.Hash:
		return bad("its prev %s is not the hash %s of entry %d before it: entry %d was changed, or entries were removed and renumbered",
			short(e.Prev), short(c.want.Hash), c.want.Seq, c.want.Seq)
	}
	var h string
	h, c.buf = chainHash(c.buf, e.Prev, e)
	if h != e.Hash {
		return bad("its content does not match its hash %s (the content hashes to %s): the entry was changed", short(e.Hash), short(h))
	}
	if c.rep.Entries == 0 {
		c.rep.First = e.ID
	}
	c.rep.Entries++
	c.rep.Last, c.rep.LastHash = e.ID, e.Hash
	c.want = chainLink{Seq: e.ID, Hash: e.Hash}
	return nil
}

// span says "N" or "N..M".
func span(from, to int64) string {
	if from == to {
		return strconv.FormatInt(from, 10)
	}
	return fmt.Sprintf("%d..%d", from, to)
}

// short is a hash's first 12 characters, enough to tell two apart in a
// message.
func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	if h == "" {
		return "(none)"
	}
	return h
}

// VerifyAudit checks the whole audit log of s, in one snapshot: the
// entries from before the chain come first, then the chained entries from
// the one after the anchor (the genesis, or the last pruned entry) to the
// head, each linked to the one before it and matching its hash. It returns
// what it checked, or a *ChainError naming the first entry that does not
// match (an error of another kind when the store cannot be read).
func (s *Store) VerifyAudit(ctx context.Context) (ChainReport, error) {
	snap, _, end, err := s.snapshot(ctx)
	if err != nil {
		return ChainReport{}, fmt.Errorf("verify audit log: %w", err)
	}
	defer end()
	anchor, head, err := chainEnds(ctx, snap)
	if err != nil {
		return ChainReport{}, fmt.Errorf("verify audit log: %w", err)
	}
	c := &chainCheck{want: anchor, known: true}
	c.rep.Anchor = anchor.Hash
	err = scanAudit(ctx, snap, 0, 0, func(e *AuditEntry) error {
		if e.Hash == "" && e.ID > anchor.Seq {
			return &ChainError{ID: e.ID, Reason: fmt.Sprintf("it has no hash, but comes after the chain's anchor (entry %d): the entry was changed, or added outside opsbot", anchor.Seq)}
		}
		return c.add(e, 0)
	})
	if err != nil {
		return ChainReport{}, err
	}
	if c.want != head {
		if c.want.Seq < head.Seq {
			return ChainReport{}, &ChainError{Reason: fmt.Sprintf("the chain ends at entry %d, but its head is entry %d: entries %s were removed",
				c.want.Seq, head.Seq, span(c.want.Seq+1, head.Seq))}
		}
		return ChainReport{}, &ChainError{ID: c.want.Seq, Reason: fmt.Sprintf("the chain's head is entry %d with hash %s, but its last entry is %d with hash %s: the head or the last entry was changed",
			head.Seq, short(head.Hash), c.want.Seq, short(c.want.Hash))}
	}
	return c.rep, nil
}

// chainEnds reads the chain's anchor and head.
func chainEnds(ctx context.Context, r reader) (anchor, head chainLink, err error) {
	rows, err := r.QueryContext(ctx, `SELECT name, seq, hash FROM audit_chain`)
	if err != nil {
		return anchor, head, fmt.Errorf("read the audit chain: %w", err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var name string
		var l chainLink
		if err := rows.Scan(&name, &l.Seq, &l.Hash); err != nil {
			return anchor, head, fmt.Errorf("read the audit chain: %w", err)
		}
		switch name {
		case "anchor":
			anchor = l
		case "head":
			head = l
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		return anchor, head, fmt.Errorf("read the audit chain: %w", err)
	}
	if seen != 2 {
		return anchor, head, &ChainError{Reason: "the audit_chain table lacks its head or its anchor row: it was changed outside opsbot"}
	}
	return anchor, head, nil
}

// scanAudit calls fn for every entry with from <= id <= to (to 0: no
// bound), in id order, the entry reused between calls.
func scanAudit(ctx context.Context, r reader, from, to int64, fn func(e *AuditEntry) error) error {
	q := `SELECT id, at, platform, user_id, room, command, decision, detail, job_id, prev, hash FROM audit_log WHERE id >= ?`
	args := []any{from}
	if to > 0 {
		q += ` AND id <= ?`
		args = append(args, to)
	}
	rows, err := r.QueryContext(ctx, q+` ORDER BY id`, args...)
	if err != nil {
		return fmt.Errorf("read audit log: %w", err)
	}
	defer rows.Close()
	var e AuditEntry
	var at int64
	var job sql.NullInt64
	var prev, hash sql.NullString
	for rows.Next() {
		if err := rows.Scan(&e.ID, &at, &e.Platform, &e.User, &e.Room, &e.Command, &e.Decision, &e.Detail, &job, &prev, &hash); err != nil {
			return fmt.Errorf("read audit log: %w", err)
		}
		e.At = fromNanos(sql.NullInt64{Int64: at, Valid: true})
		e.JobID, e.Prev, e.Hash = job.Int64, prev.String, hash.String
		if err := fn(&e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read audit log: %w", err)
	}
	return nil
}
