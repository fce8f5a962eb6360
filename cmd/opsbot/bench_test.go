package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	labengine "github.com/opsbot/opsbot/lab/engine"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/store"
)

// labServer serves the lab's engine (SGLang flavour, steps 3) on loopback.
func labServer(t *testing.T) string {
	t.Helper()
	s, err := labengine.ParseArgv([]string{"python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
		"--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
		"--speculative-num-draft-tokens", "4", "--enable-metrics"})
	if err != nil {
		t.Fatal(err)
	}
	if s, _, err = labengine.Check(s); err != nil {
		t.Fatal(err)
	}
	eng := labengine.New(s, labengine.Options{Physics: labengine.DefaultPhysics()})
	t.Cleanup(eng.Close)
	eng.SetReady(true)
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestBenchStandaloneStoresResult(t *testing.T) {
	t.Parallel()
	url := labServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "opsbot.yaml")
	text := `store: {path: opsbot.db}
ssh: {key_file: id, known_hosts: known_hosts}
hosts: {gpu1: {addr: "127.0.0.1:22", user: root}}
services: {qwen: {host: gpu1, unit: sglang-qwen.service, url: "` + url + `"}}
`
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"bench", "--config", cfg, "--service", "qwen", "--prompts", "4", "--concurrency", "2",
		"--in", "16", "--out", "200", "--json"}, strings.NewReader(""), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var res struct {
		OutputTokens int     `json:"output_tokens"`
		OutputTokS   float64 `json:"output_tok_s"`
		AcceptLen    float64 `json:"accept_len"`
		AcceptSource string  `json:"accept_source"`
		OverWindow   bool    `json:"accept_over_window"`
		RequestsOK   int     `json:"requests_ok"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.OutputTokens != 800 || res.RequestsOK != 4 || res.OutputTokS <= 0 || res.AcceptLen < 1 ||
		res.AcceptSource != bench.SourceSGLangFlush || !res.OverWindow {
		t.Fatalf("result %+v\nstderr %s", res, errb.String())
	}
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hist, err := st.BenchHistory(ctx, "qwen", 10)
	if err != nil || len(hist) != 1 || hist[0].Settings != "steps=3,topk=1,draft=4" || hist[0].OutputTokS != res.OutputTokS {
		t.Fatalf("stored %+v err %v", hist, err)
	}
}

// A run in which every request failed measured nothing: `opsbot bench
// --service` prints its table with "—" where it measured nothing (never
// 0.00), exits 1 and stores no result (history keeps measured runs only).
// The lab's engine refuses every request here: the outputs asked for do not
// fit its context length.
func TestBenchStandaloneStoresNothingWhenEveryRequestFailed(t *testing.T) {
	t.Parallel()
	url := labServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "opsbot.yaml")
	text := `store: {path: opsbot.db}
ssh: {key_file: id, known_hosts: known_hosts}
hosts: {gpu1: {addr: "127.0.0.1:22", user: root}}
services: {qwen: {host: gpu1, unit: sglang-qwen.service, url: "` + url + `"}}
`
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"bench", "--config", cfg, "--service", "qwen", "--prompts", "4", "--concurrency", "2",
		"--in", "16", "--out", "100000"}, strings.NewReader(""), &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, errb.String())
	}
	for _, want := range []string{"Successful requests:                     0", "Median TTFT (ms):                        —",
		"Output token throughput (tok/s):         —"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "TTFT (ms):                        0.00") || !strings.Contains(errb.String(), "result not stored: no request succeeded") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if hist, err := st.BenchHistory(ctx, "qwen", 10); err != nil || len(hist) != 0 {
		t.Fatalf("stored %+v err %v, want nothing", hist, err)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench"},
		{"bench", "--url", "gpu1:30000"},
		{"bench", "--url", "http://127.0.0.1:1", "--prompts", "0"},
		{"bench", "--url", "http://127.0.0.1:1", "--bogus"},
		{"bench", "--service", "qwen"},
		{"bench", "--url", "http://127.0.0.1:1", "--engine", "tgi"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, errb.String())
		}
	}
}
