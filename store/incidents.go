package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Incident is what the watchdog saw go wrong with a service, from the pass
// that saw it until the pass that saw the service healthy again. A service
// has at most one open incident, across every process on the file.
type Incident struct {
	ID       int64
	Service  string
	Kind     string // "restart_loop", "down"
	Summary  string // what was seen, for people
	OpenedAt time.Time
	// UpdatedAt is the last time the watchdog changed the incident.
	UpdatedAt time.Time
	ClosedAt  time.Time // zero while open
	// Alerts are the messages that show the incident, one per target room,
	// edited as it evolves.
	Alerts     []AlertRef
	AckedBy    string // auth key of who acknowledged it; "" until then
	AckedAt    time.Time
	RemindedAt time.Time // the last reminder posted; zero: none yet
	RecoverJob int64     // the gpu recover job run for it, 0: none
}

// AlertRef is one posted alert message.
type AlertRef struct {
	Platform string `json:"platform"`
	Room     string `json:"room"`
	ID       string `json:"id"`
}

// Open reports whether the incident is not closed.
func (i Incident) Open() bool { return i.ClosedAt.IsZero() }

const incidentColumns = `id, service, kind, summary, opened_at, updated_at, closed_at, alerts, acked_by, acked_at, reminded_at, recover_job`

// OpenIncident opens in for its service unless the service already has an
// open incident: then it returns that one and opened is false. Exactly one
// of several processes opening an incident for a service at once opens it.
func (s *Store) OpenIncident(ctx context.Context, in Incident) (_ Incident, opened bool, _ error) {
	if strings.TrimSpace(in.Service) == "" || strings.TrimSpace(in.Kind) == "" {
		return Incident{}, false, fmt.Errorf("open incident: %w: service and kind are required", ErrInvalid)
	}
	in.OpenedAt = orNow(in.OpenedAt)
	in.UpdatedAt = in.OpenedAt
	err := s.write1(ctx, func(tx *wtx) error {
		opened = false
		res, err := tx.ExecContext(context.Background(), `INSERT INTO incidents (service, kind, summary, opened_at, updated_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, in.Service, in.Kind, in.Summary, in.OpenedAt.UnixNano(), in.UpdatedAt.UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		opened = n == 1
		return nil
	})
	if err != nil {
		return Incident{}, false, fmt.Errorf("open incident for %s: %w", in.Service, err)
	}
	cur, err := s.OpenIncidentOf(ctx, in.Service)
	if err != nil {
		return Incident{}, false, err
	}
	return cur, opened, nil
}

// OpenIncidentOf returns the service's open incident, or an error wrapping
// ErrNotFound when it has none.
func (s *Store) OpenIncidentOf(ctx context.Context, service string) (Incident, error) {
	in, err := scanIncident(s.rdb.QueryRowContext(ctx, `SELECT `+incidentColumns+` FROM incidents
		WHERE service = ? AND closed_at IS NULL`, service))
	if errors.Is(err, sql.ErrNoRows) {
		return Incident{}, fmt.Errorf("open incident of %s: %w", service, ErrNotFound)
	}
	if err != nil {
		return Incident{}, fmt.Errorf("read open incident of %s: %w", service, err)
	}
	return in, nil
}

// Incident returns incident id, or an error wrapping ErrNotFound.
func (s *Store) Incident(ctx context.Context, id int64) (Incident, error) {
	in, err := scanIncident(s.rdb.QueryRowContext(ctx, `SELECT `+incidentColumns+` FROM incidents WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Incident{}, fmt.Errorf("incident %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Incident{}, fmt.Errorf("read incident %d: %w", id, err)
	}
	return in, nil
}

// OpenIncidents returns every open incident, oldest first.
func (s *Store) OpenIncidents(ctx context.Context) ([]Incident, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+incidentColumns+` FROM incidents WHERE closed_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list open incidents: %w", err)
	}
	defer rows.Close()
	var out []Incident
	for rows.Next() {
		in, err := scanIncident(rows)
		if err != nil {
			return nil, fmt.Errorf("list open incidents: %w", err)
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

// UpdateIncident stores the incident's kind, summary, alerts, reminder time
// and recover job, and marks it updated at at. Closed incidents are not
// changed (ErrNotFound).
func (s *Store) UpdateIncident(ctx context.Context, in Incident, at time.Time) error {
	alerts, err := json.Marshal(orEmpty(in.Alerts))
	if err != nil {
		return fmt.Errorf("update incident %d: %w", in.ID, err)
	}
	err = s.write1(ctx, func(tx *wtx) error {
		return execOne(tx, `UPDATE incidents SET kind = ?, summary = ?, alerts = ?, reminded_at = ?, recover_job = ?, updated_at = ?
			WHERE id = ? AND closed_at IS NULL`, in.Kind, in.Summary, string(alerts), nanosOrNull(in.RemindedAt),
			nullID(in.RecoverJob), orNow(at).UnixNano(), in.ID)
	})
	if err != nil {
		return fmt.Errorf("update incident %d: %w", in.ID, err)
	}
	return nil
}

// CloseIncident closes incident id at at with its final summary. Closing a
// closed incident gives ErrNotFound.
func (s *Store) CloseIncident(ctx context.Context, id int64, summary string, at time.Time) error {
	at = orNow(at)
	err := s.write1(ctx, func(tx *wtx) error {
		return execOne(tx, `UPDATE incidents SET closed_at = ?, updated_at = ?, summary = ? WHERE id = ? AND closed_at IS NULL`,
			at.UnixNano(), at.UnixNano(), summary, id)
	})
	if err != nil {
		return fmt.Errorf("close incident %d: %w", id, err)
	}
	return nil
}

// AckIncident records that by acknowledged open incident id at at; the
// first acknowledgement stands. It returns the incident as stored.
func (s *Store) AckIncident(ctx context.Context, id int64, by string, at time.Time) (Incident, error) {
	at = orNow(at)
	err := s.write1(ctx, func(tx *wtx) error {
		return execOne(tx, `UPDATE incidents SET acked_by = CASE WHEN acked_by = '' THEN ? ELSE acked_by END,
			acked_at = COALESCE(acked_at, ?) WHERE id = ? AND closed_at IS NULL`, by, at.UnixNano(), id)
	})
	if err != nil {
		return Incident{}, fmt.Errorf("acknowledge incident %d: %w", id, err)
	}
	return s.Incident(ctx, id)
}

func orEmpty(a []AlertRef) []AlertRef {
	if a == nil {
		return []AlertRef{}
	}
	return a
}

func scanIncident(sc scanner) (Incident, error) {
	var in Incident
	var opened, updated int64
	var closed, acked, reminded, job sql.NullInt64
	var alerts string
	if err := sc.Scan(&in.ID, &in.Service, &in.Kind, &in.Summary, &opened, &updated, &closed, &alerts,
		&in.AckedBy, &acked, &reminded, &job); err != nil {
		return Incident{}, err
	}
	in.OpenedAt, in.UpdatedAt = time.Unix(0, opened).UTC(), time.Unix(0, updated).UTC()
	in.ClosedAt, in.AckedAt, in.RemindedAt = fromNanos(closed), fromNanos(acked), fromNanos(reminded)
	in.RecoverJob = job.Int64
	if err := json.Unmarshal([]byte(alerts), &in.Alerts); err != nil {
		return Incident{}, fmt.Errorf("incident %d alerts: %w", in.ID, err)
	}
	return in, nil
}

// Silence keeps the watchdog from alerting on service until until (a zero
// or past until lifts the silence). by is who asked.
func (s *Store) Silence(ctx context.Context, service string, until time.Time, by string, at time.Time) error {
	if strings.TrimSpace(service) == "" {
		return fmt.Errorf("silence: %w: no service", ErrInvalid)
	}
	err := s.write1(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(context.Background(), `INSERT INTO silences (service, until, by_user, at) VALUES (?, ?, ?, ?)
			ON CONFLICT (service) DO UPDATE SET until = excluded.until, by_user = excluded.by_user, at = excluded.at`,
			service, until.UnixNano(), by, orNow(at).UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("silence %s: %w", service, err)
	}
	return nil
}

// Silences returns the services silenced after now, with until when and by whom.
func (s *Store) Silences(ctx context.Context, now time.Time) (map[string]SilenceInfo, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT service, until, by_user FROM silences WHERE until > ?`, now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list silences: %w", err)
	}
	defer rows.Close()
	out := map[string]SilenceInfo{}
	for rows.Next() {
		var svc, by string
		var until int64
		if err := rows.Scan(&svc, &until, &by); err != nil {
			return nil, fmt.Errorf("list silences: %w", err)
		}
		out[svc] = SilenceInfo{Until: time.Unix(0, until).UTC(), By: by}
	}
	return out, rows.Err()
}

// SilenceInfo is one silence.
type SilenceInfo struct {
	Until time.Time
	By    string
}
