-- 0012: approvals, the commands that wait for a second person
-- (auth.two_person). A row is one command its requester asked for (and
-- confirmed, where it asks): it waits until someone else who may run it
-- approves or rejects it, or until expires_at. Whichever process gets the
-- approval takes the row (a DELETE that one of them wins) and starts the
-- job; a restart keeps the rows. message_id names the platform message that
-- shows the request (a Matrix reaction to it approves it).
CREATE TABLE approvals (
	token      TEXT   PRIMARY KEY CHECK (token <> ''),
	platform   TEXT   NOT NULL CHECK (platform <> ''),
	user_id    TEXT   NOT NULL,
	user_name  TEXT   NOT NULL DEFAULT '',
	room       TEXT   NOT NULL,
	via        TEXT   NOT NULL DEFAULT '',
	reply_to   TEXT   NOT NULL DEFAULT '',
	command    TEXT   NOT NULL CHECK (command <> ''),
	confirmed_by TEXT NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	message_id TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX approvals_by_message ON approvals (platform, message_id);
CREATE INDEX approvals_by_expiry ON approvals (expires_at);
