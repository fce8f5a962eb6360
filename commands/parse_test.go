package commands

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops"
)

var (
	optsOne = Options{
		Services: []ServiceRef{{Name: "qwen", Host: "gpu1"}},
		Hosts:    []string{"gpu1", "pve"},
	}
	optsMulti = Options{
		Services: []ServiceRef{{Name: "qwen", Host: "gpu1"}, {Name: "llama", Host: "gpu2"}, {Name: "mini", Host: "gpu2"}},
		Hosts:    []string{"gpu1", "gpu2", "pve"},
	}
	optsDefault = Options{Services: optsMulti.Services, Hosts: optsMulti.Hosts, DefaultService: "llama"}
	optsNone    = Options{}
	optsBig     = Options{MaxSteps: 32, Services: optsOne.Services, Hosts: optsOne.Hosts}
)

// Where the test commands act.
var (
	onQwen  = On{Service: "qwen", Host: "gpu1"}
	onLlama = On{Service: "llama", Host: "gpu2"}
	onMini  = On{Service: "mini", Host: "gpu2"}
)

func TestParseGood(t *testing.T) {
	tests := []struct {
		opts Options
		in   string
		text string // the canonical text, Text(want)
		want Command
	}{
		// mtp
		{optsOne, "mtp steps 10", "mtp steps 10 qwen", &MTPSteps{On: onQwen, Steps: 10}},
		{optsOne, "/mtp steps 10", "mtp steps 10 qwen", &MTPSteps{On: onQwen, Steps: 10}},
		{optsOne, "!mtp steps 10", "mtp steps 10 qwen", &MTPSteps{On: onQwen, Steps: 10}},
		{optsOne, "  MTP Steps 1 QWEN  ", "mtp steps 1 qwen", &MTPSteps{On: onQwen, Steps: 1}},
		{optsOne, "mtp steps 016", "mtp steps 16 qwen", &MTPSteps{On: onQwen, Steps: 16}},
		{optsOne, "mtp steps 0", "mtp steps 0 qwen", &MTPSteps{On: onQwen, Steps: 0}},
		{optsOne, "mtp off --dry-run", "mtp off qwen --dry-run", &MTPOff{On: onQwen, DryRun: true}},
		{optsMulti, "mtp steps 4 llama --dry-run", "mtp steps 4 llama --dry-run", &MTPSteps{On: onLlama, Steps: 4, DryRun: true}},
		{optsMulti, "mtp steps --dry-run 4 llama", "mtp steps 4 llama --dry-run", &MTPSteps{On: onLlama, Steps: 4, DryRun: true}},
		{optsOne, "mtp steps 10 \u2014dry-run", "mtp steps 10 qwen --dry-run", &MTPSteps{On: onQwen, Steps: 10, DryRun: true}},
		{optsOne, "mtp steps 10 \u2013dry-run", "mtp steps 10 qwen --dry-run", &MTPSteps{On: onQwen, Steps: 10, DryRun: true}},
		{optsOne, "mtp steps 10 -\u2014dry-run", "mtp steps 10 qwen --dry-run", &MTPSteps{On: onQwen, Steps: 10, DryRun: true}},
		{optsOne, "mtp\u00a0steps\u200b 3\u202fqwen\ufeff", "mtp steps 3 qwen", &MTPSteps{On: onQwen, Steps: 3}},
		{optsOne, "mtp\tsteps\t3", "mtp steps 3 qwen", &MTPSteps{On: onQwen, Steps: 3}},
		{optsBig, "mtp steps 32", "mtp steps 32 qwen", &MTPSteps{On: onQwen, Steps: 32}},
		{optsOne, "mtp show", "mtp show qwen", &MTPShow{On: onQwen}},
		{optsMulti, "mtp show mini", "mtp show mini", &MTPShow{On: onMini}},
		// gpu
		{optsOne, "gpu status", "gpu status gpu1", &GPUStatus{On: On{Host: "gpu1"}}},
		{optsMulti, "gpu status", "gpu status", &GPUStatus{}},
		{optsMulti, "gpu status gpu2", "gpu status gpu2", &GPUStatus{On: On{Host: "gpu2"}}},
		// default_service: a command naming no service means it; naming one still wins
		{optsDefault, "mtp steps 10", "mtp steps 10 llama", &MTPSteps{On: onLlama, Steps: 10}},
		{optsDefault, "mtp steps 10 qwen", "mtp steps 10 qwen", &MTPSteps{On: onQwen, Steps: 10}},
		{optsDefault, "gpu recover --force", "gpu recover llama --force", &GPURecover{On: onLlama, Force: true}},
		{optsDefault, "gpu status", "gpu status", &GPUStatus{}},
		{optsMulti, "gpu status pve", "gpu status pve", &GPUStatus{On: On{Host: "pve"}}},
		{optsMulti, "gpu status llama", "gpu status gpu2", &GPUStatus{On: On{Host: "gpu2"}}},
		{Options{Hosts: []string{"box"}}, "gpu status", "gpu status box", &GPUStatus{On: On{Host: "box"}}},
		{optsOne, "gpu recover", "gpu recover qwen", &GPURecover{On: onQwen}},
		{optsOne, "gpu recover gpu1 --no-start", "gpu recover qwen --no-start", &GPURecover{On: onQwen, NoStart: true}},
		{optsMulti, "gpu recover llama --force --no-start --dry-run", "gpu recover llama --no-start --force --dry-run", &GPURecover{On: onLlama, NoStart: true, Force: true, DryRun: true}},
		{optsMulti, "gpu recover GPU1", "gpu recover qwen", &GPURecover{On: onQwen}},
		// svc
		{optsOne, "svc start", "svc start qwen", &SvcStart{On: onQwen}},
		{optsOne, "svc stop --dry-run", "svc stop qwen --dry-run", &SvcStop{On: onQwen, DryRun: true}},
		{optsMulti, "svc restart mini", "svc restart mini", &SvcRestart{On: onMini}},
		{optsOne, "svc status", "svc status qwen", &SvcStatus{On: onQwen}},
		{optsOne, "svc logs", "svc logs qwen lines=50", &SvcLogs{On: onQwen, Lines: 50}},
		{optsOne, "svc logs lines=1000 qwen", "svc logs qwen lines=1000", &SvcLogs{On: onQwen, Lines: 1000}},
		{optsOne, "svc logs LINES=7", "svc logs qwen lines=7", &SvcLogs{On: onQwen, Lines: 7}},
		// bench
		{optsOne, "bench", "bench qwen", &Bench{On: onQwen}},
		{optsOne, "bench out=256 in=1024 concurrency=16 prompts=200 --dry-run", "bench qwen prompts=200 concurrency=16 in=1024 out=256 --dry-run",
			&Bench{On: onQwen, DryRun: true, Params: ops.BenchParams{Prompts: 200, Concurrency: 16, InputLen: 1024, OutputLen: 256}}},
		{optsOne, "bench prompts=10000 concurrency=1024 in=131072 out=32768", "bench qwen prompts=10000 concurrency=1024 in=131072 out=32768",
			&Bench{On: onQwen, Params: ops.BenchParams{Prompts: 10000, Concurrency: 1024, InputLen: 131072, OutputLen: 32768}}},
		// sweep
		{optsOne, "sweep steps 1..5,10", "sweep qwen steps 1..5,10", &Sweep{On: onQwen, Steps: []int{1, 2, 3, 4, 5, 10}}},
		{optsOne, "sweep qwen steps 1,2,3", "sweep qwen steps 1..3", &Sweep{On: onQwen, Steps: []int{1, 2, 3}}},
		{optsOne, "sweep steps 1, 2, 4 ,8", "sweep qwen steps 1,2,4,8", &Sweep{On: onQwen, Steps: []int{1, 2, 4, 8}}},
		{optsOne, "sweep steps 10,1..3 --dry-run", "sweep qwen steps 10,1..3 --dry-run", &Sweep{On: onQwen, DryRun: true, Steps: []int{10, 1, 2, 3}}},
		{optsOne, "sweep steps 2\u20263", "sweep qwen steps 2,3", &Sweep{On: onQwen, Steps: []int{2, 3}}},
		{optsOne, "sweep steps 7", "sweep qwen steps 7", &Sweep{On: onQwen, Steps: []int{7}}},
		{optsBig, "sweep steps 1..32", "sweep qwen steps 1..32", &Sweep{On: onQwen, Steps: seq(1, 32)}},
		{optsMulti, "sweep llama steps 1 .. 3", "sweep llama steps 1..3", &Sweep{On: onLlama, Steps: []int{1, 2, 3}}},
		{optsOne, "sweep steps 2..4 at 1,8,32", "sweep qwen steps 2..4 at 1,8,32", &Sweep{On: onQwen, Steps: []int{2, 3, 4}, At: []int{1, 8, 32}}},
		{optsMulti, "sweep llama steps 1,2 at 4 --apply-best", "sweep llama steps 1,2 at 4 --apply-best", &Sweep{On: onLlama, Steps: []int{1, 2}, At: []int{4}, ApplyBest: true}},
		{optsOne, "sweep steps 1..3 AT 1 , 2 --dry-run --apply-best", "sweep qwen steps 1..3 at 1,2 --apply-best --dry-run", &Sweep{On: onQwen, Steps: []int{1, 2, 3}, At: []int{1, 2}, DryRun: true, ApplyBest: true}},
		{optsOne, "sweep steps 2..4 topk 1,4 draft 8,16 at 1,8", "sweep qwen steps 2..4 topk 1,4 draft 8,16 at 1,8", &Sweep{On: onQwen, Steps: []int{2, 3, 4}, TopK: []int{1, 4}, Draft: []int{8, 16}, At: []int{1, 8}}},
		{optsOne, "sweep steps 3 topk 2..4", "sweep qwen steps 3 topk 2..4", &Sweep{On: onQwen, Steps: []int{3}, TopK: []int{2, 3, 4}}},
		{optsOne, "sweep at 1,8 steps 2..4 draft 5 topk 2 --apply-best", "sweep qwen steps 2..4 topk 2 draft 5 at 1,8 --apply-best", &Sweep{On: onQwen, Steps: []int{2, 3, 4}, TopK: []int{2}, Draft: []int{5}, At: []int{1, 8}, ApplyBest: true}},
		// mtp tune
		{optsMulti, "mtp tune at 8 llama 2..12", "mtp tune llama 2..12 at 8", &MTPTune{On: onLlama, From: 2, To: 12, Concurrency: 8}},
		{optsOne, "mtp tune", "mtp tune qwen 1..16", &MTPTune{On: onQwen, From: 1, To: 16}},
		{optsOne, "mtp tune 2..12 at 8", "mtp tune qwen 2..12 at 8", &MTPTune{On: onQwen, From: 2, To: 12, Concurrency: 8}},
		{optsOne, "mtp per-load qwen 1:10 8:7,32:1 64:1/0", "mtp per-load qwen 1:10 8:7 32:1 64:1/0", &MTPPerLoad{On: onQwen,
			Table: []LoadSteps{{1, []int{10}}, {8, []int{7}}, {32, []int{1}}, {64, []int{1, 0}}}}},
		{optsOne, "mtp per-load 1:3 64:0 --dry-run", "mtp per-load qwen 1:3 64:0 --dry-run", &MTPPerLoad{On: onQwen,
			Table: []LoadSteps{{1, []int{3}}, {64, []int{0}}}, DryRun: true}},
		{optsOne, "mtp tune qwen per-load at 1,8,32,64", "mtp tune qwen per-load 1..16 at 1,8,32,64", &MTPTune{On: onQwen, From: 1, To: 16, PerLoad: true, At: []int{1, 8, 32, 64}}},
		{optsOne, "mtp tune compare qwen per-load 1..12 at 1,8,32,64", "mtp tune qwen per-load 1..12 at 1,8,32,64 compare", &MTPTune{On: onQwen, From: 1, To: 12, PerLoad: true, Compare: true, At: []int{1, 8, 32, 64}}},
		{optsOne, "mtp tune 0..4 at 8", "mtp tune qwen 0..4 at 8", &MTPTune{On: onQwen, From: 0, To: 4, Concurrency: 8}},
		{optsOne, "sweep steps 0..3", "sweep qwen steps 0..3", &Sweep{On: onQwen, Steps: []int{0, 1, 2, 3}}},
		{optsOne, "mtp per-load 1:0/3 64:0", "mtp per-load qwen 1:0/3 64:0", &MTPPerLoad{On: onQwen, Table: []LoadSteps{{Concurrency: 1, Steps: []int{0, 3}}, {Concurrency: 64, Steps: []int{0}}}}},
		{optsMulti, "mtp tune at 64,1 per-load llama 2..12", "mtp tune llama per-load 2..12 at 1,64", &MTPTune{On: onLlama, From: 2, To: 12, PerLoad: true, At: []int{1, 64}}},
		{optsMulti, "mtp tune llama at 4 --dry-run", "mtp tune llama 1..16 at 4 --dry-run", &MTPTune{On: onLlama, From: 1, To: 16, Concurrency: 4, DryRun: true}},
		{optsBig, "mtp tune qwen 1 .. 32", "mtp tune qwen 1..32", &MTPTune{On: onQwen, From: 1, To: 32}},
		// schedule
		{optsOne, `schedule add "0 3 * * *" sweep qwen steps 1..5`, `schedule add "0 3 * * *" sweep qwen steps 1..5`,
			&ScheduleAdd{Cron: "0 3 * * *", Sub: &Sweep{On: onQwen, Steps: []int{1, 2, 3, 4, 5}}}},
		{optsOne, "schedule add \u201c0  3 * * *\u201d mtp steps 4", `schedule add "0 3 * * *" mtp steps 4 qwen`,
			&ScheduleAdd{Cron: "0 3 * * *", Sub: &MTPSteps{On: onQwen, Steps: 4}}},
		{optsOne, `schedule add 'TZ=Europe/Berlin 30 6 * * 1-5' bench prompts=50`, `schedule add "CRON_TZ=Europe/Berlin 30 6 * * 1-5" bench qwen prompts=50`,
			&ScheduleAdd{Cron: "CRON_TZ=Europe/Berlin 30 6 * * 1-5", Sub: &Bench{On: onQwen, Params: ops.BenchParams{Prompts: 50}}}},
		{optsOne, "schedule add @Daily gpu recover --no-start", `schedule add "@daily" gpu recover qwen --no-start`,
			&ScheduleAdd{Cron: "@daily", Sub: &GPURecover{On: onQwen, NoStart: true}}},
		{optsOne, "schedule add @every 6h svc restart", `schedule add "@every 6h" svc restart qwen`,
			&ScheduleAdd{Cron: "@every 6h", Sub: &SvcRestart{On: onQwen}}},
		{optsOne, `schedule add --dry-run "@hourly" svc stop`, `schedule add --dry-run "@hourly" svc stop qwen`,
			&ScheduleAdd{Cron: "@hourly", DryRun: true, Sub: &SvcStop{On: onQwen}}},
		{optsOne, `schedule add "*/15 * * * *" gpu recover --force`, `schedule add "*/15 * * * *" gpu recover qwen --force`,
			&ScheduleAdd{Cron: "*/15 * * * *", Sub: &GPURecover{On: onQwen, Force: true}}},
		{optsOne, "schedule list", "schedule list", &ScheduleList{}},
		{optsOne, "schedule rm 3", "schedule rm 3", &ScheduleRm{ID: 3}},
		{optsOne, "schedule pause #12 --dry-run", "schedule pause 12 --dry-run", &SchedulePause{ID: 12, DryRun: true}},
		{optsOne, "schedule resume #12", "schedule resume 12", &ScheduleResume{ID: 12}},
		// jobs, cancel, history, help
		{optsNone, "jobs", "jobs", &Jobs{}},
		{optsNone, "jobs ALL", "jobs all", &Jobs{All: true}},
		{optsNone, "cancel 42", "cancel 42", &Cancel{ID: 42}},
		{optsNone, "cancel #9007199254740993", "cancel 9007199254740993", &Cancel{ID: 9007199254740993}},
		{optsOne, "history", "history qwen n=10", &History{On: onQwen, N: 10}},
		{optsMulti, "history n=100 llama", "history llama n=100", &History{On: onLlama, N: 100}},
		{optsNone, "help", "help", &HelpCmd{}},
		{optsNone, "help mtp", "help mtp", &HelpCmd{Topic: "mtp"}},
		{optsNone, "help /SVC Logs", "help svc logs", &HelpCmd{Topic: "svc logs"}},
		{optsNone, "help bench", "help bench", &HelpCmd{Topic: "bench"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in, tt.opts)
			if err != nil {
				t.Fatalf("Parse(%q) error:\n%v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%q)\n got %T %+v\nwant %T %+v", tt.in, got, got, tt.want, tt.want)
			}
			if text := Text(got); text != tt.text {
				t.Fatalf("Text(Parse(%q)) = %q, want %q", tt.in, text, tt.text)
			}
			again, err := Parse(Text(got), tt.opts)
			if err != nil {
				t.Fatalf("Parse(Text %q) error: %v", Text(got), err)
			}
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip of %q\n got %+v\nwant %+v", Text(got), again, got)
			}
		})
	}
}

func seq(a, b int) []int {
	var out []int
	for v := a; v <= b; v++ {
		out = append(out, v)
	}
	return out
}

func TestParseBad(t *testing.T) {
	const (
		general = "usage: COMMAND [ARGS] - one of mtp, engine, gpu, svc, bench, sweep, schedule, watchdog, ack, jobs, job, cancel, history, fleet, help (`help` lists them)"
		shell   = " is not allowed: opsbot commands are not shell commands (; | & $ ( ) < > \\ and backticks are refused)"
	)
	u := func(path string) string { return "usage: " + Lookup(path).Usage }
	tests := []struct {
		opts                       Options
		in                         string
		problem, usage, suggestion string
	}{
		// empty and unknown
		{optsOne, "", "empty command", general, "`help` lists the commands"},
		// mtp tune per-load
		{optsOne, "mtp tune per-load at 8", "mtp tune per-load needs two concurrencies or more after at", u("mtp tune"), "did you mean `mtp tune qwen per-load at 1,8,32,64`?"},
		{optsOne, "mtp tune qwen at 1,8", "mtp tune benchmarks at one concurrency; to tune for several, say per-load", u("mtp tune"), "did you mean `mtp tune qwen per-load at 1,8`?"},
		{optsOne, "mtp tune per-load per-load at 1,8", "per-load is given twice", u("mtp tune"), ""},
		{optsOne, "mtp per-load qwen 8:7 1:10", "concurrencies must rise, each once: 1 after 8", u("mtp per-load"), "for example `mtp per-load qwen 1:10 8:7 32:1 64:1`"},
		{optsOne, "mtp per-load 1:0 8:0/0", "steps 0 is given twice at concurrency 8", u("mtp per-load"), "for example `mtp per-load qwen 1:10 8:7 32:1 64:1`"},
		{optsOne, "mtp per-load 1:0 8:0", "every steps value of the table is 0: that is speculative decoding off at every load, `mtp steps 0`", u("mtp per-load"), "for example `mtp per-load qwen 1:10 8:7 32:1 64:1`"},
		{optsOne, "mtp tune qwen compare", "mtp tune compare compares per-load configurations: it needs per-load and two concurrencies or more", u("mtp tune"), "did you mean `mtp tune qwen per-load at 1,8,32,64 compare`?"},
		{optsOne, "mtp tune qwen per-load at 1,8 compare compare", "compare is given twice", u("mtp tune"), ""},
		{optsOne, "mtp tune -1..4", `unknown flag "-1..4": mtp tune takes --dry-run`, u("mtp tune"), ""},
		{optsOne, "mtp per-load 1:3/3", "steps 3 is given twice at concurrency 1", u("mtp per-load"), "for example `mtp per-load qwen 1:10 8:7 32:1 64:1`"},
		{optsOne, "mtp per-load 1:x", `steps "x" at concurrency 1: want a number 0..16`, u("mtp per-load"), "for example `mtp per-load qwen 1:10 8:7 32:1 64:1`"},
		{optsOne, " / ", "empty command", general, "`help` lists the commands"},
		{optsOne, "foo", `unknown command "foo"`, general, "`help` lists the commands"},
		{optsOne, "mpt steps 3", `unknown command "mpt"`, general, "did you mean `mtp steps 3`?"},
		{optsOne, "bnech", `unknown command "bnech"`, general, "did you mean `bench`?"},
		{optsOne, `"mtp" steps 3`, "a command starts with a command word, not quoted text", general, "`help` lists the commands"},
		{optsOne, "mtp", "mtp needs a subcommand: steps, off, tune, per-load, show or undo", groupUsage("mtp"), ""},
		{optsOne, "mtp stpes 10", `unknown command "mtp stpes"`, groupUsage("mtp"), "did you mean `mtp steps 10`?"},
		{optsOne, "mtp 10", `unknown command "mtp 10"`, groupUsage("mtp"), "did you mean `mtp steps 10`?"},
		{optsOne, "mtp steps=10", `unknown command "mtp steps=10"`, groupUsage("mtp"), "did you mean `mtp steps 10`?"},
		{optsOne, "schedule ls", `unknown command "schedule ls"`, groupUsage("schedule"), "did you mean `schedule list`?"},
		{optsOne, "schedule delete 3", `unknown command "schedule delete"`, groupUsage("schedule"), "did you mean `schedule rm 3`?"},
		{optsOne, "svc journal", `unknown command "svc journal"`, groupUsage("svc"), "did you mean `svc logs`?"},
		// integers
		{optsOne, "mtp steps 40", "steps must be between 0 and 16, got 40", u("mtp steps"), "16 is the config's limits.max_steps: an admin can raise it there (at most 64)"},
		{optsOne, "mtp steps -1", "steps must be between 0 and 16, got -1", u("mtp steps"), ""},
		{optsBig, "mtp steps 33", "steps must be between 0 and 32, got 33", u("mtp steps"), "32 is the config's limits.max_steps: an admin can raise it there (at most 64)"},
		{optsOne, "mtp steps -3", "steps must be between 0 and 16, got -3", u("mtp steps"), ""},
		{optsOne, "mtp steps +3", "steps must be between 0 and 16, got +3", u("mtp steps"), ""},
		{optsOne, "mtp steps 3.5", `steps must be a whole number between 0 and 16, got "3.5"`, u("mtp steps"), ""},
		{optsOne, "mtp steps 0x10", `steps must be a whole number between 0 and 16, got "0x10"`, u("mtp steps"), ""},
		{optsOne, "mtp steps 99999999999999999999999", "steps must be between 0 and 16, got 99999999999999999999...", u("mtp steps"), ""},
		{optsOne, "mtp steps ten", `steps must be a whole number between 0 and 16, got "ten"`, u("mtp steps"), ""},
		{optsOne, "mtp steps qwen 10", `steps must be a whole number between 0 and 16, got "qwen"`, u("mtp steps"), "did you mean `mtp steps 10 qwen`?"},
		{optsOne, "mtp steps", "mtp steps needs N, the number of speculative steps", u("mtp steps"), "for example `mtp steps 10`"},
		{optsOne, "svc logs lines=0", "lines must be between 1 and 1000, got 0", u("svc logs"), ""},
		{optsOne, "svc logs lines=1001", "lines must be between 1 and 1000, got 1001", u("svc logs"), ""},
		{optsOne, "svc logs lines=", "lines needs a number", u("svc logs"), ""},
		{optsOne, "svc logs lines=1e3", `lines must be a whole number between 1 and 1000, got "1e3"`, u("svc logs"), ""},
		{optsOne, "svc logs 100", "unexpected number 100", u("svc logs"), "did you mean `svc logs lines=100`?"},
		{optsOne, "bench prompts=0", "prompts must be between 1 and 10000, got 0", u("bench"), ""},
		{optsOne, "bench concurrency=1025", "concurrency must be between 1 and 1024, got 1025", u("bench"), ""},
		{optsOne, "sweep steps 1..3 at 0", "each concurrency must be between 1 and 1024, got 0", u("sweep"), ""},
		{optsOne, "sweep steps 1..3 at 1,1", `concurrency 1 is listed twice in "1,1"`, u("sweep"), ""},
		{optsOne, "sweep steps 1..3 at 1..9", `at takes at most 8 concurrencies, in ascending ranges: "1..9"`, u("sweep"), ""},
		{optsOne, "sweep steps 1..3 at", `sweep needs a concurrency after "at"`, u("sweep"), "for example `sweep qwen steps 1,2,4,8 at 1,8,32 --apply-best`"},
		{optsOne, "sweep steps 1..3 4", "unexpected \"4\" after `sweep steps 1..3`", u("sweep"), ""},
		{optsOne, "sweep steps 1..3 draft 8", "draft tokens follow steps when topk is 1 (SGLang makes them steps+1): a draft LIST needs a topk LIST with a value above 1", u("sweep"), "for example `sweep steps 2..4 topk 1,4 draft 8,16 --dry-run`"},
		{optsOne, "sweep steps 1..3 topk 1 draft 8", "draft tokens follow steps when topk is 1 (SGLang makes them steps+1): a draft LIST needs a topk LIST with a value above 1", u("sweep"), "for example `sweep steps 2..4 topk 1,4 draft 8,16 --dry-run`"},
		{optsOne, "sweep steps 1..3 topk 0", "each topk must be between 1 and 64, got 0", u("sweep"), ""},
		{optsOne, "sweep steps 1..3 topk 2 draft 1", "each draft token count must be between 2 and 1024, got 1", u("sweep"), ""},
		{optsOne, "sweep steps 1..3 topk 2,2", `topk 2 is listed twice in "2,2"`, u("sweep"), ""},
		{optsOne, "sweep steps 1..3 topk", `sweep needs a list after "topk"`, u("sweep"), "for example `sweep qwen steps 1,2,4,8 at 1,8,32 --apply-best`"},
		{optsOne, "sweep steps 1..3 at 1 at 2", "at is given twice", u("sweep"), ""},
		{optsOne, "mtp steps 3 --apply-best", "mtp steps does not take --apply-best", u("mtp steps"), ""},
		{optsOne, "mtp tune 5..2", `the range "5..2" must go up and hold two values at least`, u("mtp tune"), "write 2..5"},
		{optsOne, "mtp tune 1..17", "the range's end must be between 0 and 16, got 17", u("mtp tune"), "16 is the config's limits.max_steps: an admin can raise it there (at most 64)"},
		{optsOne, "mtp tune 4", `RANGE is two steps values a..b, got "4"`, u("mtp tune"), "for example `mtp tune 2..12`"},
		{optsOne, "mtp tune at 2000", "the concurrency must be between 1 and 1024, got 2000", u("mtp tune"), ""},
		{optsOne, "bench in=131073", "in must be between 1 and 131072, got 131073", u("bench"), ""},
		{optsOne, "bench out=32769", "out must be between 1 and 32768, got 32769", u("bench"), ""},
		{optsOne, "history n=101", "n must be between 1 and 100, got 101", u("history"), ""},
		{optsOne, "cancel 0", "the job id must be a positive number, got 0", u("cancel"), ""},
		{optsOne, "cancel x", `the job id must be a number like 42 or #42, got "x"`, u("cancel"), ""},
		{optsOne, "cancel", "cancel needs a JOB id (`jobs` lists them)", u("cancel"), "for example `cancel 42`"},
		{optsOne, "schedule rm", "schedule rm needs a schedule ID (`schedule list` shows them)", u("schedule rm"), "for example `schedule rm 3`"},
		{optsOne, "schedule rm 99999999999999999999", `the schedule id must be a number like 42 or #42, got "99999999999999999999"`, u("schedule rm"), "`schedule list` shows the ids"},
		// keys and flags
		{optsOne, "bench promts=10", `unknown key "promts": bench takes prompts=N, concurrency=N, in=N, out=N`, u("bench"), "did you mean `bench prompts=10`?"},
		{optsOne, "bench input=100", `unknown key "input": bench takes prompts=N, concurrency=N, in=N, out=N`, u("bench"), "did you mean `bench in=100`?"},
		{optsOne, "bench c=8", `unknown key "c": bench takes prompts=N, concurrency=N, in=N, out=N`, u("bench"), "did you mean `bench concurrency=8`?"},
		{optsOne, "bench prompts=1 prompts=2", "prompts is given twice", u("bench"), ""},
		{optsOne, "svc start lines=5", `svc start takes no key=value arguments, got "lines=5"`, u("svc start"), ""},
		{optsOne, "sweep steps=1,2", "write steps 1,2 without =", u("sweep"), "did you mean `sweep steps 1,2`?"},
		{optsOne, "mtp steps 10 --dryrun", `unknown flag "--dryrun": mtp steps takes --dry-run`, u("mtp steps"), "did you mean `mtp steps 10 --dry-run`?"},
		{optsOne, "mtp steps 10 -dry-run", `unknown flag "-dry-run": mtp steps takes --dry-run`, u("mtp steps"), "did you mean `mtp steps 10 --dry-run`?"},
		{optsOne, "mtp steps 10 --dry-run --dry-run", "--dry-run is given twice", u("mtp steps"), ""},
		{optsOne, "mtp steps 10 --force", "mtp steps does not take --force", u("mtp steps"), ""},
		{optsOne, "gpu recover --nostart", `unknown flag "--nostart": gpu recover takes --no-start, --force, --dry-run`, u("gpu recover"), "did you mean `gpu recover --no-start`?"},
		{optsOne, "mtp show --dry-run", "mtp show is read-only: it does not take --dry-run", u("mtp show"), ""},
		{optsOne, "jobs --all", `unknown flag "--all": jobs takes no flags`, u("jobs"), ""},
		{optsOne, "svc logs --dry-run", "svc logs is read-only: it does not take --dry-run", u("svc logs"), ""},
		// names
		{optsOne, "mtp steps 10 qwne", `unknown service "qwne": the services are qwen`, u("mtp steps"), "did you mean `mtp steps 10 qwen`?"},
		{optsNone, "mtp steps 10 qwen", `unknown service "qwen": no services are configured`, u("mtp steps"), ""},
		{optsNone, "mtp steps 10", "mtp steps needs a service, and no services are configured", u("mtp steps"), ""},
		{optsMulti, "mtp steps 10", "which service? 3 are configured: qwen, llama, mini", u("mtp steps"), "name one, for example `mtp steps 10 qwen`, or set default_service in the config"},
		{optsMulti, "svc logs lines=9", "which service? 3 are configured: qwen, llama, mini", u("svc logs"), "name one, for example `svc logs qwen lines=9`, or set default_service in the config"},
		{optsOne, "mtp steps 10 Qw@n", `unknown service "Qw@n": the services are qwen`, u("mtp steps"), "did you mean `mtp steps 10 qwen`?"},
		{optsOne, "mtp steps 10 qw@n@x", `"qw@n@x" is not a replica's name (SERVICE@REPLICA, each letters, digits, . _ -)`, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 -qwen", `unknown flag "-qwen": mtp steps takes --dry-run`, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 " + strings.Repeat("a", 65), "service name is too long (at most 64 characters)", u("mtp steps"), ""},
		{optsOne, "mtp steps 10 qwen qwen", "unexpected \"qwen\" after `mtp steps 10 qwen`: one service per command", u("mtp steps"), ""},
		{optsOne, "mtp show qwen extra", "unexpected \"extra\" after `mtp show qwen`", u("mtp show"), ""},
		{optsMulti, "gpu recover gpu2", "host gpu2 runs several services (llama, mini): name one", u("gpu recover"), "for example `gpu recover llama`"},
		{optsMulti, "gpu recover pve", "host pve runs no configured service: gpu recover needs a service to stop and start", u("gpu recover"), ""},
		{optsMulti, "gpu recover lama", `unknown host or service "lama": the services are qwen, llama, mini`, u("gpu recover"), "did you mean `gpu recover llama`?"},
		{optsMulti, "gpu status gpu3", `unknown host "gpu3": the hosts are gpu1, gpu2, pve`, u("gpu status"), "did you mean `gpu status gpu1`?"},
		{optsOne, "jobs al", `unexpected "al": jobs takes only the word all`, u("jobs"), "did you mean `jobs all`?"},
		// sweep lists
		{optsOne, "sweep steps 1-5", "write ranges with two dots: 1..5, not 1-5", u("sweep"), ""},
		{optsOne, "sweep steps 1\u20135", "write ranges with two dots: 1..5, not 1-5", u("sweep"), ""},
		{optsOne, "sweep steps 5..1", "the range 5..1 goes backwards", u("sweep"), "write 1..5"},
		{optsOne, "sweep steps 1..5,3", `steps 3 is listed twice in "1..5,3": each value is run once`, u("sweep"), ""},
		{optsOne, "sweep steps 1,,2", `empty value in the steps list "1,,2"`, u("sweep"), ""},
		{optsOne, "sweep steps 1,2,", `empty value in the steps list "1,2,"`, u("sweep"), ""},
		{optsOne, "sweep steps 1..40", "each steps value must be between 0 and 16, got 40", u("sweep"), "16 is the config's limits.max_steps: an admin can raise it there (at most 64)"},
		{optsOne, "sweep steps 1...3", `each steps value must be a whole number between 0 and 16, got ".3"`, u("sweep"), ""},
		{Options{MaxSteps: 100, Services: optsOne.Services}, "sweep steps 1..33", `a sweep has at most 32 values, "1..33" has more`, u("sweep"), ""},
		{Options{MaxSteps: 100, Services: optsOne.Services}, "sweep steps 1..20,30..45", `a sweep has at most 32 values, "1..20,30..45" has more`, u("sweep"), ""},
		{optsOne, "sweep steps 1 2 3", "unexpected \"2\" after `sweep steps 1`", u("sweep"), ""},
		{optsOne, "sweep steps 1..5 qwen", "unexpected \"qwen\" after `sweep steps 1..5`", u("sweep"), "did you mean `sweep qwen steps 1..5`?"},
		{optsOne, "sweep qwen 1,2", `expected "steps", got "1,2"`, u("sweep"), "did you mean `sweep qwen steps 1,2`?"},
		{optsOne, "sweep qwen stesp 1,2", `expected "steps", got "stesp"`, u("sweep"), "did you mean `sweep qwen steps 1,2`?"},
		{optsOne, "sweep", "sweep needs steps LIST, e.g. steps 1..5,10", u("sweep"), "for example `sweep steps 1..5,10`"},
		{optsOne, "sweep steps", "sweep needs steps LIST, e.g. steps 1..5,10", u("sweep"), "for example `sweep steps 1..5,10`"},
		// schedules
		{optsOne, `schedule add`, `schedule add needs a "CRON" spec in quotes`, u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "0 3 * * *"`, "schedule add needs the COMMAND to run", u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add 0 3 * * * bench`, `the cron spec must be in quotes, got "0"`, u("schedule add"), "did you mean `schedule add \"0 3 * * *\" bench`?"},
		{optsOne, `schedule add "0 3 * * *" jobs`, "jobs cannot be scheduled: only mtp steps, mtp tune, gpu recover, svc start, svc stop, svc restart, bench or sweep can", u("schedule add"), ""},
		{optsOne, `schedule add "0 3 * * *" schedule add "0 4 * * *" bench`, "schedule add cannot be scheduled: only mtp steps, mtp tune, gpu recover, svc start, svc stop, svc restart, bench or sweep can", u("schedule add"), ""},
		{optsOne, `schedule add "0 3 * * *" cancel 3`, "cancel cannot be scheduled: only mtp steps, mtp tune, gpu recover, svc start, svc stop, svc restart, bench or sweep can", u("schedule add"), ""},
		{optsOne, `schedule add "0 3 * * *" help`, "help cannot be scheduled: only mtp steps, mtp tune, gpu recover, svc start, svc stop, svc restart, bench or sweep can", u("schedule add"), ""},
		{optsOne, `schedule add "0 3 * * *" mtp steps 4 --dry-run`, "a scheduled command cannot be a dry run", u("schedule add"),
			"to preview the schedule put --dry-run before the cron spec: `schedule add --dry-run \"...\" mtp steps ...`"},
		{optsOne, `schedule add "0 3 * * *" mtp steps 99`, "in the scheduled command: steps must be between 0 and 16, got 99", u("mtp steps"), "16 is the config's limits.max_steps: an admin can raise it there (at most 64)"},
		{optsOne, `schedule add "0 3 * * *" mtpp steps 9`, `in the scheduled command: unknown command "mtpp"`, general, "did you mean `mtp steps 9`?"},
		{optsOne, `schedule add "0 3 * * * *" bench`, `invalid cron spec "0 3 * * * *": expected exactly 5 fields, found 6: [0 3 * * * *]`, u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "" bench`, "the cron spec is empty", u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "0 3 * * *; reboot" bench`, `unexpected ";" in cron spec "0 3 * * *; reboot"`, u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "0 3 $(x) * *" bench`, `unexpected "$" in cron spec "0 3 $(x) * *"`, u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "CRON_TZ=Europe/Berlin" bench`, `CRON_TZ=Europe/Berlin needs a schedule after it, e.g. "CRON_TZ=Europe/Berlin 0 3 * * *"`, u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "CRON_TZ= 0 3 * * *" bench`, "CRON_TZ= needs a time zone, e.g. CRON_TZ=Europe/Berlin", u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "0 3 * * * CRON_TZ=UTC" bench`, "CRON_TZ= may only start the cron spec", u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "CRON_TZ=Nowhere/Land 0 3 * * *" bench`, `invalid cron spec "CRON_TZ=Nowhere/Land 0 3 * * *": provided bad location Nowhere/Land: unknown time zone Nowhere/Land`, u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, `schedule add "0 0 30 2 *" bench`, `cron spec "0 0 30 2 *" never fires`, u("schedule add"), "for example `schedule add \"0 3 * * *\" sweep qwen steps 1..5`"},
		{optsOne, "schedule add @every 30s bench", "@every must be at least 1m, got 30s", u("schedule add"), ""},
		{optsOne, "schedule add @every -5m bench", "@every must be at least 1m, got -5m", u("schedule add"), ""},
		{optsOne, "schedule add @sometimes bench", `invalid cron spec "@sometimes": unrecognized descriptor: @sometimes`, u("schedule add"), ""},
		{optsOne, `mtp steps "10"`, `unexpected quoted text "10": quotes are only for the cron spec of schedule add`, u("mtp steps"), ""},
		{optsOne, `schedule add "0 3 * * *`, "unterminated quote: \" without a closing \"", u("schedule add"), ""},
		{optsOne, `schedule add "0 3 * * *"bench`, "put a space after the closing quote", u("schedule add"), ""},
		// help
		{optsOne, "help mtpp", `no help for "mtpp": not a command`, u("help"), "did you mean `help mtp`?"},
		{optsOne, "help mtp foo", `no help for "mtp foo": not a command`, u("help"), "did you mean `help mtp off`?"},
		// injection: every one a usage error
		{optsOne, "mtp steps 10; rm -rf /", `";"` + shell, u("mtp steps"), ""},
		{optsOne, "mtp steps 10;rm -rf /", `";"` + shell, u("mtp steps"), ""},
		{optsOne, "$(reboot)", `"$"` + shell, general, ""},
		{optsOne, "mtp steps $(reboot)", `"$"` + shell, u("mtp steps"), ""},
		{optsOne, "mtp steps `reboot`", "\"`\"" + shell, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 | sh", `"|"` + shell, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 && reboot", `"&"` + shell, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 > /etc/passwd", `">"` + shell, u("mtp steps"), ""},
		{optsOne, "svc logs qwen\\", `"\\"` + shell, u("svc logs"), ""},
		{optsOne, "mtp steps 10\nrm -rf /", "a command is a single line: found a line break", u("mtp steps"), ""},
		{optsOne, "mtp steps 10\r\nreboot", "a command is a single line: found a line break", u("mtp steps"), ""},
		{optsOne, "mtp steps 10 q\x00wen", "unexpected control character U+0000", u("mtp steps"), ""},
		{optsOne, "mtp steps 10 qw\u00e9n", `unexpected character "é" (U+00E9): names and numbers are plain ASCII`, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 \xff", "the text is not valid UTF-8", u("mtp steps"), ""},
		{optsOne, "mtp steps 10 q'wen", "quotes may only surround a whole word (the cron spec)", u("mtp steps"), ""},
		{optsOne, "mtp steps 10 ${IFS}", `"$"` + shell, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 qwen* ", `"qwen*" is not a service name (letters, digits, . _ -)`, u("mtp steps"), ""},
		{optsOne, "mtp steps 10 ../etc", `"../etc" is not a service name (letters, digits, . _ -)`, u("mtp steps"), ""},
		{optsOne, "gpu recover gpu1;reboot", `";"` + shell, u("gpu recover"), ""},
		{optsOne, "x " + strings.Repeat("a", MaxInputLen), "the command is too long (1026 bytes, at most 1024)", general, ""},
		{optsOne, strings.Repeat(" ", 1020) + "jobs all", "the command is too long (1028 bytes, at most 1024)", general, ""},
		{optsOne, strings.Repeat("\u00a0", 511) + "jobs", "the command is too long (1026 bytes, at most 1024)", general, ""},
		{optsOne, strings.Repeat("jobs ", 49), "too many words (at most 48)", u("jobs"), ""},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		name := tt.in
		if len(tt.opts.Services) != 1 {
			name = fmt.Sprintf("%d services: %s", len(tt.opts.Services), tt.in)
		}
		if seen[name] {
			t.Fatalf("duplicate case %q", name)
		}
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			c, err := Parse(tt.in, tt.opts)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, want a usage error", tt.in, Text(c))
			}
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("Parse(%q) error %T %v, want *UsageError", tt.in, err, err)
			}
			if ue.Problem != tt.problem {
				t.Errorf("Problem\n got %q\nwant %q", ue.Problem, tt.problem)
			}
			if ue.Usage != tt.usage {
				t.Errorf("Usage\n got %q\nwant %q", ue.Usage, tt.usage)
			}
			if ue.Suggestion != tt.suggestion {
				t.Errorf("Suggestion\n got %q\nwant %q", ue.Suggestion, tt.suggestion)
			}
		})
	}
}
