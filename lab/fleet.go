package lab

import (
	"context"
	"os"
)

// Fleet is N simulated services on N/4 Proxmox nodes (the last one may
// have fewer), each node a Lab of its own named n1, n2, ... with four
// services of two GPUs each, all reachable with one client key. It is for
// measuring how opsbot's cost grows with the number of services.
type Fleet struct {
	Labs []*Lab
	dir  string
}

// PerNode is how many services StartFleet puts on one node.
const PerNode = 4

// StartFleet starts n services (1 to MaxFleetPerServices) on ceil(n/4)
// nodes with opts (Services, Node and Dir are set per node; Faults apply to
// all): StartFleetPer with PerNode. Close stops them all.
func StartFleet(ctx context.Context, n int, opts Options) (*Fleet, error) {
	return StartFleetPer(ctx, n, PerNode, opts)
}

// Topology joins the nodes' topologies.
func (f *Fleet) Topology() Topology {
	var t Topology
	for _, l := range f.Labs {
		lt := l.Topology()
		t.ClientKeyPEM = lt.ClientKeyPEM
		t.Hosts = append(t.Hosts, lt.Hosts...)
		t.KnownHosts = append(t.KnownHosts, lt.KnownHosts...)
		t.Services = append(t.Services, lt.Services...)
	}
	return t
}

// WaitReady waits until every service of the fleet serves.
func (f *Fleet) WaitReady(ctx context.Context) error {
	for _, l := range f.Labs {
		for _, s := range l.services {
			if err := l.WaitReady(ctx, s.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteConfig writes an opsbot config that reaches every service of the
// fleet into dir, as Lab.WriteConfig does for one node, and returns its path.
func (f *Fleet) WriteConfig(dir string) (string, error) {
	return writeConfig("fleet", dir, f.Topology(), "", "")
}

// Close stops every node and removes the fleet's directory.
func (f *Fleet) Close() error {
	for _, l := range f.Labs {
		l.Close()
	}
	return os.RemoveAll(f.dir)
}
