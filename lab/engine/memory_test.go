package engine

import "testing"

// The CUDA graphs' memory decides whether a start fits the lab's H100 at the
// default --mem-fraction-static: steps 13 fit, steps 14 do not, and each of
// SGLang's remedies makes steps 14 fit again.
func TestGraphMemoryFitsTheGPU(t *testing.T) {
	const total = 81559 // MiB, the lab's H100 80GB
	for _, tc := range []struct {
		name, extra string
		fits        bool
	}{
		{"default steps 3", "", true},
		{"steps 13", "--speculative-num-steps 13 --speculative-num-draft-tokens 14", true},
		{"steps 14", "--speculative-num-steps 14 --speculative-num-draft-tokens 15", false},
		{"steps 16", "--speculative-num-steps 16 --speculative-num-draft-tokens 17", false},
		{"steps 14, mem-fraction-static 0.8", "--speculative-num-steps 14 --speculative-num-draft-tokens 15 --mem-fraction-static 0.8", true},
		{"steps 14, cuda-graph-max-bs 16", "--speculative-num-steps 14 --speculative-num-draft-tokens 15 --cuda-graph-max-bs 16", true},
		{"steps 14, no cuda graph", "--speculative-num-steps 14 --speculative-num-draft-tokens 15 --disable-cuda-graph", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := Check(mustParse(t, sglangTestArgv(tc.extra)))
			if err != nil {
				t.Fatal(err)
			}
			static := int(s.MemFractionStatic * total)
			free := total - static - ContextMiB
			if got := s.GraphMiB() <= free; got != tc.fits {
				t.Errorf("graphs %d MiB with %d MiB free beyond mem-fraction-static %.2f: fits %v, want %v", s.GraphMiB(), free, s.MemFractionStatic, got, tc.fits)
			}
		})
	}
}
