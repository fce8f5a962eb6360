package unit

import (
	"os"
	"testing"
)

// BenchmarkSetSteps measures parse + edit + verification of the incident unit.
func BenchmarkSetSteps(b *testing.B) {
	text, err := os.ReadFile("testdata/edit/sglang-incident.service")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := SetSteps(string(text), 10, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/edit")
}
