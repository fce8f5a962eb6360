-- 0003 (PostgreSQL): the load a benchmark ran under (with concurrency, from 0001), so that
-- a result is compared only with results at the same load. 0 means unknown
-- (results stored before this migration): such a result is never compared.

ALTER TABLE bench_results ADD COLUMN prompts    BIGINT NOT NULL DEFAULT 0 CHECK (prompts >= 0);
ALTER TABLE bench_results ADD COLUMN input_len  BIGINT NOT NULL DEFAULT 0 CHECK (input_len >= 0);
ALTER TABLE bench_results ADD COLUMN output_len BIGINT NOT NULL DEFAULT 0 CHECK (output_len >= 0);
CREATE INDEX bench_by_load ON bench_results (service, prompts, concurrency, input_len, output_len, id);
