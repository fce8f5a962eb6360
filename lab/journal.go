package lab

import (
	"sync"
	"time"
)

// journalEntry is one journal record of a unit.
type journalEntry struct {
	At    time.Time
	Unit  string
	Ident string // "systemd", "python3", ...
	PID   int
	Msg   string
}

// journal is a host's journal. It has its own lock (a leaf: nothing else is locked under it),
// so engine goroutines may log without touching the world lock.
type journal struct {
	mu      sync.Mutex
	entries []journalEntry
	max     int
}

func (j *journal) add(unit, ident string, pid int, msg string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, journalEntry{At: time.Now(), Unit: unit, Ident: ident, PID: pid, Msg: msg})
	if j.max > 0 && len(j.entries) > j.max {
		n := len(j.entries) - j.max/2
		j.entries = append([]journalEntry(nil), j.entries[n:]...)
	}
}

// query returns the entries of unit at or after since (zero: all), the last n when n >= 0.
func (j *journal) query(unit string, since time.Time, n int) []journalEntry {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []journalEntry
	for _, e := range j.entries {
		if (unit == "" || e.Unit == unit) && !e.At.Before(since) {
			out = append(out, e)
		}
	}
	if n >= 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}
