package slack

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkAck200: 200 signed slash commands sent at once over HTTP on
// loopback, answered by the real dispatcher: `mtp steps N` (a job row
// committed before the ack, then the job's root message posted) and `help
// mtp` (answered at once); reports the ack time's p50 and p99 as seen by the
// sender and in the adapter's handler; and the same one request at a time.
// Figures only: nothing is asserted about time.
//
//	go test -run XXX -bench Ack200 ./bot/slack
func BenchmarkAck200(b *testing.B) {
	b.Run("mtp", func(b *testing.B) { benchAck(b, "/mtp", 200) })
	b.Run("help", func(b *testing.B) { benchAck(b, "/opsbot", 200) })
	b.Run("mtp-one-at-a-time", func(b *testing.B) { benchAck(b, "/mtp", 1) })
}

func benchAck(b *testing.B, benchCmd string, n int) {
	release := make(chan struct{})
	defer close(release)
	r := newRig(b, rigOptions{backend: quickBackend(release)})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}}
	// The adapter's own time: from the request in its handler to the ack
	// written, without the sender's and the HTTP server's queueing.
	var hmu sync.Mutex
	var handler []time.Duration
	route := r.ad.Routes()["POST "+EventsPath]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		t0 := time.Now()
		route.ServeHTTP(w, req)
		hmu.Lock()
		handler = append(handler, time.Since(t0))
		hmu.Unlock()
	}))
	defer srv.Close()
	var all []time.Duration
	round := 0
	for b.Loop() {
		round++
		reqs := make([]*http.Request, n)
		for i := range reqs {
			form := slashForm(benchCmd, benchText(benchCmd, i), operatorID, opsChannel, r.responseURL("bench"))
			form.Set("trigger_id", strconv.Itoa(round)+"."+strconv.Itoa(i))
			d := r.sign(delivery{body: form.Encode()})
			req, err := http.NewRequest(http.MethodPost, srv.URL+EventsPath, strings.NewReader(d.body))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", d.contentType)
			req.Header.Set("X-Slack-Request-Timestamp", d.ts)
			req.Header.Set("X-Slack-Signature", d.sig)
			reqs[i] = req
		}
		lat := make([]time.Duration, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, n)
		for i, req := range reqs {
			wg.Go(func() {
				<-start
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				lat[i] = time.Since(t0)
				if resp.StatusCode != http.StatusOK {
					errs <- &url.Error{Op: "POST", URL: req.URL.String(), Err: http.ErrNotSupported}
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("slash command: %v", err)
		}
		all = append(all, lat...)
	}
	slices.Sort(all)
	slices.Sort(handler)
	p := func(d []time.Duration, q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(p(all, 0.50)), "ms-p50")
	b.ReportMetric(ms(p(all, 0.99)), "ms-p99")
	b.ReportMetric(ms(p(handler, 0.50)), "ms-handler-p50")
	b.ReportMetric(ms(p(handler, 0.99)), "ms-handler-p99")
	b.Logf("%d slash commands, %d at once: ack p50 %s, p99 %s, max %s (in the handler: p50 %s, p99 %s)", len(all), n,
		p(all, 0.50), p(all, 0.99), all[len(all)-1], p(handler, 0.50), p(handler, 0.99))
}

func benchText(benchCmd string, i int) string {
	if benchCmd == "/opsbot" {
		return "help mtp"
	}
	return "steps " + strconv.Itoa(1+i%16)
}
