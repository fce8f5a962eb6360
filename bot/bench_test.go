package bot

import (
	"context"
	"fmt"
	"github.com/opsbot/opsbot/auth"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/benchstat"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// BenchmarkAck1000From100Users measures the time from a request to its job
// being recorded, queued and acknowledged, with 1,000 requests at once from
// 100 users (each iteration is one such burst). It reports the p50 and p99 ack
// latency in milliseconds. The goal is p99 under 5 ms.
func BenchmarkAck1000From100Users(b *testing.B) { benchAck(b, 1000) }

// BenchmarkAckBurst is the same measure for smaller bursts: a lone request and
// a hundred at once, the load a busy on-call room can actually produce.
func BenchmarkAckBurst(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("burst=%d", n), func(b *testing.B) { benchAck(b, n) })
	}
}

func benchAck(b *testing.B, burst int) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(b.TempDir(), "opsbot.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	users := map[string]string{}
	for i := range 100 {
		users[fmt.Sprintf("slack:U%03d", i)] = "operator"
	}
	auth, err := auth.New("none", users)
	if err != nil {
		b.Fatal(err)
	}
	release := make(chan struct{})
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &ops.Result{}, nil
	})
	eng := jobs.NewEngine(jobs.EngineOptions{Store: st, Backend: backend, Logger: slog.New(slog.DiscardHandler)})
	var services []commands.ServiceRef
	for i := range 100 {
		services = append(services, commands.ServiceRef{Name: fmt.Sprintf("svc%d", i), Host: fmt.Sprintf("gpu%d", i)})
	}
	d := NewDispatcher(DispatcherOptions{Store: st, Engine: eng, Auth: auth, Commands: commands.Options{Services: services}})
	reqs := make([]Request, burst)
	for i := range reqs {
		reqs[i] = Request{Platform: "slack", User: fmt.Sprintf("U%03d", i%100), Room: "C1",
			Text: fmt.Sprintf("/mtp steps %d svc%d", 1+i%16, i%100)}
	}
	b.ResetTimer()
	all := benchstat.Burst(b, burst, func(i int) {
		req := reqs[i]
		if r := d.Handle(ctx, req); r.Outcome != Queued {
			b.Errorf("request %d: %s %s", i, r.Outcome, r.Text)
		}
	})
	b.StopTimer()
	close(release)
	eng.Close()
	benchstat.Report(b, all)
}
