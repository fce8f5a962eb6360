package serve

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/opsbot/opsbot/auth"
	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/benchstat"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// BenchmarkAckMetrics is bot's ack benchmark (a request until its job is
// recorded, queued and acknowledged) without and with the metrics
// observing the engine and counting the requests: the cost metrics add to
// the job path. It reports p50 and p99 ack latency in milliseconds.
func BenchmarkAckMetrics(b *testing.B) {
	for _, on := range []bool{false, true} {
		for _, n := range []int{1, 100} {
			b.Run(fmt.Sprintf("metrics=%v/burst=%d", on, n), func(b *testing.B) { benchAck(b, n, on) })
		}
	}
}

type waitBackend chan struct{}

func (w waitBackend) Run(ctx context.Context, _ ops.JobHold, _ commands.Job, _ ops.Reporter) (*ops.Result, error) {
	select {
	case <-w:
	case <-ctx.Done():
	}
	return &ops.Result{}, nil
}

func benchAck(b *testing.B, burst int, metrics bool) {
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
	au, err := auth.New("none", users)
	if err != nil {
		b.Fatal(err)
	}
	release := make(waitBackend)
	opts := jobs.EngineOptions{Store: st, Backend: release, Logger: slog.New(slog.DiscardHandler)}
	var m *Metrics
	if metrics {
		m = NewMetrics(BuildInfo("", ""), nil)
		opts.Observer = m
	}
	eng := jobs.NewEngine(opts)
	var services []commands.ServiceRef
	for i := range 100 {
		services = append(services, commands.ServiceRef{Name: fmt.Sprintf("svc%d", i), Host: fmt.Sprintf("gpu%d", i)})
	}
	var in bot.Inbound = bot.NewDispatcher(bot.DispatcherOptions{Store: st, Engine: eng, Auth: au,
		Commands: commands.Options{Services: services}, Logger: slog.New(slog.DiscardHandler)})
	if metrics {
		in = m.Inbound(in)
	}
	reqs := make([]bot.Request, burst)
	for i := range reqs {
		reqs[i] = bot.Request{Platform: "slack", User: fmt.Sprintf("U%03d", i%100), Room: "C1",
			Text: fmt.Sprintf("/mtp steps %d svc%d", 1+i%16, i%100)}
	}
	b.ResetTimer()
	all := benchstat.Burst(b, burst, func(i int) {
		req := reqs[i]
		if r := in.Handle(ctx, req); r.Outcome != bot.Queued {
			b.Errorf("request %d: %s %s", i, r.Outcome, r.Text)
		}
	})
	b.StopTimer()
	close(release)
	eng.Close()
	benchstat.Report(b, all)
}
