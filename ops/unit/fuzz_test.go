package unit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func seedUnits(f *testing.F) []string {
	files, _ := filepath.Glob("testdata/edit/*.service")
	var out []string
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, string(b))
	}
	return append(out,
		"[Service]\nExecStart=/bin/python3 -m sglang.launch_server --speculative-algo EAGLE --port 1\n",
		"[Service]\r\nExecStart=/bin/python3 -m sglang.launch_server \\\r\n  --speculative-algo EAGLE \\\r\n  --speculative-num-steps 2\r\n",
		"[Service]\nExecStart=vllm serve m --speculative-config \"{\\\"method\\\":\\\"mtp\\\"}\"\n",
		"[Service]\nExecStart=-@/opt/py/bin/python3.12 python3 -m sglang.launch_server --speculative-algorithm=EAGLE --speculative-num-s=\"3\" --speculative-e '2' --speculative-num-d 5\n",
		"[Service]\nExecStart=vllm serve m --speculative-model /d --num-speculative-tokens=5 ; /bin/true\n",
	)
}

// FuzzParseExecStart: parsing never panics; spans are ordered and inside the
// input; re-joining the words as written parses to the same argv; quoting the
// argv with Quote parses back to the same values.
func FuzzParseExecStart(f *testing.F) {
	for _, s := range []string{
		`/usr/bin/python3 -m sglang.launch_server --tp 4`, `/bin/x "a b" 'c\'d' \x41 $$A ${B} %% %i ; /bin/y \;`,
		`-@:+!!/bin/x argv0 "q""r"`, `/bin/x --c='{"num_speculative_tokens":2}'`, `/bin/x \u00e9 \101 \s`,
	} {
		f.Add(s)
	}
	for _, u := range seedUnits(f) {
		if p, err := Parse("", u); err == nil {
			for _, e := range p.Entries {
				f.Add(e.Value)
			}
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		cmds, err := ParseCommandLine(in)
		if err != nil {
			return
		}
		var rejoined []string
		last := 0
		for _, c := range cmds {
			if c.Span.Start < last || c.Span.End > len(in) || c.Span.Start > c.Span.End {
				t.Fatalf("command span %+v out of order (last %d, len %d)", c.Span, last, len(in))
			}
			last = c.Span.End
			words := []string{in[c.PathWord.Span.Start:c.PathWord.Span.End]}
			for i, a := range c.Args {
				if a.Span.Start < c.Span.Start || a.Span.End > c.Span.End || len(a.src) != len(a.Value) {
					t.Fatalf("arg %d span %+v outside command %+v", i, a.Span, c.Span)
				}
				for k, s := range a.src {
					if s.start < a.Span.Start || s.end > a.Span.End || s.start >= s.end || (k > 0 && s.start < a.src[k-1].start) {
						t.Fatalf("arg %d byte %d source %+v outside %+v", i, k, s, a.Span)
					}
				}
				if i > 0 || c.SeparateArgv0 {
					words = append(words, in[a.Span.Start:a.Span.End])
				}
			}
			rejoined = append(rejoined, strings.Join(words, " "))
		}
		again, err := ParseCommandLine(strings.Join(rejoined, " ; "))
		if err != nil {
			t.Fatalf("re-joined %q: %v", rejoined, err)
		}
		if len(again) != len(cmds) {
			t.Fatalf("re-joined: %d commands, want %d", len(again), len(cmds))
		}
		for i := range cmds {
			if !slices.Equal(again[i].Argv(), cmds[i].Argv()) {
				t.Fatalf("re-joined argv %q, want %q", again[i].Argv(), cmds[i].Argv())
			}
		}
		// Quote round trip of literal values.
		for _, c := range cmds {
			var q []string
			for _, a := range c.Args {
				q = append(q, Quote(a.Value))
			}
			rt, err := ParseCommandLine("/bin/x " + strings.Join(q, " "))
			if err != nil || len(rt) != 1 || !slices.Equal(rt[0].Argv()[1:], c.Argv()) {
				t.Fatalf("Quote round trip of %q: %v %+v", c.Argv(), err, rt)
			}
		}
	})
}

// FuzzParseUnit: Parse never panics and every value byte maps into the text.
func FuzzParseUnit(f *testing.F) {
	for _, u := range seedUnits(f) {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, text string) {
		u, err := Parse("", text)
		if err != nil {
			return
		}
		for _, e := range u.Entries {
			for i := 0; i < len(e.Value); i++ {
				p := e.TextPos(i)
				if p < 0 || p >= len(text) || (text[p] != e.Value[i] && !(e.Value[i] == ' ' && text[p] == '\\')) {
					t.Fatalf("value %q byte %d maps to %d", e.Value, i, p)
				}
			}
			if e.ValueSpan.Start < e.Span.Start || e.ValueSpan.End > e.Span.End {
				t.Fatalf("value span %+v outside %+v", e.ValueSpan, e.Span)
			}
			_, _ = e.ExecCommands()
		}
	})
}

// FuzzSetSteps: for any unit that parses and has speculation configured, the
// edit changes only the speculative options' words, the result parses back
// and reads back n, and bytes outside the replaced spans are identical.
func FuzzSetSteps(f *testing.F) {
	for _, u := range seedUnits(f) {
		for _, n := range []int{1, 4, 10} {
			f.Add(u, n)
		}
	}
	f.Fuzz(func(t *testing.T, text string, n int) {
		u, err := Parse("u", text)
		if err != nil {
			return
		}
		eff, err := Merge(u)
		if err != nil {
			return
		}
		e, err := eff.SetSteps(n, Options{})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("SetSteps: non-refusal error %v", err)
			}
			return
		}
		// Bytes outside the replacements are identical.
		var b strings.Builder
		last := 0
		for _, r := range e.Replacements {
			if r.Start < last || r.End > len(text) {
				t.Fatalf("replacement %+v out of order", r.Span)
			}
			b.WriteString(text[last:r.Start])
			b.WriteString(r.Text)
			last = r.End
			if !insideSpecWord(eff, e.SpecBefore, r.Span) {
				t.Fatalf("replacement %+v (%q) outside the speculative options", r.Span, text[r.Start:r.End])
			}
		}
		b.WriteString(text[last:])
		if b.String() != e.After {
			t.Fatalf("After is not Before with the replacements applied")
		}
		// The result parses back and reads back n.
		nu, err := Parse("u", e.After)
		if err != nil {
			t.Fatalf("edited unit does not parse: %v", err)
		}
		neff, err := Merge(nu)
		if err != nil {
			t.Fatalf("edited unit: %v", err)
		}
		spec, err := neff.Spec()
		if err != nil || spec.DraftSteps() != n || !spec.Present {
			t.Fatalf("edited unit reads back %+v, %v; want steps %d", spec, err, n)
		}
		if !slices.Equal(neff.Argv(), e.ArgvAfter) {
			t.Fatalf("ArgvAfter %q differs from the parsed result %q", e.ArgvAfter, neff.Argv())
		}
		// argv before and after differ only at the speculative options.
		if a, b := withoutSpec(e.ArgvBefore, e.SpecBefore), withoutSpec(e.ArgvAfter, spec); !slices.Equal(a, b) {
			t.Fatalf("non-speculative argv changed:\n%q\n%q", a, b)
		}
	})
}

// insideSpecWord reports whether span lies in a speculative option's words,
// or is an insertion right after one.
func insideSpecWord(eff *Effective, s Spec, sp Span) bool {
	args := eff.Engine.Command.Args
	for _, u := range s.Uses {
		for _, i := range []int{u.NameIndex, u.ValueIndex} {
			w := args[i].Span
			if sp.Start >= w.Start && sp.End <= w.End {
				return true
			}
		}
	}
	return false
}

func withoutSpec(argv []string, s Spec) []string {
	drop := map[int]bool{}
	for _, u := range s.Uses {
		drop[u.NameIndex], drop[u.ValueIndex] = true, true
	}
	var out []string
	for i, a := range argv {
		if !drop[i] {
			out = append(out, a)
		}
	}
	return out
}
