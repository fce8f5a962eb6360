package ops

// The steps of the pipelines, by the names their events carry, for
// HostAfter. (StepWriteUnit and StepStart are in result.go.)
const (
	stepStop   = "stop"
	stepClear  = "clear GPUs"
	stepReady  = "wait until ready"
	stepVerify = "verify"
	stepBench  = "benchmark"
)

// HostAfter says what a service's host may be running when all that is
// known of a job that changes it is the events it recorded, evs (oldest
// first), and that the process running it stopped after the last one (a
// crash, a kill, a store that refused its writes until it ended). It reads
// the last step, and whether a unit was written: "the host may run the new
// unit". A step a job had begun may have gone further than its events say,
// so it says "may".
func HostAfter(evs []Event) string {
	if len(evs) == 0 {
		return "no step of it was recorded, so the host may be mid-change"
	}
	writes := 0
	for _, e := range evs {
		if e.Step == StepWriteUnit && e.Status == StepStarted {
			writes++
		}
	}
	switch evs[len(evs)-1].Step {
	case StepStart, stepReady, stepVerify, stepBench:
		switch writes {
		case 0:
			return "the service may be starting or serving"
		case 1:
			return "the host may run the new unit"
		}
		return "the host may run the new unit or the previous one (it was rolling back)"
	case StepWriteUnit:
		return "the unit may be the previous or the new text (a write is whole or not at all), and the service stopped"
	case stepStop, stepClear:
		if writes > 0 {
			return "the service may be stopped, with the new unit or the previous one in place"
		}
		return "the service may be stopped, its unit unchanged"
	}
	return "the host may be mid-change"
}
