-- 0005 (PostgreSQL): retention. The audit log stays append-only for every writer except
-- the store's own pruning of entries older than store.retention: a row may
-- be deleted only while kv 'prune.audit_before' names a time after it, which
-- Prune sets and clears inside its one transaction.

DROP TRIGGER audit_log_no_delete ON audit_log;
CREATE FUNCTION audit_log_prune_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM kv WHERE key = 'prune.audit_before' AND OLD.at < CAST(value AS BIGINT)) THEN
		RETURN OLD;
	END IF;
	RAISE EXCEPTION 'audit_log is append-only: DELETE is not allowed';
END
$$;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
	FOR EACH ROW EXECUTE FUNCTION audit_log_prune_only();

CREATE INDEX audit_by_time ON audit_log (at);
CREATE INDEX jobs_ended ON jobs (ended_at) WHERE ended_at IS NOT NULL;
