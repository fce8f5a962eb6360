package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Leases let several opsbot processes share one file without changing the
// same service or node at once.
//
// An owner is one running opsbot process, registered with RegisterOwner and
// kept live by Heartbeat; it is dead once its expiry passes without a
// heartbeat (or once ExpireOwner says so). A lease is a named exclusive hold
// ("service:qwen", "node:pve") with an owner, the job that holds it and an
// expiry: it is held while its expiry is in the future and its owner is
// live, and anyone may take it over after that. Heartbeat renews an owner's
// leases together with the owner.
//
// Every time is taken when the statement runs, inside the write
// transaction, from the store's clock (wtx.now): on SQLite this machine's
// (processes that share a file share a machine, SQLite's locking needs a
// local file system, so they share the clock); on PostgreSQL the
// database's clock_timestamp(), so that processes on machines whose clocks
// differ agree on every expiry. A holder on another machine is dead only
// once its expiry passes; ExpireOwner's same-machine shortcut needs the
// same Machine (host, boot id and PID namespace).

// ErrLeaseLost is wrapped by errors about a lease this owner no longer holds
// (it expired and was taken over, or was never held).
var ErrLeaseLost = errors.New("lease lost")

// Owner is one opsbot process as the store knows it.
type Owner struct {
	ID   string // unique per process start, e.g. "host1:4242:9f3a"
	Host string // the machine's hostname, for people
	PID  int
	// Machine names the machine and PID namespace in which PID means
	// something ("" when unknown); see ExpireOwner.
	Machine     string
	StartedAt   time.Time
	HeartbeatAt time.Time
	ExpiresAt   time.Time
}

// Lease is a held (or recently held) lease.
type Lease struct {
	Key        string
	Owner      string
	JobID      int64 // 0 when no job holds it
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// The owner's host and pid, when the owner is still registered.
	OwnerHost string
	OwnerPID  int
}

// Holder describes who holds l, for a person: "job #12 of opsbot on host1
// (pid 4242)".
func (l Lease) Holder() string {
	var b strings.Builder
	if l.JobID != 0 {
		fmt.Fprintf(&b, "job #%d of ", l.JobID)
	}
	b.WriteString("opsbot")
	if l.OwnerHost != "" {
		fmt.Fprintf(&b, " on %s", l.OwnerHost)
	}
	if l.OwnerPID != 0 {
		fmt.Fprintf(&b, " (pid %d)", l.OwnerPID)
	}
	return b.String()
}

// currentOwner is the ID registered with RegisterOwner, or "".
func (s *Store) currentOwner() string {
	s.ownerMu.Lock()
	defer s.ownerMu.Unlock()
	return s.ownerID
}

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: lease ttl %s is not positive", ErrInvalid, ttl)
	}
	return nil
}

// RegisterOwner records o as a live owner until now+ttl (StartedAt,
// HeartbeatAt and ExpiresAt are set here) and makes it the owner of every
// job this Store creates from now on. o.ID must not be empty; registering
// an ID again replaces its row.
func (s *Store) RegisterOwner(ctx context.Context, o Owner, ttl time.Duration) (Owner, error) {
	if strings.TrimSpace(o.ID) == "" {
		return Owner{}, fmt.Errorf("register owner: %w: the id is empty", ErrInvalid)
	}
	if err := checkTTL(ttl); err != nil {
		return Owner{}, fmt.Errorf("register owner %s: %w", o.ID, err)
	}
	err := s.write(ctx, func(tx *wtx) error {
		t, err := tx.now()
		if err != nil {
			return err
		}
		o.StartedAt, o.HeartbeatAt, o.ExpiresAt = t, t, t.Add(ttl)
		_, err = tx.ExecContext(context.Background(), `INSERT INTO owners
			(id, host, pid, machine, started_at, heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, machine = excluded.machine,
				started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at`,
			o.ID, o.Host, o.PID, o.Machine, t.UnixNano(), t.UnixNano(), o.ExpiresAt.UnixNano())
		return err
	})
	if err != nil {
		return Owner{}, fmt.Errorf("register owner %s: %w", o.ID, err)
	}
	s.ownerMu.Lock()
	s.ownerID = o.ID
	s.ownerMu.Unlock()
	return o, nil
}

// Heartbeat keeps owner live until now+ttl and renews, to the same expiry,
// every lease it still holds; it returns the keys of those leases. A lease
// the owner believes it holds but that is missing from the answer was lost
// (taken over after it expired). An owner that is no longer registered
// gives ErrNotFound and renews nothing.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, fmt.Errorf("heartbeat of %s: %w", owner, err)
	}
	var keys []string
	err := s.write(ctx, func(tx *wtx) error {
		keys = keys[:0]
		t, err := tx.now()
		if err != nil {
			return err
		}
		exp := t.Add(ttl).UnixNano()
		res, err := tx.ExecContext(context.Background(),
			`UPDATE owners SET heartbeat_at = ?, expires_at = ? WHERE id = ?`, t.UnixNano(), exp, owner)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		rows, err := tx.QueryContext(context.Background(),
			`UPDATE leases SET expires_at = ? WHERE owner = ? RETURNING key`, exp, owner)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat of %s: %w", owner, err)
	}
	return keys, nil
}

// ExpireOwner ends owner's life at once (its leases become free and its
// unfinished jobs can be interrupted), but only if it is still registered
// with this pid and machine: a process on the same machine that has seen
// the pid gone calls it, so a dead holder need not wait for its expiry.
// It reports whether the owner was expired.
func (s *Store) ExpireOwner(ctx context.Context, owner string, pid int, machine string) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *wtx) error {
		t, err := tx.now()
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(context.Background(),
			`UPDATE owners SET expires_at = ?1 WHERE id = ?2 AND pid = ?3 AND machine = ?4 AND machine <> '' AND expires_at > ?1`,
			t.UnixNano(), owner, pid, machine)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("expire owner %s: %w", owner, err)
	}
	return n == 1, nil
}

// UnregisterOwner removes owner and every lease it holds. A process calls
// it when it stops cleanly, after its jobs have ended.
func (s *Store) UnregisterOwner(ctx context.Context, owner string) error {
	err := s.write(ctx, func(tx *wtx) error {
		if _, err := tx.ExecContext(context.Background(), `DELETE FROM leases WHERE owner = ?`, owner); err != nil {
			return err
		}
		_, err := tx.ExecContext(context.Background(), `DELETE FROM owners WHERE id = ?`, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("unregister owner %s: %w", owner, err)
	}
	s.ownerMu.Lock()
	if s.ownerID == owner {
		s.ownerID = ""
	}
	s.ownerMu.Unlock()
	return nil
}

// PruneOwners removes the owners dead since before (their expiry passed
// before it) that have no queued or running job left, with their leases:
// the record of processes that crashed long ago. It returns how many owners
// it removed. A process removed while it was only stalled finds out at its
// next heartbeat (ErrNotFound).
func (s *Store) PruneOwners(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *wtx) error {
		b := before.UnixNano()
		if _, err := tx.ExecContext(context.Background(), `DELETE FROM leases WHERE owner IN
			(SELECT id FROM owners WHERE expires_at < ?
			  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.owner = owners.id AND j.status IN ('queued', 'running')))`, b); err != nil {
			return err
		}
		res, err := tx.ExecContext(context.Background(), `DELETE FROM owners WHERE expires_at < ?
			AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.owner = owners.id AND j.status IN ('queued', 'running'))`, b)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune dead owners: %w", err)
	}
	return int(n), nil
}

// Owners returns the registered owners, live or not, oldest first.
func (s *Store) Owners(ctx context.Context) ([]Owner, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, host, pid, machine, started_at, heartbeat_at, expires_at
		FROM owners ORDER BY started_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list owners: %w", err)
	}
	defer rows.Close()
	var out []Owner
	for rows.Next() {
		var o Owner
		var st, hb, ex int64
		if err := rows.Scan(&o.ID, &o.Host, &o.PID, &o.Machine, &st, &hb, &ex); err != nil {
			return nil, fmt.Errorf("list owners: %w", err)
		}
		o.StartedAt, o.HeartbeatAt, o.ExpiresAt = time.Unix(0, st).UTC(), time.Unix(0, hb).UTC(), time.Unix(0, ex).UTC()
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list owners: %w", err)
	}
	return out, nil
}

// Acquisition is the outcome of AcquireLease.
type Acquisition struct {
	Acquired bool
	// Epoch counts the acquisitions of the key, this one included (a
	// fencing token); 0 when not acquired.
	Epoch int64
	// Holder is who holds the lease when it was not acquired; when it was,
	// the expired holder it was taken over from (Holder.Owner is then not
	// empty and not the caller).
	Holder Lease
}

// TookOver reports whether the lease was acquired from another owner whose
// lease had expired or who had died.
func (a Acquisition) TookOver() bool { return a.Acquired && a.Holder.Owner != "" }

// AcquireLease takes lease key for owner and job until now+ttl, atomically
// across every process on the file: it succeeds when nobody holds key, or
// its holder's expiry has passed, or its holder's owner is dead. It never
// waits: when someone else holds it, Acquired is false and Holder says who.
// owner must be registered (RegisterOwner) for the lease to count as held.
func (s *Store) AcquireLease(ctx context.Context, key, owner string, jobID int64, ttl time.Duration) (Acquisition, error) {
	if strings.TrimSpace(key) == "" || strings.TrimSpace(owner) == "" {
		return Acquisition{}, fmt.Errorf("acquire lease %q for %q: %w: empty key or owner", key, owner, ErrInvalid)
	}
	if err := checkTTL(ttl); err != nil {
		return Acquisition{}, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	var a Acquisition
	err := s.write(ctx, func(tx *wtx) error {
		a = Acquisition{}
		tt, err := tx.now()
		if err != nil {
			return err
		}
		t := tt.UnixNano()
		prev, err := leaseRow(tx, key)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		res, err := tx.ExecContext(context.Background(), `INSERT INTO leases (key, owner, job_id, acquired_at, expires_at)
			VALUES (?1, ?2, ?3, ?4, ?5)
			ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, job_id = excluded.job_id,
				acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
			WHERE leases.expires_at <= ?4
			   OR NOT EXISTS (SELECT 1 FROM owners o WHERE o.id = leases.owner AND o.expires_at > ?4)`,
			key, owner, jobID, t, t+ttl.Nanoseconds())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		a.Acquired = n == 1
		if prev.Key != "" {
			a.Holder = prev
		}
		if !a.Acquired {
			return nil
		}
		return tx.QueryRowContext(context.Background(), `INSERT INTO lease_epochs (key, epoch) VALUES (?, 1)
			ON CONFLICT (key) DO UPDATE SET epoch = lease_epochs.epoch + 1 RETURNING epoch`, key).Scan(&a.Epoch)
	})
	if err != nil {
		return Acquisition{}, fmt.Errorf("acquire lease %s for %s: %w", key, owner, err)
	}
	return a, nil
}

// leaseRow reads key's lease with its owner's host and pid.
func leaseRow(tx *wtx, key string) (Lease, error) {
	var l Lease
	var acq, exp int64
	var host sql.NullString
	var pid sql.NullInt64
	err := tx.QueryRowContext(context.Background(), `SELECT l.key, l.owner, l.job_id, l.acquired_at, l.expires_at, o.host, o.pid
		FROM leases l LEFT JOIN owners o ON o.id = l.owner WHERE l.key = ?`, key).
		Scan(&l.Key, &l.Owner, &l.JobID, &acq, &exp, &host, &pid)
	if err != nil {
		return Lease{}, err
	}
	l.AcquiredAt, l.ExpiresAt = time.Unix(0, acq).UTC(), time.Unix(0, exp).UTC()
	l.OwnerHost, l.OwnerPID = host.String, int(pid.Int64)
	return l, nil
}

// ReleaseLease gives up key, held by owner for job. When owner and job no
// longer hold it (it expired and was taken over), nothing changes and the
// error wraps ErrLeaseLost.
func (s *Store) ReleaseLease(ctx context.Context, key, owner string, jobID int64) error {
	err := s.write1(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(context.Background(),
			`DELETE FROM leases WHERE key = ? AND owner = ? AND job_id = ?`, key, owner, jobID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrLeaseLost
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release lease %s of %s: %w", key, owner, err)
	}
	return nil
}

// Leases returns every lease row, held or expired, by key.
func (s *Store) Leases(ctx context.Context) ([]Lease, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT l.key, l.owner, l.job_id, l.acquired_at, l.expires_at, o.host, o.pid
		FROM leases l LEFT JOIN owners o ON o.id = l.owner ORDER BY l.key`)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		var l Lease
		var acq, exp int64
		var host sql.NullString
		var pid sql.NullInt64
		if err := rows.Scan(&l.Key, &l.Owner, &l.JobID, &acq, &exp, &host, &pid); err != nil {
			return nil, fmt.Errorf("list leases: %w", err)
		}
		l.AcquiredAt, l.ExpiresAt = time.Unix(0, acq).UTC(), time.Unix(0, exp).UTC()
		l.OwnerHost, l.OwnerPID = host.String, int(pid.Int64)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}

// JobOwner returns the owner of job id (as Owner with only ID set when the
// owner is no longer registered; the zero Owner when the job has none) and
// whether that owner is live now.
func (s *Store) JobOwner(ctx context.Context, id int64) (Owner, bool, error) {
	var o Owner
	var host sql.NullString
	var pid, exp sql.NullInt64
	err := s.rdb.QueryRowContext(ctx, `SELECT j.owner, o.host, o.pid, o.expires_at
		FROM jobs j LEFT JOIN owners o ON o.id = j.owner WHERE j.id = ?`, id).Scan(&o.ID, &host, &pid, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return Owner{}, false, fmt.Errorf("owner of job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Owner{}, false, fmt.Errorf("owner of job %d: %w", id, err)
	}
	o.Host, o.PID = host.String, int(pid.Int64)
	if exp.Valid {
		o.ExpiresAt = time.Unix(0, exp.Int64).UTC()
	}
	t, err := s.Now(ctx)
	if err != nil {
		return Owner{}, false, fmt.Errorf("owner of job %d: %w", id, err)
	}
	return o, o.ID != "" && exp.Valid && o.ExpiresAt.After(t), nil
}

// RequestCancel asks the process that runs job id to cancel it; that
// process sees the request through CancelRequests. Asking twice is the
// same as once; a missing job gives ErrNotFound.
func (s *Store) RequestCancel(ctx context.Context, id int64, by string) error {
	err := s.write(ctx, func(tx *wtx) error {
		if err := jobExists(tx, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(context.Background(),
			`INSERT INTO cancel_requests (job_id, requested_by, at) VALUES (?, ?, ?) ON CONFLICT (job_id) DO NOTHING`,
			id, by, now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("request cancel of job %d: %w", id, err)
	}
	return nil
}

// CancelRequests returns the ids of owner's queued or running jobs that
// someone asked to cancel, oldest first.
func (s *Store) CancelRequests(ctx context.Context, owner string) ([]int64, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT c.job_id FROM cancel_requests c JOIN jobs j ON j.id = c.job_id
		WHERE j.owner = ? AND j.status IN ('queued', 'running') ORDER BY c.job_id`, owner)
	if err != nil {
		return nil, fmt.Errorf("read cancel requests of %s: %w", owner, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read cancel requests of %s: %w", owner, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read cancel requests of %s: %w", owner, err)
	}
	return ids, nil
}
