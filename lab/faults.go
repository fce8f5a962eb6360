package lab

import (
	"fmt"
	"strings"
	"time"
)

// Fault is a failure the lab injects, chosen by name.
//
//	orphans         on stop, the engine's scheduler workers survive, reparented to pid 1, keeping
//	                their GPU memory (the incident's restart loop); like the left-over processes
//	                of a KillMode=process unit they stay in the unit's cgroup, and the stop ends
//	                without them
//	dstate          on stop, scheduler_TP0 enters D state: no signal kills it, it keeps its memory
//	slow-load=DUR   the engine's model load takes DUR longer than Options.LoadTime (simulated
//	                time, scaled like all lab time: slow-load=5m adds 12 s at the default x25)
//	crash-on-start  the engine crashes at start with a Python traceback whenever its ExecStart argv
//	                differs from the one the lab was seeded with (a rollback starts fine)
//	ssh-drop        the next systemctl start/stop/restart drops the SSH connection after the
//	                action took effect (once)
type Fault struct {
	Name     string
	Duration time.Duration // slow-load only
}

func (f Fault) String() string {
	if f.Name == "slow-load" {
		return "slow-load=" + f.Duration.String()
	}
	return f.Name
}

// FaultError reports a fault list that cannot be parsed.
type FaultError struct {
	Item    string
	Problem string
}

func (e *FaultError) Error() string {
	return fmt.Sprintf("fault %q: %s (known: orphans, dstate, slow-load=DUR, crash-on-start, ssh-drop)", e.Item, e.Problem)
}

// ParseFaults parses a comma separated fault list such as "orphans,slow-load=3m". Blank input is
// no faults. Unknown names, duplicates, a missing or invalid duration, or a value given to a
// fault that takes none are a *FaultError.
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, hasVal := strings.Cut(item, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		f := Fault{Name: name}
		switch name {
		case "orphans", "dstate", "crash-on-start", "ssh-drop":
			if hasVal {
				return nil, &FaultError{Item: item, Problem: "takes no value"}
			}
		case "slow-load":
			if !hasVal {
				return nil, &FaultError{Item: item, Problem: "needs a duration, e.g. slow-load=5m"}
			}
			d, err := time.ParseDuration(strings.TrimSpace(val))
			if err != nil || d <= 0 {
				return nil, &FaultError{Item: item, Problem: "invalid duration " + fmt.Sprintf("%q", val)}
			}
			f.Duration = d
		default:
			return nil, &FaultError{Item: item, Problem: "unknown fault"}
		}
		if seen[name] {
			return nil, &FaultError{Item: item, Problem: "given twice"}
		}
		seen[name] = true
		out = append(out, f)
	}
	return out, nil
}

type faultSet struct {
	orphans, dstate, crashOnStart bool
	slowLoad                      time.Duration
	sshDropArmed                  bool // guarded by world.mu
}

func newFaultSet(fs []Fault) faultSet {
	var s faultSet
	for _, f := range fs {
		switch f.Name {
		case "orphans":
			s.orphans = true
		case "dstate":
			s.dstate = true
		case "crash-on-start":
			s.crashOnStart = true
		case "slow-load":
			s.slowLoad = f.Duration
		case "ssh-drop":
			s.sshDropArmed = true
		}
	}
	return s
}
