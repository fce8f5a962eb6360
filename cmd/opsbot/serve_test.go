package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// startServe runs this test binary as `opsbot ARGS...` (see TestMain) with
// the test adapter hosted as how says ("extra" or "slack"), and extra
// environment.
func startServe(t testing.TB, how string, env []string, args ...string) *opsbotProc {
	t.Helper()
	return spawn(t, context.Background(), append([]string{"OPSBOT_TEST_ADAPTER=" + how}, env...), args...)
}

// pollServe calls cond until it holds, failing the test after d, or as soon
// as p exits while cond does not hold.
func pollServe(t testing.TB, p *opsbotProc, d time.Duration, what string, cond func() bool) {
	t.Helper()
	exited := false
	held := testkit.Poll(d, func() bool {
		if cond() {
			return true
		}
		select {
		case <-p.done:
			exited = true
		default:
		}
		return exited
	})
	switch {
	case exited:
		t.Fatalf("opsbot exited (%v) before %s:\n%s", p.err, what, p.out.String())
	case !held:
		t.Fatalf("%s: not within %s:\n%s", what, d, p.out.String())
	}
}

var listenLine = regexp.MustCompile(`http listening"?[,\s]+"?addr"?[=:]"?(127\.0\.0\.1:[0-9]+)`)

// serveURL waits for the child to log its HTTP address (http.listen
// 127.0.0.1:0: the kernel picks the port) and returns its base URL.
func serveURL(t testing.TB, p *opsbotProc) string {
	t.Helper()
	var addr string
	pollServe(t, p, time.Minute, "listening", func() bool {
		m := listenLine.FindStringSubmatch(p.out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return "http://" + addr
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// command sends text as console user through the test adapter.
func command(t *testing.T, base, user, text string) testReply {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"user": user, "text": text})
	resp, err := http.Post(base+"/test/command", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r testReply
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /test/command %q: %s: %s", text, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// scrape parses /metrics with the Prometheus text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

// counter returns the value of family name's sample whose labels are all in want.
func counter(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	if m := sample(fams, name, want); m != nil {
		return m.GetCounter().GetValue()
	}
	return 0
}

// gauge returns the value of family name's sample whose labels are all in
// want, and whether there is one.
func gauge(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	if m := sample(fams, name, want); m != nil {
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// sample returns family name's sample whose labels are all in want (nil: none).
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if ok {
			return m
		}
	}
	return nil
}

func writeFile(t testing.TB, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// `opsbot serve --lab` with a config of store, http and auth only: the
// lab supplies the hosts; /healthz and /readyz answer 200, /metrics parses
// with the Prometheus text parser and counts a job run through a chat
// adapter (the test adapter), whose thread the adapter received; SIGTERM
// ends it with exit 0.
func TestServeLabHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, filepath.Join(dir, "opsbot.yaml"), `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
auth:
  default_role: none
  users: {"console:tester": operator}
`)
	p := startServe(t, "extra", nil, "serve", "--config", cfg, "--lab")
	base := serveURL(t, p)
	if code, body := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })

	r := command(t, base, "tester", "gpu status")
	if r.Outcome != "queued" || r.JobID == 0 {
		t.Fatalf("gpu status through the test adapter: %+v", r)
	}
	if r := command(t, base, "stranger", "gpu status"); r.Outcome != "refused" {
		t.Fatalf("a user without a role: %+v, want refused", r)
	}
	pollServe(t, p, time.Minute, "the job counted in /metrics", func() bool {
		return counter(scrape(t, base), "opsbot_jobs_total", map[string]string{"command": "gpu status", "outcome": "succeeded"}) == 1
	})
	fams := scrape(t, base)
	for _, name := range []string{"opsbot_build_info", "opsbot_job_duration_seconds",
		"opsbot_jobs_queued", "opsbot_lock_wait_seconds", "opsbot_ssh_connected", "opsbot_ssh_dial_errors_total",
		"opsbot_requests_total", "go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if got := counter(fams, "opsbot_requests_total", map[string]string{"platform": "console", "outcome": "refused"}); got != 1 {
		t.Errorf("opsbot_requests_total{outcome=refused} = %v, want 1", got)
	}
	_, posts := httpGet(t, base+"/test/posts")
	if !strings.Contains(posts, "gpu status") {
		t.Errorf("the adapter got no thread for the job: %s", posts)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}

// sigtermLab starts a lab whose engine loads for an hour and writes a
// config for it with an HTTP listener and a short shutdown grace. The lab
// runs in this process, not in serve's (--lab), so that the unit can be
// read after serve has exited.
func sigtermLab(t *testing.T, grace time.Duration) (l *lab.Lab, cfg string, st func() *store.Store) {
	t.Helper()
	ctx := context.Background()
	l, err := lab.Start(ctx, lab.Options{Faults: []lab.Fault{{Name: "slow-load", Duration: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	dir := t.TempDir()
	cfg, err = l.WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "http: {listen: \"127.0.0.1:0\"}\nlimits: {shutdown_grace: %s}\n", grace)
	f.Close()
	return l, cfg, func() *store.Store {
		s, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// unitOldOrNew fails unless qwen's unit is its text before the change or
// the text `mtp steps 10` writes, and says which.
func unitOldOrNew(t *testing.T, l *lab.Lab, before string) string {
	t.Helper()
	after, err := l.Host("gpu1").ReadFile("/etc/systemd/system/" + l.Topology().Services[0].Unit)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(strings.Replace(before, "--speculative-num-steps 3", "--speculative-num-steps 10", 1),
		"--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 11", 1)
	switch string(after) {
	case before:
		return "old"
	case want:
		return "new"
	}
	t.Fatalf("unit is neither the old nor the new text:\n%s", after)
	return ""
}

// jobsAfter runs `opsbot run 'jobs all'` as the next start and returns its output.
func jobsAfter(t *testing.T, cfg string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--config", cfg, "--json", "jobs all"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("next start: exit %d\n%s", code, errb.String())
	}
	return out.String()
}

// SIGTERM during `mtp steps 10` (the engine loads slowly, so the job waits
// until ready): opsbot refuses new commands with "opsbot is restarting",
// stops the job at a safe point and exits 0 within the shutdown grace; the
// unit is the old or the new text; the next start shows the job
// interrupted. A second SIGTERM, while the job is held inside the unit's
// write (a step a stop never cuts), exits at once with the same guarantee.
func TestServeSIGTERMMidJob(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	const grace = 3 * time.Second
	t.Run("one signal", func(t *testing.T) {
		l, cfg, openStore := sigtermLab(t, grace)
		before, err := l.Host("gpu1").ReadFile("/etc/systemd/system/" + l.Topology().Services[0].Unit)
		if err != nil {
			t.Fatal(err)
		}
		p := startServe(t, "extra", nil, "serve", "--config", cfg)
		base := serveURL(t, p)
		pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
		r := command(t, base, "tester", "mtp steps 10")
		if r.Outcome != "queued" {
			t.Fatalf("mtp steps 10: %+v", r)
		}
		st := openStore()
		pollServe(t, p, time.Minute, "the job waits until ready", func() bool { return reachedStep(st, r.JobID, "wait until ready") })
		st.Close()

		t0 := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		pollServe(t, p, 10*time.Second, "draining", func() bool {
			code, _ := httpGet(t, base+"/readyz")
			return code == 503
		})
		if r := command(t, base, "tester", "gpu status"); r.Outcome != "failed" || !strings.Contains(r.Text, "opsbot is restarting, try again in a minute") {
			t.Errorf("a command during the stop: %+v", r)
		}
		code := p.wait(t, 2*grace+10*time.Second)
		took := time.Since(t0)
		if code != 0 {
			t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
		}
		t.Logf("SIGTERM to exit: %s (grace %s)", took.Round(time.Millisecond), grace)
		if took > grace+2*time.Second {
			t.Errorf("exit took %s, more than the grace %s", took, grace)
		}
		which := unitOldOrNew(t, l, string(before))
		jobs := jobsAfter(t, cfg)
		if !strings.Contains(jobs, fmt.Sprintf("#%d `mtp steps 10 qwen` interrupted", r.JobID)) {
			t.Fatalf("jobs after the stop do not show #%d interrupted:\n%s", r.JobID, jobs)
		}
		t.Logf("after the stop the unit is the %s text", which)
	})
	t.Run("second signal", func(t *testing.T) {
		l, cfg, openStore := sigtermLab(t, grace)
		before, err := l.Host("gpu1").ReadFile("/etc/systemd/system/" + l.Topology().Services[0].Unit)
		if err != nil {
			t.Fatal(err)
		}
		hold := l.HoldUnitWrite()
		t.Cleanup(hold.Release)
		p := startServe(t, "extra", nil, "serve", "--config", cfg)
		base := serveURL(t, p)
		pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
		r := command(t, base, "tester", "mtp steps 10")
		if r.Outcome != "queued" {
			t.Fatalf("mtp steps 10: %+v", r)
		}
		pollServe(t, p, time.Minute, "the job inside the unit write", func() bool {
			select {
			case <-hold.Reached():
				return true
			default:
				return false
			}
		})
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// Past the grace, the job is inside the held write: the stop waits for it.
		pollServe(t, p, 2*grace+10*time.Second, "the stop waits for the unit write", func() bool {
			return strings.Contains(p.out.String(), "job stops once the step a stop must not cut ends")
		})
		if out := p.out.String(); !strings.Contains(out, "step=\"write unit\"") {
			t.Fatalf("the stop waits for another step than the unit write:\n%s", out)
		}
		t0 := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code := p.wait(t, 10*time.Second)
		t.Logf("second SIGTERM to exit: %s, exit %d", time.Since(t0).Round(time.Millisecond), code)
		if code == 0 {
			t.Errorf("a second signal exited 0, want non-zero (the job was not stopped cleanly)")
		}
		hold.Release() // the rename the process had sent goes ahead, as it may on a real host
		which := unitOldOrNew(t, l, string(before))
		st := openStore()
		defer st.Close()
		jobs := jobsAfter(t, cfg)
		if !strings.Contains(jobs, fmt.Sprintf("#%d `mtp steps 10 qwen` interrupted", r.JobID)) {
			t.Fatalf("jobs after the second signal do not show #%d interrupted:\n%s", r.JobID, jobs)
		}
		t.Logf("after the second signal the unit is the %s text", which)
	})
}

// serve's log (JSON, debug) has one line per job transition with the job,
// command, user and service, and never a secret of the config, whether
// written as a literal, ${ENV} or file: (the test adapter, built as the
// slack section's adapter, even logs the whole section it got). SIGHUP
// reloads the roles without a restart; a config that does not check is
// refused and the old one stays.
func TestServeLogsNoSecretsAndReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secrets := []string{"xoxb-literal-SECRET-1111", "env-SECRET-2222", "xapp-file-SECRET-3333"}
	writeFile(t, filepath.Join(dir, "app-token"), secrets[2]+"\n")
	base := `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
log: {format: json, level: debug}
slack: {enabled: true, bot_token: "` + secrets[0] + `", signing_secret: "${OPSBOT_TEST_SIGNING}", app_token: "file:app-token", channels: [C0OPS]}
auth:
  default_role: none
  users:
    "console:tester": operator
`
	cfg := writeFile(t, filepath.Join(dir, "opsbot.yaml"), base)
	p := startServe(t, "slack", []string{"OPSBOT_TEST_SIGNING=" + secrets[1]}, "serve", "--config", cfg, "--lab")
	url := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, url+"/readyz"); return code == 200 })

	r := command(t, url, "tester", "gpu status")
	if r.Outcome != "queued" {
		t.Fatalf("gpu status: %+v", r)
	}
	pollServe(t, p, time.Minute, "the job logged finished", func() bool {
		return strings.Contains(p.out.String(), `"msg":"job finished","job":`+fmt.Sprint(r.JobID))
	})
	for _, msg := range []string{"job queued", "job started", "job finished"} {
		line := regexp.MustCompile(`\{[^\n]*"msg":"` + msg + `"[^\n]*`).FindString(p.out.String())
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("no JSON line for %q: %v\n%s", msg, err, p.out.String())
		}
		for _, k := range []string{"job", "command", "user", "service"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("%q line lacks %s: %s", msg, k, line)
			}
		}
		if rec["user"] != "console:tester" || rec["command"] != "gpu status" {
			t.Errorf("%q line: %s", msg, line)
		}
	}

	if r := command(t, url, "newbie", "gpu status"); r.Outcome != "refused" {
		t.Fatalf("newbie before the reload: %+v", r)
	}
	writeFile(t, cfg, base+"    \"console:newbie\": viewer\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	pollServe(t, p, time.Minute, "config reloaded", func() bool { return strings.Contains(p.out.String(), `"msg":"config reloaded"`) })
	if r := command(t, url, "newbie", "gpu status"); r.Outcome != "queued" {
		t.Fatalf("newbie after the reload: %+v", r)
	}
	writeFile(t, cfg, base+"    \"console:newbie\": viewer\nbogus: 1\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	pollServe(t, p, time.Minute, "reload refused", func() bool { return strings.Contains(p.out.String(), "config reload refused") })
	if !strings.Contains(p.out.String(), "bogus: unknown key") {
		t.Errorf("the refusal does not say why:\n%s", p.out.String())
	}
	if r := command(t, url, "newbie", "gpu status"); r.Outcome != "queued" {
		t.Fatalf("newbie after a refused reload (the old config stays): %+v", r)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.out.String())
	}
	out := p.out.String()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the log shows the secret %q", s)
		}
	}
	if !strings.Contains(out, `"test adapter built"`) {
		t.Errorf("the test adapter was not built from the slack section:\n%s", out)
	}
}

// `opsbot store backup DEST` copies the store while `opsbot serve` (here
// without hosts: a chat-only config) holds it open; the copy opens as a
// store, and an existing DEST is never overwritten.
func TestStoreBackupWhileServing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, filepath.Join(dir, "opsbot.yaml"), `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
auth: {users: {"console:tester": viewer}}
`)
	p := startServe(t, "extra", nil, "serve", "--config", cfg)
	url := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200", func() bool { code, _ := httpGet(t, url+"/readyz"); return code == 200 })
	if r := command(t, url, "tester", "jobs"); r.Outcome != "answered" {
		t.Fatalf("jobs: %+v", r)
	}
	dest := filepath.Join(dir, "backup.db")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"store", "backup", dest, "--config", cfg}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("store backup: exit %d\n%s", code, errb.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	st, err := store.Open(context.Background(), dest)
	if err != nil {
		t.Fatalf("the backup does not open as a store: %v", err)
	}
	st.Close()
	errb.Reset()
	if code := run(context.Background(), []string{"store", "backup", "--config", cfg, dest}, strings.NewReader(""), &out, &errb); code != 1 {
		t.Fatalf("a second backup onto the first: exit %d, want 1\n%s", code, errb.String())
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.out.String())
	}
}
