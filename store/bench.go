package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// BenchResult is one benchmark of one service at one setting.
type BenchResult struct {
	ID       int64
	JobID    int64  // the job that ran it; 0 when none
	Service  string // required
	Settings string // canonical key, e.g. "steps=10,topk=1,draft=11"; required
	At       time.Time

	// Figures; NaN means "not measured" and round-trips as NaN.
	OutputTokS    float64 // total output tokens per second
	PerStreamTokS float64 // per-stream decode tokens per second
	AcceptLen     float64 // tokens per verify step, bonus included
	AcceptRate    float64 // drafts accepted / drafts proposed

	RequestsOK     int
	RequestsFailed int
	// The load it ran under: Concurrency, Prompts, InputLen and OutputLen
	// (tokens); 0 is unknown.
	Concurrency int
	Prompts     int
	InputLen    int
	OutputLen   int
	Raw         json.RawMessage // the full benchmark report, JSON; nil when none
}

// Load is the load a benchmark ran under. Results are compared only at the
// same load; a load with any field 0 is unknown and matches nothing.
type Load struct {
	Prompts, Concurrency, InputLen, OutputLen int
}

// Known reports whether every field of l is set.
func (l Load) Known() bool {
	return l.Prompts > 0 && l.Concurrency > 0 && l.InputLen > 0 && l.OutputLen > 0
}

// String renders l as people type it: "prompts=16 concurrency=1 in=256 out=256".
func (l Load) String() string {
	return fmt.Sprintf("prompts=%d concurrency=%d in=%d out=%d", l.Prompts, l.Concurrency, l.InputLen, l.OutputLen)
}

// Load returns the load r ran under.
func (r BenchResult) Load() Load {
	return Load{Prompts: r.Prompts, Concurrency: r.Concurrency, InputLen: r.InputLen, OutputLen: r.OutputLen}
}

const benchColumns = `id, job_id, service, settings, at, output_tok_s, per_stream_tok_s, accept_len, accept_rate, requests_ok, requests_failed, concurrency, raw, prompts, input_len, output_len`

// AddBenchResult records r and returns it with ID set (and At, when it was
// zero). Service and Settings are required, counts must not be negative,
// figures must be finite or NaN, Raw must be JSON when set, and JobID, when
// set, must name an existing job (else ErrNotFound); a rejected r writes
// nothing.
func (s *Store) AddBenchResult(ctx context.Context, r BenchResult) (BenchResult, error) {
	return s.addBench(ctx, r, false)
}

// AddBenchResultOnce is AddBenchResult for trying again a write whose
// outcome is unknown (the store refused it, or its commit's answer was
// lost): r, whose JobID and At must be set, is not added when its job
// already has a result of the same service, settings and load at that very
// time (to the nanosecond); the one there is returned. Trying it again is
// then harmless.
func (s *Store) AddBenchResultOnce(ctx context.Context, r BenchResult) (BenchResult, error) {
	if r.JobID == 0 || r.At.IsZero() {
		return BenchResult{}, fmt.Errorf("add bench result once: %w: its job and time must be set", ErrInvalid)
	}
	return s.addBench(ctx, r, true)
}

func (s *Store) addBench(ctx context.Context, r BenchResult, once bool) (BenchResult, error) {
	if err := checkBench(r); err != nil {
		return BenchResult{}, fmt.Errorf("add bench result: %w", err)
	}
	r.At = orNow(r.At)
	err := s.write1(ctx, func(tx *wtx) error {
		if r.JobID != 0 {
			if err := jobExists(tx, r.JobID); err != nil {
				return err
			}
		}
		if once {
			err := tx.QueryRowContext(context.Background(), `SELECT id FROM bench_results
				WHERE service = ? AND settings = ? AND job_id = ? AND at = ? AND prompts = ? AND concurrency = ? AND input_len = ? AND output_len = ?`,
				r.Service, r.Settings, r.JobID, r.At.UnixNano(), r.Prompts, r.Concurrency, r.InputLen, r.OutputLen).Scan(&r.ID)
			if err == nil {
				return nil // there already
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		return tx.QueryRowContext(context.Background(), `INSERT INTO bench_results
			(job_id, service, settings, at, output_tok_s, per_stream_tok_s, accept_len, accept_rate, requests_ok, requests_failed, concurrency, raw,
			 prompts, input_len, output_len)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			nullID(r.JobID), r.Service, r.Settings, r.At.UnixNano(),
			nullFloat(r.OutputTokS), nullFloat(r.PerStreamTokS), nullFloat(r.AcceptLen), nullFloat(r.AcceptRate),
			r.RequestsOK, r.RequestsFailed, r.Concurrency, nullJSON(r.Raw), r.Prompts, r.InputLen, r.OutputLen).Scan(&r.ID)
	})
	if err != nil {
		return BenchResult{}, fmt.Errorf("add bench result for %s %s: %w", r.Service, r.Settings, err)
	}
	return r, nil
}

func checkBench(r BenchResult) error {
	switch {
	case strings.TrimSpace(r.Service) == "":
		return fmt.Errorf("%w: the service is empty", ErrInvalid)
	case strings.TrimSpace(r.Settings) == "":
		return fmt.Errorf("%w: the settings key is empty", ErrInvalid)
	case r.ID != 0:
		return fmt.Errorf("%w: a new result has no ID yet (got %d)", ErrInvalid, r.ID)
	case r.JobID < 0:
		return fmt.Errorf("%w: negative job id %d", ErrInvalid, r.JobID)
	case r.RequestsOK < 0 || r.RequestsFailed < 0 || r.Concurrency < 0:
		return fmt.Errorf("%w: negative count (ok %d, failed %d, concurrency %d)", ErrInvalid, r.RequestsOK, r.RequestsFailed, r.Concurrency)
	case r.Prompts < 0 || r.InputLen < 0 || r.OutputLen < 0:
		return fmt.Errorf("%w: negative load (prompts %d, in %d, out %d)", ErrInvalid, r.Prompts, r.InputLen, r.OutputLen)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"output tok/s", r.OutputTokS}, {"per-stream tok/s", r.PerStreamTokS}, {"accept length", r.AcceptLen}, {"accept rate", r.AcceptRate}} {
		if math.IsInf(f.v, 0) {
			return fmt.Errorf("%w: %s is infinite", ErrInvalid, f.name)
		}
	}
	if err := checkJSON("raw", r.Raw); err != nil {
		return err
	}
	return checkTime("bench time", r.At)
}

func nullFloat(f float64) sql.NullFloat64 {
	if math.IsNaN(f) {
		return sql.NullFloat64{}
	}
	return sql.NullFloat64{Float64: f, Valid: true}
}

func fromNullFloat(f sql.NullFloat64) float64 {
	if !f.Valid {
		return math.NaN()
	}
	return f.Float64
}

// PreviousBenchResult returns the newest result for service and settings
// whose ID is below beforeID (beforeID <= 0: the newest of all), so that a
// new result can be shown beside the last one. settings "" matches any
// settings (the service's previous result, whatever it ran with). No such
// result gives ErrNotFound.
func (s *Store) PreviousBenchResult(ctx context.Context, service, settings string, beforeID int64) (BenchResult, error) {
	q := `SELECT ` + benchColumns + ` FROM bench_results WHERE service = ?`
	args := []any{service}
	if settings != "" {
		q += ` AND settings = ?`
		args = append(args, settings)
	}
	if beforeID > 0 {
		q += ` AND id < ?`
		args = append(args, beforeID)
	}
	q += ` ORDER BY id DESC LIMIT 1`
	r, err := scanBench(s.rdb.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return BenchResult{}, fmt.Errorf("previous bench result for %s %s: %w", service, settings, ErrNotFound)
	}
	if err != nil {
		return BenchResult{}, fmt.Errorf("read previous bench result for %s %s: %w", service, settings, err)
	}
	return r, nil
}

// PreviousAtLoad returns the service's newest result at load whose ID is
// below beforeID (beforeID <= 0: the newest of all), at settings when
// settings is not "" (else at any settings), leaving out those of job
// excludeJob (0: none left out): the like-for-like result a new one is
// compared with, from another run than the new one's. An unknown load
// (Load.Known false) matches nothing. No such result gives ErrNotFound.
func (s *Store) PreviousAtLoad(ctx context.Context, service, settings string, load Load, beforeID, excludeJob int64) (BenchResult, error) {
	what := fmt.Sprintf("previous bench result for %s %s at %s", service, settings, load)
	if !load.Known() {
		return BenchResult{}, fmt.Errorf("%s: the load is unknown: %w", what, ErrNotFound)
	}
	q := `SELECT ` + benchColumns + ` FROM bench_results
		WHERE service = ? AND prompts = ? AND concurrency = ? AND input_len = ? AND output_len = ?`
	args := []any{service, load.Prompts, load.Concurrency, load.InputLen, load.OutputLen}
	if settings != "" {
		q += ` AND settings = ?`
		args = append(args, settings)
	}
	if beforeID > 0 {
		q += ` AND id < ?`
		args = append(args, beforeID)
	}
	if excludeJob > 0 {
		q += ` AND (job_id IS NULL OR job_id != ?)`
		args = append(args, excludeJob)
	}
	q += ` ORDER BY id DESC LIMIT 1`
	r, err := scanBench(s.rdb.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return BenchResult{}, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if err != nil {
		return BenchResult{}, fmt.Errorf("read %s: %w", what, err)
	}
	return r, nil
}

// BenchHistory returns the service's results, newest first, at most limit
// (<= 0: 50). service "" returns every service's.
func (s *Store) BenchHistory(ctx context.Context, service string, limit int) ([]BenchResult, error) {
	q := `SELECT ` + benchColumns + ` FROM bench_results`
	var args []any
	if service != "" {
		q += ` WHERE service = ?`
		args = append(args, service)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limitOr(limit, 50))
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read bench history of %q: %w", service, err)
	}
	defer rows.Close()
	var out []BenchResult
	for rows.Next() {
		r, err := scanBench(rows)
		if err != nil {
			return nil, fmt.Errorf("read bench history of %q: %w", service, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read bench history of %q: %w", service, err)
	}
	return out, nil
}

// LatestBench returns each service's newest result, by service, in one
// query (the index on service and id answers each service's newest); a
// service with none is absent.
func (s *Store) LatestBench(ctx context.Context) (map[string]BenchResult, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+benchColumns+` FROM bench_results
		WHERE id IN (SELECT MAX(id) FROM bench_results GROUP BY service)`)
	if err != nil {
		return nil, fmt.Errorf("read the newest results: %w", err)
	}
	defer rows.Close()
	out := map[string]BenchResult{}
	for rows.Next() {
		r, err := scanBench(rows)
		if err != nil {
			return nil, fmt.Errorf("read the newest results: %w", err)
		}
		out[r.Service] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the newest results: %w", err)
	}
	return out, nil
}

func scanBench(sc scanner) (BenchResult, error) {
	var r BenchResult
	var job sql.NullInt64
	var at int64
	var out, per, alen, arate sql.NullFloat64
	var raw sql.NullString
	if err := sc.Scan(&r.ID, &job, &r.Service, &r.Settings, &at, &out, &per, &alen, &arate,
		&r.RequestsOK, &r.RequestsFailed, &r.Concurrency, &raw, &r.Prompts, &r.InputLen, &r.OutputLen); err != nil {
		return BenchResult{}, err
	}
	r.JobID = job.Int64
	r.At = time.Unix(0, at).UTC()
	r.OutputTokS, r.PerStreamTokS = fromNullFloat(out), fromNullFloat(per)
	r.AcceptLen, r.AcceptRate = fromNullFloat(alen), fromNullFloat(arate)
	if raw.Valid {
		r.Raw = json.RawMessage(raw.String)
	}
	return r, nil
}

// RecentAtLoad returns the service's newest results at settings and load,
// newest first, at most n (<= 0: 7), leaving out those of job excludeJob
// (0: none left out): the comparable runs a new result is judged against. An
// unknown load (Load.Known false) or empty settings match nothing (no rows,
// no error).
func (s *Store) RecentAtLoad(ctx context.Context, service, settings string, load Load, excludeJob int64, n int) ([]BenchResult, error) {
	if !load.Known() || settings == "" {
		return nil, nil
	}
	q := `SELECT ` + benchColumns + ` FROM bench_results
		WHERE service = ? AND settings = ? AND prompts = ? AND concurrency = ? AND input_len = ? AND output_len = ?`
	args := []any{service, settings, load.Prompts, load.Concurrency, load.InputLen, load.OutputLen}
	if excludeJob > 0 {
		q += ` AND (job_id IS NULL OR job_id != ?)`
		args = append(args, excludeJob)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limitOr(n, 7))
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read recent bench results of %s %s at %s: %w", service, settings, load, err)
	}
	defer rows.Close()
	var out []BenchResult
	for rows.Next() {
		r, err := scanBench(rows)
		if err != nil {
			return nil, fmt.Errorf("read recent bench results of %s %s at %s: %w", service, settings, load, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read recent bench results of %s %s at %s: %w", service, settings, load, err)
	}
	return out, nil
}

// MedianOutputTokS is the median output tok/s of rs, NaN figures left out;
// ok is false when none has one.
func MedianOutputTokS(rs []BenchResult) (median float64, ok bool) {
	return Median(rs, func(r BenchResult) float64 { return r.OutputTokS })
}

// Median is the median of figure over rs, NaN figures left out; ok is false
// when none has one.
func Median(rs []BenchResult, figure func(BenchResult) float64) (median float64, ok bool) {
	var v []float64
	for _, r := range rs {
		if f := figure(r); !math.IsNaN(f) {
			v = append(v, f)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	sort.Float64s(v)
	m := len(v) / 2
	if len(v)%2 == 1 {
		return v[m], true
	}
	return (v[m-1] + v[m]) / 2, true
}
