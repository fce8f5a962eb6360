package ops

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/router"
	"github.com/opsbot/opsbot/ops/unit"
)

// A replica behind a router is drained before its engine stops and put
// back once it serves again:
//
//   - drain (in stop, before systemctl stop): under the group's lock
//     (Config.NodeLocks, key "router:GROUP"), the router's worker list is
//     read; the configured replicas of the group absent from it are out.
//     When taking this one out too would put more than
//     Rollout.MaxUnavailable out, the lock is released and the list read
//     again every poll, up to Rollout.UnavailableWait; then the stop is
//     refused (*UnavailableError), naming who is out, nothing stopped.
//     Else the replica is removed from the router while the lock is held,
//     so that two jobs never both take the last one out. Then the engine's
//     in-flight requests (SGLang /get_load, vLLM's gauges on /metrics) are
//     waited for until none is seen on two reads in a row, up to
//     Rollout.DrainTimeout (past it the stop goes on, saying how many it
//     cuts).
//   - rejoin (in leave, when the job leaves the replica serving): one
//     short generate request straight to the replica (engine.WarmUp), then
//     the router's Add; a replica left not serving stays out of the
//     router, and Result.Left says so (OutOfRouter).
//
// A replica with no router takes traffic while it restarts: the job says
// so once (a warning of the stop step).

// Steps of the drain, as the thread shows them.
const (
	StepDrain  = "drain"
	StepRejoin = "rejoin"
)

// routerOf is the router in front of service sc, or nil.
func routerOf(sc ServiceConfig) *RouterConfig {
	if sc.Replica == nil {
		return nil
	}
	return sc.Replica.Router
}

// routerHTTP is the HTTP client of the routers' worker APIs.
func routerHTTP() *http.Client {
	return &http.Client{Timeout: 15 * time.Second}
}

// workerURL is the URL the router knows t by.
func workerURL(t *target) string {
	if rc := routerOf(t.cfg); rc != nil && rc.Worker != "" {
		return rc.Worker
	}
	return t.cfg.URL
}

func sameURL(a, b string) bool { return strings.TrimRight(a, "/") == strings.TrimRight(b, "/") }

func listed(ws []router.Worker, url string) bool {
	for _, w := range ws {
		if sameURL(w.URL, url) {
			return true
		}
	}
	return false
}

// siblings are the replicas of t's group (t among them), as configured.
func (r *Runbook) siblings(t *target) []*target {
	return r.replicasOf(t.cfg.Replica.Group)
}

// replicasOf are the replicas of group, as configured (by name where the
// configuration gives no order).
func (r *Runbook) replicasOf(group string) []*target {
	var names []string
	for _, n := range r.index.names {
		if rp := r.index.byName[n].cfg.Replica; rp != nil && rp.Group == group {
			names = append(names, n)
		}
	}
	sort.SliceStable(names, func(i, j int) bool {
		return r.index.byName[names[i]].cfg.Replica.Index < r.index.byName[names[j]].cfg.Replica.Index
	})
	return r.targets(names)
}

// outOf names the replicas of ts absent from ws.
func outOf(ts []*target, ws []router.Worker) []string {
	var out []string
	for _, o := range ts {
		if !listed(ws, workerURL(o)) {
			out = append(out, o.name)
		}
	}
	return out
}

// UnavailableError is a drain refused: taking the replica out of its
// router would have put more than max_unavailable replicas of its group
// out, and none came back within the wait. Nothing was stopped.
type UnavailableError struct {
	Service string   // the replica not taken out
	Group   string   // its group
	Out     []string // the replicas out of the router
	Max     int      // rollout.max_unavailable
	Waited  time.Duration
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("not taking %s out of %s's router: %s %s out already (rollout.max_unavailable %d), and no replica came back within %s; "+
		"nothing was stopped, %s serves as before. `svc status %s` shows the replicas",
		e.Service, e.Group, strings.Join(e.Out, ", "), isAre(len(e.Out)), e.Max, e.Waited.Round(time.Second), e.Service, e.Group)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// drain takes t out of its router before its engine stops and waits for
// the requests it holds; see the comment at the top of this file. It does
// nothing for a service that is no replica, or that this job drained
// already.
func (r *Runbook) drain(ctx context.Context, t *target, res *Result, rep Reporter) error {
	if t.cfg.Replica == nil || res.did.drained {
		return nil
	}
	res.did.rep = rep
	rc := t.cfg.Replica.Router
	if rc == nil {
		if !res.did.noRouterSaid && !r.quietNoRouter {
			res.did.noRouterSaid = true
			rep.Report(Event{At: time.Now(), Step: "stop", Status: StepWarning, Message: fmt.Sprintf(
				"%s has no router (services.%s.router): %s takes traffic while it restarts, and requests sent to it meanwhile fail",
				t.cfg.Replica.Group, t.cfg.Replica.Group, t.name)})
		}
		return nil
	}
	worker := workerURL(t)
	st := begin(rep, StepDrain, "taking %s (%s) out of router %s", t.name, worker, rc.URL)
	if t.router == nil {
		return st.fail(fmt.Errorf("router of %s: %v; nothing was stopped", t.cfg.Replica.Group, t.routerErr))
	}
	ph, _ := t.eng.Probe(ctx)
	serving := ph == engine.PhaseReady
	maxOut := r.cfg.Rollout.MaxUnavailable
	key := "router:" + t.cfg.Replica.Group
	t0 := time.Now()
	said := false
	for {
		hold, err := r.cfg.NodeLocks.LockFor(ctx, key, r.hold.JobID, nil)
		if err != nil {
			return st.fail(fmt.Errorf("hold %s: %w", key, err))
		}
		ws, err := t.router.Workers(ctx)
		if err != nil {
			hold.Release()
			return st.fail(fmt.Errorf("list the workers of router %s: %w; nothing was stopped", rc.URL, err))
		}
		if !listed(ws, worker) {
			hold.Release()
			if serving {
				// Someone took it out on purpose: it stays out after the job.
				res.did.keptOut = true
			}
			st.done("%s is not among the router's workers already", t.name)
			return nil
		}
		out := outOf(r.siblings(t), ws)
		if !serving || len(out)+1 <= maxOut {
			err := t.router.Remove(ctx, worker)
			hold.Release()
			if err != nil {
				return st.fail(fmt.Errorf("remove %s from router %s: %w; nothing was stopped", worker, rc.URL, err))
			}
			res.did.drained = true
			break
		}
		hold.Release()
		if !said {
			said = true
			st.progress("waiting: %s %s out of the router already (rollout.max_unavailable %d)", strings.Join(out, ", "), isAre(len(out)), maxOut)
		}
		if time.Since(t0) >= r.cfg.Rollout.UnavailableWait {
			return st.fail(&UnavailableError{Service: t.name, Group: t.cfg.Replica.Group, Out: out, Max: maxOut, Waited: time.Since(t0)})
		}
		if err := sleepCtx(ctx, r.routerPoll()); err != nil {
			return st.fail(err)
		}
	}
	if !serving {
		st.done("out of the router (its engine did not serve: no request to wait for)")
		return nil
	}
	n, err := r.waitIdle(ctx, t, st)
	if err != nil {
		return st.fail(err)
	}
	st.done("out of the router; %s", n)
	return nil
}

// routerPoll is the interval of the drain's waits on a router: the
// runbook's poll, at least 50 ms.
func (r *Runbook) routerPoll() time.Duration {
	return max(r.cfg.Poll, 50*time.Millisecond)
}

// waitIdle waits until t's engine holds no request (running or waiting) on
// two reads in a row, up to Rollout.DrainTimeout, and says how it ended.
// Past the timeout, or when the engine does not say, it warns and returns
// with no error: the stop goes on.
func (r *Runbook) waitIdle(ctx context.Context, t *target, st *step) (string, error) {
	t0 := time.Now()
	lastSaid := time.Now()
	zeros := 0
	last := -1
	for {
		l, err := r.engineLoad(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			st.warn("the engine does not say how many requests it holds (%v): stopping without waiting for them", err)
			return "in-flight requests unknown", nil
		}
		last = l.InFlight()
		if last == 0 {
			zeros++
			if zeros >= 2 {
				return fmt.Sprintf("no request in flight after %s (%s)", time.Since(t0).Round(time.Millisecond), l.Source), nil
			}
		} else {
			zeros = 0
		}
		if time.Since(t0) >= r.cfg.Rollout.DrainTimeout {
			st.warn("%d requests still in flight after %s (rollout.drain_timeout): stopping anyway; those requests fail", last, r.cfg.Rollout.DrainTimeout)
			return fmt.Sprintf("%d requests cut at the drain timeout", last), nil
		}
		if time.Since(lastSaid) >= r.cfg.ProgressEvery {
			lastSaid = time.Now()
			st.progress("%d requests in flight after %s", last, time.Since(t0).Round(time.Second))
		}
		if err := sleepCtx(ctx, r.routerPoll()); err != nil {
			return "", err
		}
	}
}

// engineLoad reads the requests t's engine holds: SGLang's /get_load (or,
// where it has none, its gauges on /metrics), vLLM's gauges on /metrics.
func (r *Runbook) engineLoad(ctx context.Context, t *target) (engine.Load, error) {
	if t.cfg.Engine == unit.VLLM {
		return t.eng.VLLMLoad(ctx)
	}
	l, err := t.eng.SGLangLoad(ctx)
	if err == nil {
		return l, nil
	}
	m, merr := t.eng.Metrics(ctx)
	if merr != nil {
		return engine.Load{}, err
	}
	run, ok1 := m.Value("sglang:num_running_reqs")
	wait, ok2 := m.Value("sglang:num_queue_reqs")
	if !ok1 || !ok2 {
		return engine.Load{}, err
	}
	return engine.Load{Running: int(run), Waiting: int(wait), Source: "/metrics"}, nil
}

// rejoinTimeout bounds putting a replica back (its warm-up request and the
// router's Add), which runs even when the job's context has ended.
const rejoinTimeout = time.Minute

// rejoins reports whether leave puts t back in its router: it serves, and
// this job took it out, or started it when it was not serving (a replica a
// person took out while it served stays out).
func rejoins(t *target, d did) bool {
	return routerOf(t.cfg) != nil && (d.drained || (d.starts > 0 && !d.keptOut))
}

// rejoin puts t, serving, back in its router once it served a warm-up
// request straight to it. It returns false, having warned why, when it
// stays out.
func (r *Runbook) rejoin(ctx context.Context, t *target, res *Result) bool {
	rep := res.did.rep
	if rep == nil {
		rep = Discard
	}
	rc := t.cfg.Replica.Router
	worker := workerURL(t)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rejoinTimeout)
	defer cancel()
	st := begin(rep, StepRejoin, "warm-up request to %s, then back in router %s", t.cfg.URL, rc.URL)
	if t.router == nil {
		st.fail(fmt.Errorf("router of %s: %v; %s stays out of it", t.cfg.Replica.Group, t.routerErr, t.name))
		return false
	}
	n, err := t.eng.WarmUp(ctx, 8)
	if err != nil {
		st.fail(fmt.Errorf("warm-up request: %w; %s stays out of the router", err, t.name))
		return false
	}
	if err := t.router.Add(ctx, worker); err != nil {
		st.fail(fmt.Errorf("add %s to router %s: %w; %s serves but stays out of the router", worker, rc.URL, err, t.name))
		return false
	}
	ws, err := t.router.Workers(ctx)
	if err == nil && !listed(ws, worker) {
		st.fail(fmt.Errorf("router %s took %s but does not list it", rc.URL, worker))
		return false
	}
	res.did.drained = false
	st.done("served a warm-up request (%d tokens); back among the router's workers", n)
	return true
}

// wouldStop and wouldRejoin are a dry run's words for the drain and the
// rejoin around a stop of t: its router, when it has one, is named.
func wouldStop(t *target) string {
	if rp := t.cfg.Replica; rp != nil && rp.Router != nil {
		return "take " + t.name + " out of router " + rp.Router.URL + " and wait for its requests, stop " + t.cfg.Unit
	}
	return "stop " + t.cfg.Unit
}

func wouldRejoin(t *target) string {
	if rp := t.cfg.Replica; rp != nil && rp.Router != nil {
		return ", send it a warm-up request and put it back in the router"
	}
	return ""
}
