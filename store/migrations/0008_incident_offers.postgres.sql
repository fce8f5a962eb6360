-- confirmations.incident_id: the watchdog incident whose alert offers the
-- command (a proposed `gpu recover`). Such an offer holds while that
-- incident is open, across restarts, whatever expires_at says; 0 for
-- every other confirmation, which expires at expires_at.
ALTER TABLE confirmations ADD COLUMN incident_id BIGINT NOT NULL DEFAULT 0;
