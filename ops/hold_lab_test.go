package ops_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/remote"
)

// jobLocks is a Locker that records for which job each key was held.
type jobLocks struct {
	ops.Locker
	mu   sync.Mutex
	took []string // "key job"
}

func (l *jobLocks) LockFor(ctx context.Context, key string, jobID int64, onWait func(string)) (*ops.Hold, error) {
	l.mu.Lock()
	l.took = append(l.took, fmt.Sprintf("%s #%d", key, jobID))
	l.mu.Unlock()
	return l.Locker.LockFor(ctx, key, jobID, onWait)
}

var errPaused = errors.New("its leases were last renewed 31s ago")

// TestBoundRunbookSendsNothingOnceTheHoldIsLost: a runbook bound to a job's
// hold holds its node for that job, and once the hold is lost (here right
// after the stop) it sends its hosts nothing more: the unit is not written
// and the service is not started, and the error says why. The runbook it
// was bound from is unchanged: it starts the service again.
func TestBoundRunbookSendsNothingOnceTheHoldIsLost(t *testing.T) {
	t.Parallel()
	locks := &jobLocks{Locker: ops.NewProcessLocker()}
	r := newRig(t, labOpts(), func(c *ops.Config) { c.NodeLocks = locks })
	before := r.unitText(t)
	w := &afterStep{step: "stop"}
	bound := r.rb.For(ops.JobHold{JobID: 42, Held: w.failsAfter(errPaused)})
	_, err := bound.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 10, false, w)
	if !errors.Is(err, remote.ErrHoldLost) || !errors.Is(err, errPaused) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("mtp steps with the hold lost after the stop: %v; want ErrHoldLost and the reason\n%s", err, w.text())
	}
	if r.unitText(t) != before {
		t.Fatalf("the unit was written after the hold was lost:\n%s", w.text())
	}
	if st := r.lab.Host(r.svc.Host).Unit(r.svc.Unit); st.ActiveState != "inactive" || st.Ready {
		t.Fatalf("the service was started after the hold was lost: %+v\n%s", st, w.text())
	}
	locks.mu.Lock()
	took := slices.Clone(locks.took)
	locks.mu.Unlock()
	if !slices.Contains(took, "node:pve #42") {
		t.Fatalf("node locks taken %q; want the node held for job 42", took)
	}
	if _, err := r.rb.ServiceAction(testkit.Context(t, 60*time.Second), "qwen", "start", false, ops.Discard); err != nil {
		t.Fatalf("svc start on the runbook it was bound from: %v", err)
	}
}
