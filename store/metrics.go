package store

import (
	"sync/atomic"
	"time"
)

// StatementBuckets are the upper bounds, in seconds, of the statement
// latency histogram Stats reports.
var StatementBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// metrics counts the store's statements: how long each took and which
// failed. Safe for concurrent use; a nil *metrics counts nothing.
type metrics struct {
	buckets [13]atomic.Int64 // per StatementBuckets, then +Inf (not cumulative)
	count   atomic.Int64
	sumNs   atomic.Int64
	errors  atomic.Int64
}

// observe records one statement (or write transaction) that began at t0
// and ended with err. A statement the caller gave up on (its context ended)
// counts as an error too.
func (m *metrics) observe(t0 time.Time, err error) {
	if m == nil {
		return
	}
	d := time.Since(t0)
	i := 0
	for i < len(StatementBuckets) && d.Seconds() > StatementBuckets[i] {
		i++
	}
	m.buckets[i].Add(1)
	m.count.Add(1)
	m.sumNs.Add(int64(d))
	if err != nil {
		m.errors.Add(1)
	}
}

// Stats is a snapshot of the store's statement counters and its pool.
type Stats struct {
	Driver string
	// Statements counts the statements (reads) and write transactions run.
	Statements int64
	// Buckets[i] counts those that took at most StatementBuckets[i]
	// (cumulative, as Prometheus has them).
	Buckets []int64
	Sum     time.Duration // their total duration
	Errors  int64         // those that failed
	// InUse and MaxConns: connections in use now, and the bound.
	InUse, MaxConns int
}

// Stats returns the store's counters since Open. Safe for concurrent use.
func (s *Store) Stats() Stats {
	st := Stats{Driver: s.dialect.String(), Statements: s.m.count.Load(), Sum: time.Duration(s.m.sumNs.Load()), Errors: s.m.errors.Load()}
	var c int64
	for i := range StatementBuckets {
		c += s.m.buckets[i].Load()
		st.Buckets = append(st.Buckets, c)
	}
	ps := s.rdb.Stats()
	st.InUse, st.MaxConns = ps.InUse, ps.MaxOpenConnections
	if s.dialect == sqliteSQL {
		st.InUse += s.wdb.Stats().InUse
		st.MaxConns++
	}
	return st
}
