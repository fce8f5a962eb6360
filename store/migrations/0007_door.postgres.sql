-- 0007 (PostgreSQL): what the door (bot.Dispatcher) decides once for every platform and
-- every opsbot process on the store.
--
-- chat_events.replays: how many times a claimed delivery came again (a
-- replayed Slack delivery, a Matrix event synced twice). The first replay is
-- audited; later ones are only counted, so a captured delivery replayed for
-- minutes cannot fill the store.
ALTER TABLE chat_events ADD COLUMN replays BIGINT NOT NULL DEFAULT 0;

-- confirmations: commands waiting for their requester's (or, when proposed
-- by the bot, the room's) confirmation. A click or a reaction reaches
-- whichever process gets it, and a restart keeps them. message_* name the
-- platform message that shows the preview (a Matrix reaction settles the
-- confirmation of the message it reacts to).
CREATE TABLE confirmations (
	token      TEXT    PRIMARY KEY CHECK (token <> ''),
	platform   TEXT    NOT NULL CHECK (platform <> ''),
	user_id    TEXT    NOT NULL,
	user_name  TEXT    NOT NULL DEFAULT '',
	room       TEXT    NOT NULL,
	via        TEXT    NOT NULL DEFAULT '',
	reply_to   TEXT    NOT NULL DEFAULT '',
	command    TEXT    NOT NULL CHECK (command <> ''),
	proposed   BIGINT NOT NULL DEFAULT 0,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	message_id TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX confirmations_by_message ON confirmations (platform, message_id) WHERE message_id <> '';
CREATE INDEX confirmations_by_expiry ON confirmations (expires_at);

-- jobs.final_shown: 1 once the job's status message shows the job's final
-- state as the store has it. A final job with a status message (thread <> '')
-- and final_shown = 0 is edited by any process with that platform's adapter
-- (at its start and within seconds while it runs); the edit is claimed by
-- setting the flag first, so two processes never both make it.
-- jobs.recorded_late: the outcome was recorded by a process that had lost
-- the job's lease, after the job had been marked interrupted.
ALTER TABLE jobs ADD COLUMN final_shown BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN recorded_late BIGINT NOT NULL DEFAULT 0;
UPDATE jobs SET final_shown = 1 WHERE status IN ('succeeded', 'failed', 'cancelled', 'refused', 'interrupted');
CREATE INDEX jobs_final_unshown ON jobs (id) WHERE final_shown = 0 AND thread <> '';

-- lease_epochs: how many times each lease key was acquired. The count at an
-- acquisition is the holder's epoch, a fencing token: a holder that lost
-- its lease carries an older epoch than the one that took it over.
CREATE TABLE lease_epochs (
	key   TEXT    PRIMARY KEY CHECK (key <> ''),
	epoch BIGINT NOT NULL
);
