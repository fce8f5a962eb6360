package bot

import (
	"context"
	"github.com/opsbot/opsbot/auth"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// Shutdown never cuts a unit write: a job inside "write unit" when the
// grace has ended finishes the step (its context still live), is stopped
// right after it, and ends interrupted; meanwhile the dispatcher refuses
// new requests with "opsbot is restarting, try again in a minute".
func TestShutdownStopsAtSafePoint(t *testing.T) {
	t.Parallel()
	inWrite, finishWrite := make(chan struct{}), make(chan struct{})
	cutInWrite := make(chan bool, 1)
	backend := jobtest.Func(func(ctx context.Context, _ commands.Job, rep ops.Reporter) (*ops.Result, error) {
		rep.Report(ops.Event{Step: "stop", Status: ops.StepStarted})
		rep.Report(ops.Event{Step: "stop", Status: ops.StepDone})
		rep.Report(ops.Event{Step: "write unit", Status: ops.StepStarted})
		close(inWrite)
		<-finishWrite
		cutInWrite <- ctx.Err() != nil
		rep.Report(ops.Event{Step: "write unit", Status: ops.StepDone})
		rep.Report(ops.Event{Step: "wait until ready", Status: ops.StepStarted})
		<-ctx.Done()
		return nil, ctx.Err()
	})
	h := newHarness(t, backend, map[string]string{"test:alice": "operator"})
	var once sync.Once
	release := func() { once.Do(func() { close(finishWrite) }) }
	t.Cleanup(release) // before the harness's Close, should the test fail early
	r := h.handle("alice", "mtp steps 10 qwen")
	if r.Outcome != Queued {
		t.Fatalf("mtp steps: %+v", r)
	}
	<-inWrite
	h.disp.Drain()
	if got := h.handle("alice", "mtp steps 4 llama"); got.Outcome != Failed || got.Text != RestartingText {
		t.Fatalf("a request while draining: %+v", got)
	}
	grace, cancel := context.WithCancel(context.Background())
	cancel() // the grace is over: stop at the next safe point
	done := make(chan struct{})
	go func() {
		h.eng.Shutdown(grace)
		close(done)
	}()
	testkit.WaitFor(t, 10*time.Second, "the stop waits for the write", func() bool {
		return h.eng.StopPending(r.JobID)
	})
	release()
	if <-cutInWrite {
		t.Fatal("the job's context was cancelled inside the unit write")
	}
	<-done
	j, err := h.store.Job(context.Background(), r.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != store.Interrupted || !strings.Contains(j.Error, "shutting down") {
		t.Fatalf("job after the stop: %s %q, want interrupted because opsbot is shutting down", j.Status, j.Error)
	}
}

// Reload changes the roles and the services later requests are checked
// against.
func TestDispatcherReload(t *testing.T) {
	t.Parallel()
	backend := jobtest.Func(func(context.Context, commands.Job, ops.Reporter) (*ops.Result, error) { return &ops.Result{}, nil })
	h := newHarness(t, backend, map[string]string{"test:alice": "operator"})
	if r := h.handle("bob", "mtp steps 4 llama"); r.Outcome != Refused {
		t.Fatalf("bob before the reload: %+v", r)
	}
	auth, err := auth.New("none", map[string]string{"test:alice": "operator", "test:bob": "operator"})
	if err != nil {
		t.Fatal(err)
	}
	h.disp.Reload(auth, commands.Options{Services: []commands.ServiceRef{{Name: "qwen", Host: "gpu1"}}, Hosts: []string{"gpu1"}})
	if r := h.handle("bob", "mtp steps 4 qwen"); r.Outcome != Queued {
		t.Fatalf("bob after the reload: %+v", r)
	} else {
		h.wait(r.JobID)
	}
	if r := h.handle("bob", "mtp steps 4 llama"); r.Outcome != Invalid {
		t.Fatalf("a service the reload removed: %+v", r)
	}
}
