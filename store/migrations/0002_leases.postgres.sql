-- 0002 (PostgreSQL): leases, so that several opsbot processes on one file never change
-- the same service or node at once. An owner is one running opsbot process;
-- it is live while its heartbeat keeps expires_at in the future. A lease is
-- held while its own expires_at is in the future and its owner is live. Jobs
-- carry their owner: only a dead owner's unfinished jobs are interrupted.

CREATE TABLE owners (
	id           TEXT    PRIMARY KEY CHECK (id <> ''),
	host         TEXT    NOT NULL DEFAULT '',  -- hostname, for people
	pid          BIGINT NOT NULL DEFAULT 0,
	machine      TEXT    NOT NULL DEFAULT '',  -- where pid means something; '' = unknown
	started_at   BIGINT NOT NULL,
	heartbeat_at BIGINT NOT NULL,
	expires_at   BIGINT NOT NULL
);

CREATE TABLE leases (
	key         TEXT    PRIMARY KEY CHECK (key <> ''),
	owner       TEXT    NOT NULL CHECK (owner <> ''),
	job_id      BIGINT NOT NULL DEFAULT 0,  -- the job holding it; 0 when none
	acquired_at BIGINT NOT NULL,
	expires_at  BIGINT NOT NULL
);
CREATE INDEX leases_by_owner ON leases (owner);

CREATE TABLE cancel_requests (
	job_id       BIGINT PRIMARY KEY REFERENCES jobs (id),
	requested_by TEXT    NOT NULL DEFAULT '',
	at           BIGINT NOT NULL
);

ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
