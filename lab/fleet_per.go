package lab

import (
	"context"
	"fmt"
	"os"
)

// MaxFleetPerServices bounds StartFleetPer's services.
const MaxFleetPerServices = 1024

// StartFleetPer is StartFleet with perNode services on each node (1 to 8,
// splitting its 8 GPUs evenly) instead of PerNode: n services on
// ceil(n/perNode) nodes, n from 1 to MaxFleetPerServices. It is for
// measuring opsbot at many nodes (256 nodes of 2 services each).
func StartFleetPer(ctx context.Context, n, perNode int, opts Options) (*Fleet, error) {
	if n < 1 || n > MaxFleetPerServices {
		return nil, fmt.Errorf("start fleet: %d services: want 1 to %d", n, MaxFleetPerServices)
	}
	if perNode < 1 || perNode > 8 {
		return nil, fmt.Errorf("start fleet: %d services per node: want 1 to 8", perNode)
	}
	dir, err := os.MkdirTemp("", "opsbot-fleet-")
	if err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	f := &Fleet{dir: dir}
	for i := 0; n > 0; i++ {
		if err := ctx.Err(); err != nil {
			f.Close()
			return nil, fmt.Errorf("start fleet: %w", err)
		}
		o := opts
		o.Node = fmt.Sprintf("n%d", i+1)
		o.Services = min(perNode, n)
		o.Dir = dir // one client key for every node; host names do not collide
		n -= o.Services
		l, err := Start(ctx, o)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("start fleet node %s: %w", o.Node, err)
		}
		f.Labs = append(f.Labs, l)
	}
	return f, nil
}
