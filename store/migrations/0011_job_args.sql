-- 0011: jobs keep their typed command as data, so that nothing reads a
-- job's command text to learn what it was.
--
-- jobs.args: the job's typed command as the command language encodes it,
-- versioned JSON such as {"v":1,"command":"mtp steps","args":{...}}. The
-- store keeps it as opaque JSON text; NULL for the jobs recorded before
-- this migration, whose typed command is unknown.
-- jobs.dry_run: 1 when the job is a --dry-run (it changed nothing), else 0.
-- A flag, kept as the store keeps its flags on both databases: an integer,
-- 0 or 1 (see dialect.args).
ALTER TABLE jobs ADD COLUMN args TEXT;
ALTER TABLE jobs ADD COLUMN dry_run BIGINT NOT NULL DEFAULT 0 CHECK (dry_run IN (0, 1));

-- Backfill, once, for the jobs recorded before this migration: their
-- canonical command text is the only record of a --dry-run. This is the
-- only place the command text is read for it, for the rows recorded before
-- the flag was kept; every job recorded since carries dry_run itself.
UPDATE jobs SET dry_run = 1 WHERE ' ' || command || ' ' LIKE '% --dry-run %';
