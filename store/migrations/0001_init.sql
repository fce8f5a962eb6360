-- 0001: the initial schema. Times are INTEGER nanoseconds since the Unix
-- epoch, UTC; NULL means unset. Jobs, bench results and audit entries are
-- never deleted, so their plain rowid keys are never reused; schedules are,
-- so theirs are AUTOINCREMENT.

CREATE TABLE jobs (
	id          INTEGER PRIMARY KEY,
	command     TEXT    NOT NULL CHECK (command <> ''),
	platform    TEXT    NOT NULL DEFAULT '',
	user_id     TEXT    NOT NULL DEFAULT '',
	room        TEXT    NOT NULL DEFAULT '',
	thread      TEXT    NOT NULL DEFAULT '',
	service     TEXT    NOT NULL DEFAULT '',
	host        TEXT    NOT NULL DEFAULT '',
	status      TEXT    NOT NULL CHECK (status IN
	            ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'refused', 'interrupted')),
	error       TEXT    NOT NULL DEFAULT '',
	result      TEXT    CHECK (result IS NULL OR json_valid(result)),
	schedule_id INTEGER,  -- no foreign key: a removed schedule stays named in its jobs' history
	created_at  INTEGER NOT NULL,
	started_at  INTEGER,
	ended_at    INTEGER
);
CREATE INDEX jobs_active ON jobs (id) WHERE status IN ('queued', 'running');
CREATE INDEX jobs_service ON jobs (service, id);

CREATE TABLE job_events (
	job_id  INTEGER NOT NULL REFERENCES jobs (id),
	seq     INTEGER NOT NULL CHECK (seq > 0),
	at      INTEGER NOT NULL,
	step    TEXT    NOT NULL DEFAULT '',
	status  TEXT    NOT NULL DEFAULT '',
	message TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

CREATE TABLE bench_results (
	id               INTEGER PRIMARY KEY,
	job_id           INTEGER REFERENCES jobs (id),
	service          TEXT    NOT NULL CHECK (service <> ''),
	settings         TEXT    NOT NULL CHECK (settings <> ''),
	at               INTEGER NOT NULL,
	output_tok_s     REAL,    -- NULL: not measured (NaN in Go)
	per_stream_tok_s REAL,
	accept_len       REAL,
	accept_rate      REAL,
	requests_ok      INTEGER NOT NULL DEFAULT 0 CHECK (requests_ok >= 0),
	requests_failed  INTEGER NOT NULL DEFAULT 0 CHECK (requests_failed >= 0),
	concurrency      INTEGER NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
	raw              TEXT    CHECK (raw IS NULL OR json_valid(raw))
);
CREATE INDEX bench_by_settings ON bench_results (service, settings, id);

CREATE TABLE schedules (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	spec        TEXT    NOT NULL CHECK (spec <> ''),
	command     TEXT    NOT NULL CHECK (command <> ''),
	platform    TEXT    NOT NULL DEFAULT '',
	room        TEXT    NOT NULL DEFAULT '',
	created_by  TEXT    NOT NULL DEFAULT '',
	paused      INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
	created_at  INTEGER NOT NULL,
	last_run_at INTEGER,
	last_job_id INTEGER REFERENCES jobs (id)
);

CREATE TABLE audit_log (
	id       INTEGER PRIMARY KEY,
	at       INTEGER NOT NULL,
	platform TEXT    NOT NULL DEFAULT '',
	user_id  TEXT    NOT NULL DEFAULT '',
	room     TEXT    NOT NULL DEFAULT '',
	command  TEXT    NOT NULL DEFAULT '',
	decision TEXT    NOT NULL CHECK (decision <> ''),
	detail   TEXT    NOT NULL DEFAULT '',
	job_id   INTEGER REFERENCES jobs (id)
);
CREATE INDEX audit_by_user ON audit_log (user_id, id);

-- The audit log is append-only, whoever writes to the file.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
	SELECT RAISE(ABORT, 'audit_log is append-only: UPDATE is not allowed');
END;
-- INSERT OR REPLACE deletes the old row without firing DELETE triggers.
CREATE TRIGGER audit_log_no_replace BEFORE INSERT ON audit_log
WHEN NEW.id IS NOT NULL AND EXISTS (SELECT 1 FROM audit_log WHERE id = NEW.id)
BEGIN
	SELECT RAISE(ABORT, 'audit_log is append-only: replacing an entry is not allowed');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
	SELECT RAISE(ABORT, 'audit_log is append-only: DELETE is not allowed');
END;

CREATE TABLE kv (
	key        TEXT    PRIMARY KEY CHECK (key <> ''),
	value      TEXT    NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;
