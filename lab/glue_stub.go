//go:build !labengine

package lab

// Stand-in for lab/engine until that package compiles (build with -tags labengine to use the
// real one through glue_engine.go; then delete this file and the tags).

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

type engSettings struct {
	Flavor      string
	TP          int
	MemFraction float64
	raw         any
}

type engInstance interface {
	Handler() http.Handler
	SetReady(bool)
	Close()
}

type engStartError struct {
	Lines []string
	Exit  int
}

func engParse(argv []string) (engSettings, *engStartError) {
	s := engSettings{Flavor: "sglang", TP: 1, MemFraction: 0.88}
	for i, a := range argv {
		if (a == "--tp" || a == "--tensor-parallel-size") && i+1 < len(argv) {
			s.TP, _ = strconv.Atoi(argv[i+1])
		}
		if a == "serve" {
			s.Flavor = "vllm"
		}
		if strings.HasPrefix(a, "--speculative-num-stepz") {
			return s, &engStartError{Lines: []string{"usage: launch_server.py [-h] ...", "launch_server.py: error: unrecognized arguments: " + a}, Exit: 2}
		}
	}
	return s, nil
}

func engCheck(s engSettings) (engSettings, []string, *engStartError) { return s, nil, nil }

type stubEngine struct{ ready atomic.Bool }

func (e *stubEngine) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.ready.Load() {
			w.WriteHeader(503)
			return
		}
		w.Write([]byte("ok"))
	})
}
func (e *stubEngine) SetReady(b bool) { e.ready.Store(b) }
func (e *stubEngine) Close()          {}

func engNew(s engSettings, log func(string)) engInstance { return &stubEngine{} }
