package commands

import "testing"

// benchMix is a realistic mix of what people type: mostly mtp/svc/gpu/bench, some
// sweeps and schedules, a few mistakes.
var benchMix = []string{
	"/mtp steps 10",
	"!mtp steps 4 qwen --dry-run",
	"mtp show",
	"gpu status",
	"/gpu recover gpu1 --no-start",
	"svc logs qwen lines=200",
	"svc status",
	"svc restart qwen",
	"bench prompts=200 concurrency=16 in=1024 out=256",
	"sweep qwen steps 1..5,10",
	"/sweep steps 1, 2, 4, 8 —dry-run",
	`schedule add "0 3 * * *" sweep qwen steps 1..5`,
	"jobs",
	"cancel #42",
	"history n=20",
	"help",
	"mtp steps 40",
	"mtp steps 10; rm -rf /",
	"bench promts=10",
	"mtp stpes 10",
}

func benchOptions() Options {
	return Options{
		Services: []ServiceRef{{Name: "qwen", Host: "gpu1"}},
		Hosts:    []string{"gpu1", "pve"},
	}
}

// BenchmarkParse parses the mix round-robin; ns/op is per command.
func BenchmarkParse(b *testing.B) {
	opts := benchOptions()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _ = Parse(benchMix[i%len(benchMix)], opts)
		i++
	}
}

// BenchmarkParseValid parses only the accepted commands of the mix.
func BenchmarkParseValid(b *testing.B) {
	opts := benchOptions()
	var valid []string
	for _, s := range benchMix {
		if _, err := Parse(s, opts); err == nil {
			valid = append(valid, s)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _ = Parse(valid[i%len(valid)], opts)
		i++
	}
	b.ReportMetric(float64(len(valid)), "commands")
}

// BenchmarkParseSimple is the common case: `/mtp steps 10` with one service.
func BenchmarkParseSimple(b *testing.B) {
	opts := benchOptions()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Parse("/mtp steps 10", opts)
	}
}
