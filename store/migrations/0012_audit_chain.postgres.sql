-- 0012 (PostgreSQL): the audit log becomes a hash chain (see
-- store/auditchain.go and the SQLite variant, whose tables these are).
--
-- Here the chain is the database's to keep: a BEFORE INSERT trigger takes
-- the head row's lock (SELECT ... FOR UPDATE, held until the inserting
-- transaction ends), so appenders of every process on the database chain
-- one after another; it sets the new entry's id to the head's plus one,
-- its prev to the head's hash and its hash to the SHA-256 of the
-- canonical form of its content (chainHash in Go builds the same bytes),
-- and moves the head. So every statement that inserts entries (one, or a
-- batch of acks) is chained without another round trip.
--
-- A store copy inserts entries as they were, with their ids and hashes,
-- after it sets opsbot.audit_verbatim for its transaction.
ALTER TABLE audit_log ADD COLUMN prev TEXT;
ALTER TABLE audit_log ADD COLUMN hash TEXT;

CREATE TABLE audit_chain (
	name TEXT   PRIMARY KEY CHECK (name IN ('head', 'anchor')),
	seq  BIGINT NOT NULL,
	hash TEXT   NOT NULL
);
INSERT INTO audit_chain (name, seq, hash) SELECT 'head', COALESCE(MAX(id), 0), '0000000000000000000000000000000000000000000000000000000000000000' FROM audit_log;
INSERT INTO audit_chain (name, seq, hash) SELECT 'anchor', COALESCE(MAX(id), 0), '0000000000000000000000000000000000000000000000000000000000000000' FROM audit_log;

CREATE FUNCTION audit_field(v TEXT) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
	SELECT octet_length(convert_to(v, 'UTF8')) || ':' || v || E'\n'
$$;

CREATE FUNCTION audit_log_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	head_seq  BIGINT;
	head_hash TEXT;
BEGIN
	IF current_setting('opsbot.audit_verbatim', true) = 'on' THEN
		RETURN NEW;
	END IF;
	SELECT seq, hash INTO head_seq, head_hash FROM audit_chain WHERE name = 'head' FOR UPDATE;
	NEW.id := head_seq + 1;
	NEW.prev := head_hash;
	NEW.hash := encode(sha256(convert_to(
		'opsbot-audit-v1' || E'\n' || head_hash || E'\n' || NEW.id || E'\n' || NEW.at || E'\n' ||
		audit_field(NEW.platform) || audit_field(NEW.user_id) || audit_field(NEW.room) ||
		audit_field(NEW.command) || audit_field(NEW.decision) || audit_field(NEW.detail) ||
		COALESCE(NEW.job_id::text, '') || E'\n', 'UTF8')), 'hex');
	UPDATE audit_chain SET seq = NEW.id, hash = NEW.hash WHERE name = 'head';
	RETURN NEW;
END
$$;
CREATE TRIGGER audit_log_chain BEFORE INSERT ON audit_log
	FOR EACH ROW EXECUTE FUNCTION audit_log_chain();
