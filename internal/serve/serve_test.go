package serve

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/store"
)

// exercised returns metrics that have seen a job of each kind, so that every
// family has samples.
func exercised(t *testing.T) *Metrics {
	t.Helper()
	m := NewMetrics(BuildInfo("v1.2.3", "abc"), func() []remote.HostState {
		return []remote.HostState{{Name: "gpu1", Connected: true}, {Name: "pve", DialErrors: 2}}
	})
	j := store.Job{ID: 1, Command: "mtp steps 10 qwen", Service: "qwen", ScheduleID: 7}
	m.JobQueued(j, "mtp steps")
	m.JobStarted(j, "mtp steps", 1500*time.Millisecond)
	m.StepEnded(j, "write unit", ops.StepDone, 40*time.Millisecond)
	m.JobEnded(j, "mtp steps", store.Succeeded, 42*time.Second, &ops.Result{
		Spec:  &ops.Spec{Steps: 10},
		Bench: &ops.BenchResult{OutputTokS: 280, PerStreamTokS: 280, AcceptLen: 3.2, AcceptRate: 0.22},
	})
	m.chatErrs.WithLabelValues("slack").Inc()
	m.rejected.WithLabelValues("/slack/events", "too_slow").Inc()
	m.rejected.WithLabelValues("*", "too_many_connections").Inc()
	st := store.Stats{Driver: "postgres", Statements: 10, Sum: 30 * time.Millisecond, Errors: 2, InUse: 3, MaxConns: 8}
	for i := range store.StatementBuckets {
		st.Buckets = append(st.Buckets, min(10, int64(i)))
	}
	m.ExportStoreStats(func() (store.Stats, bool) { return st, true })
	m.ExportLeases([]string{"scheduler", "watchdog"}, func(key string) (bool, bool) { return key == "scheduler", true })
	return m
}

// The metrics follow Prometheus's naming conventions: client_golang's linter
// finds nothing, and neither does `promtool check metrics` where it is
// installed (CI installs it and sets OPSBOT_REQUIRE_PROMTOOL=1).
func TestMetricsLint(t *testing.T) {
	m := exercised(t)
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	h, err := Handler(Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`opsbot_jobs_total{command="mtp steps",outcome="succeeded"} 1`,
		`opsbot_bench_output_tokens_per_second{service="qwen",steps="10"} 280`,
		`opsbot_bench_acceptance_ratio{service="qwen",steps="10"} 0.22`,
		`opsbot_ssh_connected{host="gpu1"} 1`,
		`opsbot_ssh_dial_errors_total{host="pve"} 2`,
		`opsbot_chat_api_errors_total{platform="slack"} 1`,
		`opsbot_schedule_last_success_timestamp_seconds{schedule="7"}`,
		`opsbot_build_info{goversion=`,
		`opsbot_jobs_running 0`,
		`opsbot_store_statement_duration_seconds_bucket{driver="postgres",le="0.001"} 1`,
		`opsbot_store_statement_duration_seconds_count{driver="postgres"} 10`,
		`opsbot_store_errors_total{driver="postgres"} 2`,
		`opsbot_store_connections_in_use{driver="postgres"} 3`,
		`opsbot_store_connections_max{driver="postgres"} 8`,
		`opsbot_lease_held{lease="scheduler"} 1`,
		`opsbot_lease_held{lease="watchdog"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OPSBOT_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found and OPSBOT_REQUIRE_PROMTOOL=1")
		}
		t.Skip("promtool not installed (Debian package prometheus); linted with client_golang only")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// /healthz answers while the process lives; /readyz answers 503 with the
// reason until Ready returns nil; adapters' routes are mounted, and two
// adapters claiming one route are an error.
func TestHealthAndReadiness(t *testing.T) {
	var notReady error = errors.New("slack: connecting to Slack")
	h, err := Handler(Options{
		Ready:  func(context.Context) error { return notReady },
		Routes: map[string]http.Handler{"POST /slack/events": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "connecting to Slack") {
		t.Errorf("/readyz while not ready: %d %q", code, body)
	}
	notReady = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
	resp, err := http.Post(srv.URL+"/slack/events", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("POST /slack/events: %d", resp.StatusCode)
	}
	_, err = Handler(Options{Routes: map[string]http.Handler{"GET /healthz": http.NotFoundHandler()}})
	if err == nil {
		t.Error("a route clashing with /healthz was mounted")
	}
}

// A benchmark figure that was not measured is no sample (absent: unknown),
// never 0: a later run that measured no acceptance removes the series.
func TestMetricsLeaveOutUnknownFigures(t *testing.T) {
	t.Parallel()
	m := exercised(t)
	j := store.Job{ID: 2, Command: "bench qwen", Service: "qwen"}
	m.JobQueued(j, "bench")
	m.JobStarted(j, "bench", 0)
	m.JobEnded(j, "bench", store.Succeeded, time.Second, &ops.Result{Spec: &ops.Spec{Steps: 10},
		Bench: &ops.BenchResult{OutputTokS: 290, PerStreamTokS: 290, AcceptLen: math.NaN(), AcceptRate: math.NaN(), RequestsOK: 4}})
	out, err := testutil.GatherAndCount(m.Registry(), "opsbot_bench_accept_length", "opsbot_bench_acceptance_ratio")
	if err != nil || out != 0 {
		t.Errorf("%d accept samples (%v), want none for a run that measured none", out, err)
	}
	if n, _ := testutil.GatherAndCount(m.Registry(), "opsbot_bench_output_tokens_per_second"); n != 1 {
		t.Errorf("%d output samples, want 1", n)
	}
}
