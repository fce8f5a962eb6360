-- 0006: what the scheduler and the watchdog keep across restarts and share
-- between the opsbot processes on one store.
--
-- schedules: who a run is authorised as (creator, an auth key; '' means
-- platform:created_by), where it reports (targets, "slack:C1,matrix:!r:hs";
-- '' means platform/room), what a missed run becomes, the config entry a
-- schedule came from (config_key, NULL for chat schedules), the last firing
-- claimed (fired_at: one process claims each firing) and the next one.
ALTER TABLE schedules ADD COLUMN creator     TEXT    NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN targets     TEXT    NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN missed      TEXT    NOT NULL DEFAULT 'skip' CHECK (missed IN ('run', 'skip'));
ALTER TABLE schedules ADD COLUMN config_key  TEXT;
ALTER TABLE schedules ADD COLUMN fired_at    INTEGER;
ALTER TABLE schedules ADD COLUMN next_run_at INTEGER;
CREATE UNIQUE INDEX schedules_by_config_key ON schedules (config_key) WHERE config_key IS NOT NULL;

-- incidents: what the watchdog saw go wrong with a service, one open incident
-- per service at a time (the unique index makes the second process's open a
-- no-op), with the alert messages it posted (alerts: JSON list of
-- {platform, room, id}) and who acknowledged it.
CREATE TABLE incidents (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	service     TEXT    NOT NULL CHECK (service <> ''),
	kind        TEXT    NOT NULL CHECK (kind <> ''),
	summary     TEXT    NOT NULL DEFAULT '',
	opened_at   INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	closed_at   INTEGER,
	alerts      TEXT    NOT NULL DEFAULT '[]',
	acked_by    TEXT    NOT NULL DEFAULT '',
	acked_at    INTEGER,
	reminded_at INTEGER,
	recover_job INTEGER REFERENCES jobs (id)
);
CREATE UNIQUE INDEX incidents_open_by_service ON incidents (service) WHERE closed_at IS NULL;

-- silences: `watchdog silence SERVICE DURATION`; the watchdog does not alert
-- on the service until `until`.
CREATE TABLE silences (
	service  TEXT    PRIMARY KEY CHECK (service <> ''),
	until    INTEGER NOT NULL,
	by_user  TEXT    NOT NULL DEFAULT '',
	at       INTEGER NOT NULL
);
