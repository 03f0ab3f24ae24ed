package gated

import (
	"context"
	"time"
)

// setTarget is the shareTarget of a real instance: its gate set's pool and gates.
//
// The hook for gate_concurrent=auto: a gate whose B adapts must take the share's B as its
// ceiling, not as its B. shrinkTo and growTo set each gate's B with setLimits; for an adaptive
// gate that call is where the share becomes the limiter's ceiling (lowered before the share is
// declared, as a fixed B is, and the limiter's B clamped to it at once), and withinLimits must
// then wait for running ≤ that ceiling.
type setTarget struct{ set *gateSet }

// shrinkPoll is how often shrinkTo looks whether running work has come within the new share.
const shrinkPoll = 2 * time.Millisecond

// shrinkTo lowers B and Q of every gate first, then P, so that the gates' B never add up to more
// than P, and waits until running operations and open connections are within them: lowering
// takes nothing from running work (see gate.setLimits and pool.setMax).
func (t setTarget) shrinkTo(ctx context.Context, s share) error {
	for i, g := range t.set.gates() {
		g.setLimits(s.concurrent[i], s.queue[i])
	}
	t.set.pool.setMax(s.dataConns())
	tick := time.NewTicker(shrinkPoll)
	defer tick.Stop()
	for !t.within() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func (t setTarget) within() bool {
	for _, g := range t.set.gates() {
		if !g.withinLimits() {
			return false
		}
	}
	return t.set.pool.withinMax()
}

// growTo raises P first, then B and Q, for the same reason.
func (t setTarget) growTo(s share) {
	t.set.pool.setMax(s.dataConns())
	for i, g := range t.set.gates() {
		g.setLimits(s.concurrent[i], s.queue[i])
	}
}

// fleetTotals returns the totals a normalized cfg sets for its fleet.
func fleetTotals(cfg *Config) share {
	t := share{conns: cfg.MaxConns, concurrent: []int{cfg.Concurrent}, queue: []int{orZero(cfg.Queue)}}
	for _, w := range cfg.Workloads {
		t.concurrent = append(t.concurrent, w.Concurrent)
		t.queue = append(t.queue, orZero(w.Queue))
	}
	return t
}

// startFleet makes the set a member of its fleet: it starts holding nothing, so that its gates
// refuse every operation until the database has granted it a share.
func (set *gateSet) startFleet(cfg *Config, dial func(context.Context) (leaseConn, error)) {
	totals := fleetTotals(cfg)
	t := setTarget{set}
	t.shrinkTo(context.Background(), zeroShare(len(totals.concurrent))) // returns at once: nothing runs yet
	set.fleet = newFleetMember(fleetConfig{
		name: cfg.Name, table: cfg.fleetTable(), ttl: cfg.fleetTTL(), refresh: cfg.fleetRefresh(),
		totals: totals, info: fleetInfo(),
	}, dial, t, cfg.Logger)
	set.fleet.start()
}

// fleetStats fills s.Fleet for gate g of the set.
func (set *gateSet) fleetStats(s *Stats, g *gate) {
	if set.fleet == nil {
		return
	}
	s.Fleet = set.fleet.stats()
	for i, sg := range set.gates() {
		if sg == g {
			s.Fleet.TotalConcurrent = set.fleet.cfg.totals.concurrent[i]
			s.Fleet.TotalQueue = set.fleet.cfg.totals.queue[i]
		}
	}
}
