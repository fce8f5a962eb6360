package lab

// The lab's only contact with lab/engine: parse and check a unit's ExecStart like the engine,
// then run the engine behind the unit's port.

import (
	"errors"
	"net/http"
	"time"

	"github.com/opsbot/opsbot/lab/engine"
)

type engSettings struct {
	Flavor      string
	TP          int
	MemFraction float64
	GraphMiB    int                   // CUDA graphs per GPU, beyond mem-fraction-static and the context
	Captures    []engine.GraphCapture // SGLang: the graphs that make GraphMiB, in capture order
	s           engine.Settings
}

// engContextMiB is an engine's CUDA context per GPU, beyond mem-fraction-static.
const engContextMiB = engine.ContextMiB

type engInstance interface {
	Handler() http.Handler
	SetReady(bool)
	Close()
}

type engStartError struct {
	Lines []string
	Exit  int
}

func wrapSettings(s engine.Settings) engSettings {
	return engSettings{Flavor: s.Flavor, TP: s.TP, MemFraction: s.MemFractionStatic, GraphMiB: s.GraphMiB(),
		Captures: s.GraphCaptures(), s: s}
}

func engParse(argv, env []string) (engSettings, *engStartError) {
	s, err := engine.ParseArgv(argv)
	if err != nil {
		var ae *engine.ArgError
		if errors.As(err, &ae) {
			return engSettings{}, &engStartError{Lines: ae.Lines, Exit: ae.ExitStatus}
		}
		return engSettings{}, &engStartError{Lines: []string{err.Error()}, Exit: 2}
	}
	s.ApplyEnv(env)
	return wrapSettings(s), nil
}

// engCheck checks s as the engine does at start, reading the files it names
// (--speculative-adaptive-config) with read: the host's file system.
func engCheck(s engSettings, read func(string) ([]byte, error)) (engSettings, []string, *engStartError) {
	s2, lines, err := engine.CheckFiles(s.s, read)
	if err != nil {
		var se *engine.StartError
		if errors.As(err, &se) {
			return s, lines, &engStartError{Lines: append(lines, se.Lines...), Exit: se.ExitStatus}
		}
		return s, lines, &engStartError{Lines: append(lines, err.Error()), Exit: 1}
	}
	return wrapSettings(s2), lines, nil
}

// engNew runs an engine with the default physics, its verify steps slowdown
// times as long (slowdown <= 1: as they are).
func engNew(s engSettings, log func(string), slowdown float64) engInstance {
	ph := engine.DefaultPhysics()
	if slowdown > 1 {
		ph.T0 = time.Duration(float64(ph.T0) * slowdown)
		ph.C = time.Duration(float64(ph.C) * slowdown)
		ph.BatchC = time.Duration(float64(ph.BatchC) * slowdown)
		ph.VerifyC = time.Duration(float64(ph.VerifyC) * slowdown)
	}
	return engine.New(s.s, engine.Options{Physics: ph, Log: log})
}
