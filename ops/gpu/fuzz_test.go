package gpu

import "testing"

func FuzzParseGPUs(f *testing.F) {
	for _, s := range []string{"0, 81234, 81559\n", "0, [N/A], [Not Supported]\n\n", "index, memory.used [MiB]\n1, 5 MiB\n", "0,,\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		gs, err := ParseGPUs(b)
		if err != nil {
			return
		}
		for _, g := range gs {
			if g.Index < 0 || g.Known != (g.UsedMiB >= 0) {
				t.Fatalf("inconsistent %+v", g)
			}
		}
	})
}

func FuzzParseApps(f *testing.F) {
	for _, s := range []string{"12345, 80123\n", "No running processes found\n", "1, [N/A]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		as, err := ParseApps(b)
		if err != nil {
			return
		}
		for _, a := range as {
			if a.PID <= 0 || a.UsedMiB < -1 {
				t.Fatalf("bad row %+v", a)
			}
		}
	})
}

func FuzzParsePS(f *testing.F) {
	for _, s := range []string{"  4242  1 Sl sglang::scheduler_TP0\n", "1 0 Z [x] <defunct>\n", "1 1 D\n"} {
		f.Add([]byte(s), true)
	}
	f.Add([]byte(" 4242 Dl\n"), false)
	f.Fuzz(func(t *testing.T, b []byte, full bool) {
		n := 2
		if full {
			n = 4
		}
		rows, err := ParsePS(b, n)
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.PID <= 0 || r.Stat == "" {
				t.Fatalf("bad row %+v", r)
			}
		}
		_, _ = ParseFuser(b)
	})
}
