package matrix_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/internal/testkit"
)

// BenchmarkCommandToFirstReply sends 100 `!mtp show` one after another in
// the allowed room and measures, as the sender's client sees it, the time
// from sending the command to receiving the bot's first message answering
// it (the job's root status notice): Dendrite, the adapter, the dispatcher
// and the store on loopback. It reports p50 and p99 in ms, and the same
// between the two events' origin_server_ts (the homeserver's clock: the
// bot's share, without the sender's own sync).
//
//	go test -run XXX -bench CommandToFirstReply -benchtime 1x ./bot/matrix/
func BenchmarkCommandToFirstReply(b *testing.B) {
	e := newEnv(b)
	in := e.start(nil)
	testkit.WaitFor(b, 30*time.Second, "the adapter to sync", func() bool { return in.adapter.Ready() == nil })
	benchFirstReply(b, e, e.seen, e.room, func(text string) id.EventID { return send(b, e.alice, e.room, text) })
}

// benchFirstReply is BenchmarkCommandToFirstReply's loop: sendCmd sends a
// command to room, w is the sender's view of it.
func benchFirstReply(b *testing.B, e *env, w *watcher, room id.RoomID, sendCmd func(text string) id.EventID) {
	const n = 100
	var lat, srv []time.Duration
	for b.Loop() {
		lat, srv = lat[:0], srv[:0]
		for range n {
			start := time.Now()
			cmd := sendCmd("!mtp show")
			r := w.Wait(b, 30*time.Second, "the bot's answer", func(m msg) bool {
				return m.Sender == e.botU.ID && m.Room == room && m.Type == "m.room.message" && m.ReplyTo == cmd && m.RelType == ""
			})
			c := w.Wait(b, 10*time.Second, "the command event", func(m msg) bool { return m.ID == cmd })
			lat = append(lat, r.At.Sub(start))
			srv = append(srv, r.TS.Sub(c.TS))
			w.Wait(b, jobWait, "the final edit", func(m msg) bool {
				return m.Sender == e.botU.ID && m.RelType == "m.replace" && m.RelTo == r.ID && strings.Contains(m.NewBody, "— succeeded")
			})
		}
	}
	report := func(d []time.Duration, name string) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		b.ReportMetric(float64(d[n/2].Microseconds())/1000, name+"_p50_ms")
		b.ReportMetric(float64(d[n*99/100].Microseconds())/1000, name+"_p99_ms")
	}
	report(lat, "client")
	report(srv, "server")
}
