package commands

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops"
)

// TestDefinitions fails for a command definition that is incomplete: no help
// (Summary), no example, no policy (a zero Role), a value whose Spec is not
// its own, or an example that does not round-trip: parsed, its Text parses
// to an equal command, and Decode(Encode(c)) is equal to it.
func TestDefinitions(t *testing.T) {
	seenType := map[reflect.Type]string{}
	for _, s := range Specs() {
		if s.Summary == "" {
			t.Errorf("%s: no Summary (its help)", s.Path)
		}
		if len(s.Examples) == 0 {
			t.Errorf("%s: no example", s.Path)
		}
		if s.Role == 0 {
			t.Errorf("%s: no policy (zero Role)", s.Path)
		}
		if s.new == nil {
			t.Errorf("%s: no constructor", s.Path)
			continue
		}
		v := s.new()
		if v.Spec() != s {
			t.Errorf("%s: its type %T has the Spec of %s", s.Path, v, v.Spec().Path)
		}
		if typ := reflect.TypeOf(v); seenType[typ] != "" {
			t.Errorf("%s: type %T is also the type of %s", s.Path, v, seenType[typ])
		} else {
			seenType[typ] = s.Path
		}
		for _, ex := range s.Examples {
			c, err := Parse(ex, optsOne)
			if err != nil {
				t.Errorf("%s: example %q: %v", s.Path, ex, err)
				continue
			}
			if c.Spec() != s {
				t.Errorf("%s: example %q parsed as %s", s.Path, ex, c.Spec().Path)
				continue
			}
			again, err := Parse(Text(c), optsOne)
			if err != nil {
				t.Errorf("%s: example %q: its Text %q: %v", s.Path, ex, Text(c), err)
			} else if !reflect.DeepEqual(again, c) {
				t.Errorf("%s: example %q: Parse(Text %q)\n got %+v\nwant %+v", s.Path, ex, Text(c), again, c)
			}
			checkEncoding(t, c)
		}
	}
}

// checkEncoding checks Decode(Encode(c)) is equal to c.
func checkEncoding(t *testing.T, c Command) {
	t.Helper()
	data, err := Encode(c)
	if err != nil {
		t.Errorf("Encode(%s): %v", Text(c), err)
		return
	}
	back, err := Decode(data)
	if err != nil {
		t.Errorf("Decode(Encode(%s)) %s: %v", Text(c), data, err)
		return
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("Decode(Encode(%s)) via %s\n got %T %+v\nwant %T %+v", Text(c), data, back, back, c, c)
	}
	if Text(back) != Text(c) {
		t.Errorf("Decode(Encode(%s)) reads %q", Text(c), Text(back))
	}
}

// TestEncodeRoundTrip: every field of every command survives Encode and
// Decode, the scheduled command of a schedule too.
func TestEncodeRoundTrip(t *testing.T) {
	for _, c := range []Command{
		&MTPSteps{On: onQwen, Steps: 10, DryRun: true},
		&MTPTune{On: onLlama, From: 2, To: 12, Concurrency: 8, DryRun: true},
		&MTPTune{On: onQwen, PerLoad: true, From: 1, To: 16, At: []int{1, 8, 32, 64}},
		&MTPPerLoad{On: onQwen, Table: []LoadSteps{{1, []int{10}}, {8, []int{7}}, {64, []int{2, 3}}}, DryRun: true},
		&MTPShow{On: onMini},
		&MTPUndo{On: onQwen, DryRun: true},
		&GPUStatus{},
		&GPUStatus{On: On{Host: "gpu2"}},
		&GPURecover{On: onLlama, NoStart: true, Force: true, DryRun: true},
		&SvcStart{On: onQwen, DryRun: true},
		&SvcStop{On: onQwen},
		&SvcRestart{On: onMini, DryRun: true},
		&SvcStatus{On: onQwen},
		&SvcLogs{On: onQwen, Lines: 200},
		&Bench{On: onQwen, Params: ops.BenchParams{Prompts: 200, Concurrency: 16, InputLen: 1024, OutputLen: 256}, DryRun: true},
		&Sweep{On: onQwen, Steps: []int{2, 3, 4}, TopK: []int{1, 4}, Draft: []int{8, 16}, At: []int{1, 8}, ApplyBest: true, DryRun: true},
		&ScheduleAdd{Cron: "CRON_TZ=Europe/Berlin 30 6 * * 1-5", To: "slack:C0OPS,matrix:!ops:example.org", DryRun: true,
			Sub: &Sweep{On: onQwen, Steps: []int{1, 2, 3}, At: []int{1, 8}}},
		&ScheduleAdd{Cron: "@daily", Sub: &GPURecover{On: onQwen, NoStart: true}},
		&ScheduleList{},
		&ScheduleRm{ID: 3, DryRun: true},
		&SchedulePause{ID: 12},
		&ScheduleResume{ID: 9007199254740993, DryRun: true},
		&WatchdogSilence{On: onQwen, For: 90 * time.Minute, DryRun: true},
		&Ack{Incident: 7},
		&Jobs{All: true},
		&JobInfo{ID: 42},
		&Cancel{ID: 42},
		&History{On: onLlama, N: 100},
		&HelpCmd{Topic: "svc logs"},
	} {
		checkEncoding(t, c)
	}
}

// TestEncodeLayout pins the layout the store keeps (Encode's doc comment).
func TestEncodeLayout(t *testing.T) {
	data, err := Encode(&MTPSteps{On: onQwen, Steps: 10})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,"command":"mtp steps","args":{"service":"qwen","host":"gpu1","steps":10}}`; string(data) != want {
		t.Errorf("Encode(mtp steps 10 qwen) = %s, want %s", data, want)
	}
}

// TestDecodeRejects: Decode refuses a layout version or a command it does
// not know, also for a schedule's command, and data that is no encoding.
func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct{ data, says string }{
		{`{"v":2,"command":"mtp steps","args":{"service":"qwen","host":"gpu1","steps":10}}`, "version 2"},
		{`{"v":0,"command":"mtp steps","args":{"service":"qwen","host":"gpu1","steps":10}}`, "version 0"},
		{`{"command":"mtp steps","args":{"steps":10}}`, "version 0"},
		{`{"v":1,"command":"mtp frobnicate","args":{}}`, `"mtp frobnicate"`},
		{`{"v":1,"command":"","args":{}}`, `""`},
		{`{"v":1,"command":"MTP STEPS","args":{}}`, `"MTP STEPS"`},
		{`{"v":1,"command":"schedule add","args":{"cron":"@daily","sub":{"v":2,"command":"bench","args":{}}}}`, "version 2"},
		{`{"v":1,"command":"schedule add","args":{"cron":"@daily","sub":{"v":1,"command":"reboot","args":{}}}}`, `"reboot"`},
		{`{"v":1,"command":"mtp steps","args":{"steps":"ten"}}`, "mtp steps"},
		{`mtp steps 10`, "decode"},
		{``, "decode"},
	} {
		c, err := Decode([]byte(tc.data))
		if err == nil {
			t.Errorf("Decode(%s) = %T %+v, want an error", tc.data, c, c)
			continue
		}
		if c != nil {
			t.Errorf("Decode(%s) returned %T %+v with its error", tc.data, c, c)
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Decode(%s) error %q, want it to say %s", tc.data, err, tc.says)
		}
	}
	// Encode refuses a schedule without a command rather than keep one Decode refuses.
	if data, err := Encode(&ScheduleAdd{Cron: "@daily"}); err == nil {
		t.Errorf("Encode(schedule add without a command) = %s, want an error", data)
	}
}

// TestJobCommands: exactly the commands whose policy runs them on the hosts
// (Policy.Hosts) are jobs with a Run; the door answers the others.
func TestJobCommands(t *testing.T) {
	for _, s := range Specs() {
		c := s.new()
		_, isJob := c.(Job)
		if isJob != s.Hosts {
			t.Errorf("%s: Policy.Hosts %v, but %T implements Job: %v", s.Path, s.Hosts, c, isJob)
		}
	}
}

// TestRestarts: a sweep restarts the service once per point of its grid, a
// tune once per value of its range, a per-load tune also for no speculation,
// its proposal's starts (ops.PerLoadStarts), SGLang's default table with
// compare and the way back; every other command (a schedule of a sweep too:
// it runs none itself) at most once.
func TestRestarts(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		in   string
		want int
	}{
		{optsOne, "sweep steps 1..5,10", 6},
		{optsOne, "sweep steps 7", 1},
		{optsOne, "sweep steps 2..4 topk 1,4", 6},
		{optsOne, "sweep steps 2..4 topk 1,4 draft 8,16 at 1,8", 12},
		{optsOne, "sweep steps 2..4 at 1,8,32", 3},
		{optsBig, "sweep steps 1..32 --dry-run", 32},
		{optsOne, "mtp tune", 16},
		{optsOne, "mtp tune 2..12 at 8", 11},
		{optsOne, "mtp tune qwen per-load at 1,8,32,64", 16 + 1 + 5 + 1},
		{optsMulti, "mtp tune at 64,1 per-load llama 2..12", 11 + 1 + 5 + 1},
		{optsOne, "mtp tune qwen per-load 0..12 at 1,8,32,64 compare", 13 + 5 + 1 + 1},
		{optsOne, "mtp tune 0..4", 5},
		{optsOne, "mtp off", 1},
		{optsOne, "mtp tune 3..4", 2},
		{optsBig, "mtp tune qwen 1 .. 32", 32},
		{optsOne, "mtp steps 10", 1},
		{optsOne, "mtp per-load 1:3 64:0", 1},
		{optsOne, "gpu recover", 1},
		{optsOne, "bench", 1},
		{optsOne, "jobs", 1},
		{optsOne, `schedule add "0 3 * * *" sweep qwen steps 1..5`, 1},
	} {
		c, err := Parse(tc.in, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got := Restarts(c); got != tc.want {
			t.Errorf("Restarts(%s) = %d, want %d", Text(c), got, tc.want)
		}
	}
	// A value built by hand never restarts less than once.
	if got := Restarts(&Sweep{}); got != 1 {
		t.Errorf("Restarts(empty sweep) = %d, want 1", got)
	}
}

// Every command of a group agrees on whether the group is a Slack slash
// command of its own, and SlashCommands lists exactly those groups, in
// registry order, then the catch-all.
func TestSlashFromDefinitions(t *testing.T) {
	own := map[string]bool{}
	var want []string
	for _, s := range Specs() {
		g := s.Group()
		if seen, ok := own[g]; ok {
			if seen != s.Slash {
				t.Errorf("%s: Slash %v, but another command of %s says %v", s.Path, s.Slash, g, seen)
			}
			continue
		}
		own[g] = s.Slash
		if s.Slash {
			want = append(want, "/"+g)
		}
		wantCmd := SlackCatchAll
		if s.Slash {
			wantCmd = "/" + g
		}
		if got := s.SlashCommand(); got != wantCmd {
			t.Errorf("%s: SlashCommand %q, want %q", s.Path, got, wantCmd)
		}
	}
	want = append(want, SlackCatchAll)
	if got := SlashCommands(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("SlashCommands() = %v, want %v", got, want)
	}
}
