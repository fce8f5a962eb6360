-- history SERVICE lists a service's newest results (BenchHistory: WHERE service = ? ORDER BY
-- id DESC LIMIT n): without this index SQLite read every result of the service and sorted them.
CREATE INDEX bench_by_service ON bench_results (service, id);
