-- 0009: schedule_firings: one row per schedule firing claimed, the claim
-- itself. A process runs a firing only if its INSERT of (schedule_id,
-- fire_at) made the row; a conflict on the primary key means another
-- process (on this machine or another) claimed that firing, and the loser
-- does not run it. fire_at is the firing's time in nanoseconds since the
-- epoch, claimed_by the owner id (owners.id, '' for a process that has not
-- registered one), claimed_at the store's clock at the claim. Rows go with
-- their schedule, and the retention prune deletes the old ones;
-- schedules.fired_at still shows the latest firing claimed.
CREATE TABLE schedule_firings (
	schedule_id BIGINT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
	fire_at     BIGINT NOT NULL,
	claimed_by  TEXT   NOT NULL DEFAULT '',
	claimed_at  BIGINT NOT NULL,
	PRIMARY KEY (schedule_id, fire_at)
);
