-- 0012: the audit log becomes a hash chain (see store/auditchain.go).
--
-- Each entry written from now on carries prev, the hash of the entry
-- before it, and hash, the SHA-256 of its own content and prev; its id is
-- the one after the chain's head, so ids run without gaps in the order the
-- entries were chained. audit_chain keeps two rows: 'head', the last
-- chained entry (its id and hash), which every append reads and moves in
-- its write transaction (SQLite's write lock serialises appenders, of this
-- process and others); and 'anchor', the entry the first one in the store
-- links to: at this migration the genesis, after the entries recorded
-- before the chain (id up to the largest id now, hash 64 zeros); after a
-- prune, the last pruned entry.
--
-- Entries recorded before this migration keep prev and hash NULL: they
-- are before the chain, and nothing vouches for them (audit verify counts
-- them apart).
ALTER TABLE audit_log ADD COLUMN prev TEXT;
ALTER TABLE audit_log ADD COLUMN hash TEXT;

CREATE TABLE audit_chain (
	name TEXT    PRIMARY KEY CHECK (name IN ('head', 'anchor')),
	seq  INTEGER NOT NULL,
	hash TEXT    NOT NULL
) WITHOUT ROWID;
INSERT INTO audit_chain (name, seq, hash) SELECT 'head', COALESCE(MAX(id), 0), '0000000000000000000000000000000000000000000000000000000000000000' FROM audit_log;
INSERT INTO audit_chain (name, seq, hash) SELECT 'anchor', COALESCE(MAX(id), 0), '0000000000000000000000000000000000000000000000000000000000000000' FROM audit_log;
