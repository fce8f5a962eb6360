package loadgen_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/loadgen"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
)

func TestCountsSuccessesAndFailures(t *testing.T) {
	l := labtest.StartReplicas(t, 2, lab.Options{TimeScale: 1000})
	r := l.Router()
	for _, stream := range []bool{false, true} {
		g, err := loadgen.Start(context.Background(), loadgen.Options{URL: r.URL(), Concurrency: 2, MaxTokens: 4, Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, "20 requests served", func() bool { return g.Stats().OK >= 20 })
		s := g.Stop()
		if s.Failed != 0 || s.Sent != s.OK {
			t.Fatalf("stream %t: %v; want no failure", stream, s)
		}
	}

	// A listed worker that is gone: a third of the requests fail, and say why.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	r2, err := lab.StartRouter(lab.RouterOptions{Workers: append(r.Workers(), dead)})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	g, err := loadgen.Start(context.Background(), loadgen.Options{URL: r2.URL(), Concurrency: 1, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "30 requests", func() bool { return g.Stats().Sent >= 30 })
	s := g.Stop()
	// The request Stop abandoned may be one the router counted.
	if want := r2.Stats().Failures; s.Failed > want || s.Failed < want-1 || s.Failed < 9 {
		t.Fatalf("%v: the router counted %d failures; want the same, about a third", s, want)
	}
	if len(s.Errors) == 0 || !strings.Contains(s.Errors[0], "HTTP 502") {
		t.Fatalf("failures not quoted: %q", s.Errors)
	}
}

func TestRefusesABadURL(t *testing.T) {
	if _, err := loadgen.Start(context.Background(), loadgen.Options{URL: "127.0.0.1:1"}); err == nil {
		t.Fatal("no error for a URL without a scheme")
	}
}
