package lab

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSplitShell(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "", want: nil},
		{in: "  a  b\tc\n", want: []string{"a", "b", "c"}},
		{in: `'systemctl' 'show' '-p' 'A,B' 'x.service'`, want: []string{"systemctl", "show", "-p", "A,B", "x.service"}},
		{in: `'it'\''s'`, want: []string{"it's"}},
		{in: `"a \"b\" \$c \\ \x"`, want: []string{`a "b" $c \ \x`}},
		{in: `a\ b c\\d`, want: []string{"a b", `c\d`}},
		{in: `''`, want: []string{""}},
		{in: `a'b'"c"d`, want: []string{"abcd"}},
		{in: "'a;b' ; |", want: []string{"a;b", ";", "|"}},
		{in: "a\\\nb", want: []string{"ab"}},
		{in: `'unterminated`, bad: true},
		{in: `"unterminated`, bad: true},
		{in: `trailing\`, bad: true},
	} {
		got, err := SplitShell(tc.in)
		var se *SyntaxError
		if tc.bad {
			if !errors.As(err, &se) {
				t.Errorf("SplitShell(%q) err %v, want *SyntaxError", tc.in, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitShell(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// FuzzSplitShell checks that quoting any argv with the POSIX single-quote rule and splitting it
// again gives the argv back, and that SplitShell never panics on arbitrary input.
func FuzzSplitShell(f *testing.F) {
	f.Add("a b", "it's")
	f.Add(`"x"`, `\`)
	f.Add("", "\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		SplitShell(a + " " + b)
		argv := []string{a, b}
		got, err := SplitShell(shQuote(argv))
		if err != nil || !reflect.DeepEqual(got, argv) {
			t.Fatalf("round trip %q -> %q, %v", argv, got, err)
		}
	})
}

func TestParseExecStart(t *testing.T) {
	t.Parallel()
	env := []string{"MODEL=/models/q", "ARGS=--a 1"}
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "/usr/bin/python3 -m sglang.launch_server --port 30000", want: []string{"/usr/bin/python3", "-m", "sglang.launch_server", "--port", "30000"}},
		{in: `vllm serve /m --speculative-config '{"method":"mtp","num_speculative_tokens":3}'`, want: []string{"vllm", "serve", "/m", "--speculative-config", `{"method":"mtp","num_speculative_tokens":3}`}},
		{in: `-/bin/echo "a b" 'c d'`, want: []string{"/bin/echo", "a b", "c d"}},
		{in: `/bin/sh -c 'echo $$HOME 100%%'`, want: []string{"/bin/sh", "-c", "echo $HOME 100%"}},
		{in: `/bin/run ${MODEL} $ARGS x%n`, want: []string{"/bin/run", "/models/q", "--a", "1", "xunit.service"}},
		{in: `/bin/echo "tab\there"`, want: []string{"/bin/echo", "tab\there"}},
		{in: `/bin/echo %Z`, bad: true},
		{in: `/bin/echo "open`, bad: true},
		{in: ``, bad: true},
	} {
		got, _, err := parseExecStart(tc.in, "unit.service", "gpu1", env)
		if tc.bad {
			if err == nil {
				t.Errorf("parseExecStart(%q) = %q, want error", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseExecStart(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseExecStart(f *testing.F) {
	f.Add(`/bin/x "a b" 'c' $$ %% ${A} $B`)
	f.Add(`\x4`)
	f.Fuzz(func(t *testing.T, s string) {
		argv, _, err := parseExecStart(s, "u.service", "h", []string{"A=1", "B=2 3"})
		if err == nil && len(argv) == 0 {
			t.Fatalf("no error but empty argv for %q", s)
		}
	})
}

func TestParseUnitText(t *testing.T) {
	t.Parallel()
	text := "# comment\n[Unit]\nDescription=x\n\n[Service]\nExecStart=/bin/a \\\n  --b \\\n# inner comment\n  --c\nRestart=on-failure\nRestartSec=1min 30s\nKillMode=mixed\nEnvironment=\"A=1 2\" B=3\n"
	es, err := parseUnitText("u", text)
	if err != nil {
		t.Fatal(err)
	}
	c, err := buildUnitConfig(es)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExecStart[0] != "/bin/a  --b  --c" || c.Restart != "on-failure" || c.RestartSec != 90*time.Second || c.KillMode != "mixed" ||
		!reflect.DeepEqual(c.Environment, []string{"A=1 2", "B=3"}) || c.StartLimitBurst != 5 || c.TimeoutStopSec != 90*time.Second {
		t.Fatalf("config %+v", c)
	}
	for _, bad := range []string{"Key=outside", "[Service\nA=1", "[Service]\nno equals", "[Service]\nRestart=sometimes", "[Service]\nRestartSec=abc"} {
		es, err := parseUnitText("u", bad)
		if err == nil {
			_, err = buildUnitConfig(es)
		}
		if err == nil {
			t.Errorf("unit %q accepted", bad)
		}
	}
}

func FuzzParseUnitText(f *testing.F) {
	f.Add(defaultUnit("sglang"))
	f.Add(defaultUnit("vllm"))
	f.Fuzz(func(t *testing.T, s string) {
		if es, err := parseUnitText("u", s); err == nil {
			buildUnitConfig(es)
		}
	})
}

func TestParseFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []Fault
		bad  bool
	}{
		{in: "", want: nil},
		{in: "orphans", want: []Fault{{Name: "orphans"}}},
		{in: " orphans , slow-load=3m,ssh-drop", want: []Fault{{Name: "orphans"}, {Name: "slow-load", Duration: 3 * time.Minute}, {Name: "ssh-drop"}}},
		{in: "dstate,crash-on-start", want: []Fault{{Name: "dstate"}, {Name: "crash-on-start"}}},
		{in: "ssh-drop=write", want: []Fault{{Name: "ssh-drop", Stage: "write"}}},
		{in: "ssh-drop=Reload,orphans", want: []Fault{{Name: "ssh-drop", Stage: "reload"}, {Name: "orphans"}}},
		{in: "ssh-drop=upload", want: []Fault{{Name: "ssh-drop", Stage: "upload"}}},
		{in: "ssh-drop=later", bad: true},
		{in: "ssh-drop,ssh-drop=write", bad: true},
		{in: "orphans,orphans", bad: true},
		{in: "slow-engine=1.5", want: []Fault{{Name: "slow-engine", Factor: 1.5}}},
		{in: "slow-engine", bad: true},
		{in: "slow-engine=0.5", bad: true},
		{in: "slow-engine=fast", bad: true},
		{in: "slow-load", bad: true},
		{in: "slow-load=fast", bad: true},
		{in: "slow-load=-1s", bad: true},
		{in: "orphans=1", bad: true},
		{in: "gremlins", bad: true},
		{in: "no-forwarding,orphans", want: []Fault{{Name: "no-forwarding"}, {Name: "orphans"}}},
		{in: "no-forwarding=yes", bad: true},
		{in: "xid-after-reset=79@2", want: []Fault{{Name: "xid-after-reset", XID: 79, GPU: 2}}},
		{in: "xid-after-reset=2", bad: true},
		{in: "xid-after-reset=7@2", bad: true},
	} {
		got, err := ParseFaults(tc.in)
		var fe *FaultError
		if tc.bad {
			if !errors.As(err, &fe) {
				t.Errorf("ParseFaults(%q) = %v, %v; want *FaultError", tc.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFaults(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	f.Add("orphans,slow-load=3s")
	f.Fuzz(func(t *testing.T, s string) {
		fs, err := ParseFaults(s)
		if err != nil {
			return
		}
		var names []string
		for _, x := range fs {
			names = append(names, x.String())
		}
		again, err := ParseFaults(strings.Join(names, ","))
		if err != nil || !reflect.DeepEqual(again, fs) {
			t.Fatalf("%q -> %v does not round trip: %v %v", s, fs, again, err)
		}
	})
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Time{
		"@1764700800.5":       time.Unix(1764700800, 500000000),
		"2026-12-02 18:00:00": time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC),
		"2026-12-02":          time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
	} {
		got, err := parseSince(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseSince("yesterday-ish"); err == nil {
		t.Error("bad timestamp accepted")
	}
}
