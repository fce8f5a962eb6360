package ops

// BenchParams are the benchmark knobs of a job; 0 means the configured default.
type BenchParams struct {
	Prompts, Concurrency, InputLen, OutputLen int
}

// DefaultBench returns the benchmark knobs of a job when neither the command
// nor the config sets them: 16 prompts, one at a time, 256 tokens in, 256 out.
// It is their one home: the config and the command language default to them.
func DefaultBench() BenchParams {
	return BenchParams{Prompts: 16, Concurrency: 1, InputLen: 256, OutputLen: 256}
}
