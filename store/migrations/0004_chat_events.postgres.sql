-- 0003 (PostgreSQL): chat events an adapter has taken on (a Matrix command's event id),
-- so that an event delivered again (a sync replayed after a crash, a second
-- opsbot taking over the sync) is never acted on twice.

CREATE TABLE chat_events (
	platform TEXT    NOT NULL CHECK (platform <> ''),
	event_id TEXT    NOT NULL CHECK (event_id <> ''),
	seen_at  BIGINT NOT NULL,
	PRIMARY KEY (platform, event_id)
);
CREATE INDEX chat_events_by_age ON chat_events (seen_at);
