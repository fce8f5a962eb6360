package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Schedule is a command run on a cron schedule. The store keeps Spec as
// given; parsing and validating it is the scheduler's job.
type Schedule struct {
	ID        int64
	Spec      string // cron spec, e.g. "0 3 * * *" or "CRON_TZ=Europe/Berlin 0 3 * * *"
	Command   string // canonical command text
	Platform  string // where the reports go
	Room      string
	CreatedBy string // platform user id
	Paused    bool
	CreatedAt time.Time
	LastRunAt time.Time // zero until the first run
	LastJobID int64     // 0 until the first run
	// Creator is the auth key runs are authorised as ("slack:U123"); empty:
	// Platform:CreatedBy.
	Creator string
	// Targets are the rooms runs report to ("slack:C1,matrix:!r:hs"); empty:
	// Room on Platform.
	Targets string
	// Missed is what a firing missed while no opsbot ran becomes: "run"
	// (once, at start) or "skip" (the default).
	Missed string
	// ConfigKey names the config entry the schedule came from; empty for
	// schedules added from chat.
	ConfigKey string
	FiredAt   time.Time // the last firing claimed (run or skipped); zero until then
	NextRunAt time.Time // the next firing, as the scheduler last computed it
}

// Owner returns the auth key the schedule's runs are authorised as.
func (sc Schedule) Owner() string {
	if sc.Creator != "" {
		return sc.Creator
	}
	return sc.Platform + ":" + sc.CreatedBy
}

const scheduleColumns = `id, spec, command, platform, room, created_by, paused, created_at, last_run_at, last_job_id,
	creator, targets, missed, config_key, fired_at, next_run_at`

// AddSchedule records sc and returns it with ID and CreatedAt set (a
// non-zero CreatedAt is kept). Spec and Command are required. IDs are never
// reused, also after RemoveSchedule.
func (s *Store) AddSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	switch {
	case strings.TrimSpace(sc.Spec) == "":
		return Schedule{}, fmt.Errorf("add schedule: %w: the cron spec is empty", ErrInvalid)
	case strings.TrimSpace(sc.Command) == "":
		return Schedule{}, fmt.Errorf("add schedule: %w: the command is empty", ErrInvalid)
	case sc.ID != 0:
		return Schedule{}, fmt.Errorf("add schedule: %w: a new schedule has no ID yet (got %d)", ErrInvalid, sc.ID)
	case sc.LastJobID != 0 || !sc.LastRunAt.IsZero():
		return Schedule{}, fmt.Errorf("add schedule: %w: a new schedule has not run yet", ErrInvalid)
	}
	if err := checkTime("created_at", sc.CreatedAt); err != nil {
		return Schedule{}, fmt.Errorf("add schedule: %w", err)
	}
	if sc.Missed == "" {
		sc.Missed = "skip"
	}
	if sc.Missed != "run" && sc.Missed != "skip" {
		return Schedule{}, fmt.Errorf("add schedule: %w: missed is run or skip, not %q", ErrInvalid, sc.Missed)
	}
	sc.CreatedAt = orNow(sc.CreatedAt)
	err := s.write1(ctx, func(tx *wtx) error {
		return tx.QueryRowContext(context.Background(), `INSERT INTO schedules
			(spec, command, platform, room, created_by, paused, created_at, creator, targets, missed, config_key)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			sc.Spec, sc.Command, sc.Platform, sc.Room, sc.CreatedBy, sc.Paused, sc.CreatedAt.UnixNano(),
			sc.Creator, sc.Targets, sc.Missed, nullString(sc.ConfigKey)).Scan(&sc.ID)
	})
	if err != nil {
		return Schedule{}, fmt.Errorf("add schedule %q %q: %w", sc.Spec, sc.Command, err)
	}
	return sc, nil
}

// Schedules returns every schedule, paused ones included, in ID order.
func (s *Store) Schedules(ctx context.Context) ([]Schedule, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+scheduleColumns+` FROM schedules ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// Schedule returns the schedule with this id, or an error wrapping
// ErrNotFound.
func (s *Store) Schedule(ctx context.Context, id int64) (Schedule, error) {
	sc, err := scanSchedule(s.rdb.QueryRowContext(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Schedule{}, fmt.Errorf("schedule %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("read schedule %d: %w", id, err)
	}
	return sc, nil
}

// RemoveSchedule deletes the schedule; its jobs keep their ScheduleID. A
// missing schedule gives ErrNotFound.
func (s *Store) RemoveSchedule(ctx context.Context, id int64) error {
	err := s.updateSchedule(ctx, id, `DELETE FROM schedules WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("remove schedule %d: %w", id, err)
	}
	return nil
}

// SetSchedulePaused pauses or resumes the schedule. A missing schedule gives
// ErrNotFound; pausing a paused schedule is not an error.
func (s *Store) SetSchedulePaused(ctx context.Context, id int64, paused bool) error {
	err := s.updateSchedule(ctx, id, `UPDATE schedules SET paused = ? WHERE id = ?`, paused, id)
	if err != nil {
		verb := "resume"
		if paused {
			verb = "pause"
		}
		return fmt.Errorf("%s schedule %d: %w", verb, id, err)
	}
	return nil
}

// RecordScheduleRun notes that the schedule ran at at and started job jobID
// (0: it started none, e.g. skipped while the previous run was still going).
// A missing schedule or job gives ErrNotFound.
func (s *Store) RecordScheduleRun(ctx context.Context, id int64, at time.Time, jobID int64) error {
	if at.IsZero() {
		return fmt.Errorf("record run of schedule %d: %w: the run time is zero", id, ErrInvalid)
	}
	if err := checkTime("run time", at); err != nil {
		return fmt.Errorf("record run of schedule %d: %w", id, err)
	}
	if jobID < 0 {
		return fmt.Errorf("record run of schedule %d: %w: negative job id %d", id, ErrInvalid, jobID)
	}
	err := s.write1(ctx, func(tx *wtx) error {
		if jobID != 0 {
			if err := jobExists(tx, jobID); err != nil {
				return err
			}
		}
		return execOne(tx, `UPDATE schedules SET last_run_at = ?, last_job_id = ? WHERE id = ?`,
			at.UnixNano(), nullID(jobID), id)
	})
	if err != nil {
		return fmt.Errorf("record run of schedule %d: %w", id, err)
	}
	return nil
}

func (s *Store) updateSchedule(ctx context.Context, id int64, query string, args ...any) error {
	return s.write1(ctx, func(tx *wtx) error { return execOne(tx, query, args...) })
}

// execOne runs a statement that must change exactly one row; none gives
// ErrNotFound.
func execOne(tx *wtx, query string, args ...any) error {
	res, err := tx.ExecContext(context.Background(), query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func scanSchedule(sc scanner) (Schedule, error) {
	var s Schedule
	var created int64
	var lastRun, lastJob, fired, next sql.NullInt64
	var key sql.NullString
	if err := sc.Scan(&s.ID, &s.Spec, &s.Command, &s.Platform, &s.Room, &s.CreatedBy, &s.Paused,
		&created, &lastRun, &lastJob, &s.Creator, &s.Targets, &s.Missed, &key, &fired, &next); err != nil {
		return Schedule{}, err
	}
	s.ConfigKey = key.String
	s.FiredAt, s.NextRunAt = fromNanos(fired), fromNanos(next)
	s.CreatedAt = time.Unix(0, created).UTC()
	s.LastRunAt = fromNanos(lastRun)
	s.LastJobID = lastJob.Int64
	return s, nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// SyncConfigSchedules makes the config's schedules (each with its
// ConfigKey set) the store's: a new key is added, a known key keeps its ID,
// firing and run history, and a config schedule whose key is no longer
// listed is removed. Chat schedules are left alone. It returns every config
// schedule after the sync.
func (s *Store) SyncConfigSchedules(ctx context.Context, list []Schedule) ([]Schedule, error) {
	keep := map[string]bool{}
	for _, sc := range list {
		if sc.ConfigKey == "" {
			return nil, fmt.Errorf("sync config schedules: %w: %q has no config key", ErrInvalid, sc.Command)
		}
		keep[sc.ConfigKey] = true
	}
	all, err := s.Schedules(ctx)
	if err != nil {
		return nil, fmt.Errorf("sync config schedules: %w", err)
	}
	have := map[string]bool{}
	for _, sc := range all {
		if sc.ConfigKey == "" {
			continue
		}
		if !keep[sc.ConfigKey] {
			if err := s.RemoveSchedule(ctx, sc.ID); err != nil && !errors.Is(err, ErrNotFound) {
				return nil, fmt.Errorf("sync config schedules: %w", err)
			}
			continue
		}
		have[sc.ConfigKey] = true
	}
	for _, sc := range list {
		if have[sc.ConfigKey] {
			continue
		}
		if _, err := s.AddSchedule(ctx, sc); err != nil {
			// Another process on the file may have added it meanwhile.
			if again, rerr := s.Schedules(ctx); rerr == nil && hasConfigKey(again, sc.ConfigKey) {
				continue
			}
			return nil, fmt.Errorf("sync config schedules: %w", err)
		}
	}
	all, err = s.Schedules(ctx)
	if err != nil {
		return nil, fmt.Errorf("sync config schedules: %w", err)
	}
	var out []Schedule
	for _, sc := range all {
		if sc.ConfigKey != "" {
			out = append(out, sc)
		}
	}
	return out, nil
}

// ClaimFiring claims the firing of schedule id at firing for the caller,
// atomically across every process on the store (on this machine or
// another), and notes the next firing. The claim is the row (id, firing)
// of schedule_firings, stamped with the owner this Store registered
// (RegisterOwner) and the store's clock: it returns true for exactly one
// caller per firing (the one whose insert made the row) and false when the
// row was already there (another process claimed the firing: the caller
// must not run it). A firing earlier than the schedule's latest claimed one
// (FiredAt) is refused too (false): it was folded into that one, or its row
// was pruned. A successful claim moves FiredAt (and NextRunAt) forward when
// firing is the latest. A missing schedule gives ErrNotFound.
func (s *Store) ClaimFiring(ctx context.Context, id int64, firing, next time.Time) (bool, error) {
	if err := checkTime("firing", firing); err != nil || firing.IsZero() {
		return false, fmt.Errorf("claim firing of schedule %d: %w: bad firing time", id, ErrInvalid)
	}
	owner := s.currentOwner()
	claimed := false
	err := s.write1(ctx, func(tx *wtx) error {
		claimed = false
		bg := context.Background()
		var fired sql.NullInt64
		if err := tx.QueryRowContext(bg, `SELECT fired_at FROM schedules WHERE id = ?`, id).Scan(&fired); err != nil {
			return err
		}
		if fired.Valid && firing.UnixNano() < fired.Int64 {
			return nil
		}
		at, err := tx.now()
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(bg, `INSERT INTO schedule_firings (schedule_id, fire_at, claimed_by, claimed_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (schedule_id, fire_at) DO NOTHING`, id, firing.UnixNano(), owner, at.UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		claimed = true
		// For display: the latest firing claimed and the one after it.
		_, err = tx.ExecContext(bg, `UPDATE schedules SET fired_at = ?, next_run_at = ?
			WHERE id = ? AND (fired_at IS NULL OR fired_at < ?)`, firing.UnixNano(), nanosOrNull(next), id, firing.UnixNano())
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("claim firing of schedule %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("claim firing of schedule %d: %w", id, err)
	}
	return claimed, nil
}

// Firing is one claimed firing of a schedule (a schedule_firings row).
type Firing struct {
	ScheduleID int64
	At         time.Time // the firing's time
	ClaimedBy  string    // the owner id that claimed it ("" when none was registered)
	ClaimedAt  time.Time // the store's clock at the claim
}

// Firings returns the claimed firings of schedule id that the retention
// prune has kept, oldest first.
func (s *Store) Firings(ctx context.Context, id int64) ([]Firing, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT schedule_id, fire_at, claimed_by, claimed_at FROM schedule_firings
		WHERE schedule_id = ? ORDER BY fire_at`, id)
	if err != nil {
		return nil, fmt.Errorf("firings of schedule %d: %w", id, err)
	}
	defer rows.Close()
	var out []Firing
	for rows.Next() {
		var f Firing
		var at, claimed int64
		if err := rows.Scan(&f.ScheduleID, &at, &f.ClaimedBy, &claimed); err != nil {
			return nil, fmt.Errorf("firings of schedule %d: %w", id, err)
		}
		f.At, f.ClaimedAt = time.Unix(0, at).UTC(), time.Unix(0, claimed).UTC()
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("firings of schedule %d: %w", id, err)
	}
	return out, nil
}

// SetScheduleNext notes the next firing of schedule id, for `schedule list`.
func (s *Store) SetScheduleNext(ctx context.Context, id int64, next time.Time) error {
	err := s.updateSchedule(ctx, id, `UPDATE schedules SET next_run_at = ? WHERE id = ?`, nanosOrNull(next), id)
	if err != nil {
		return fmt.Errorf("set next run of schedule %d: %w", id, err)
	}
	return nil
}

func nanosOrNull(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func hasConfigKey(list []Schedule, key string) bool {
	for _, sc := range list {
		if sc.ConfigKey == key {
			return true
		}
	}
	return false
}
