package gated

import (
	"context"
	"time"

	"github.com/gatedsql/gated/internal/fleet"
)

// The gate set's side of gate_fleet=on: internal/fleet keeps the membership and computes the
// share; a set starts its member here and is moved to its share by a setTarget.

// setTarget is the fleet.Target of a real instance: its gate set's pool and gates.
//
// The hook for gate_concurrent=auto: a gate whose B adapts must take the share's B as its
// ceiling, not as its B. ShrinkTo and GrowTo set each gate's B with setLimits; for an adaptive
// gate that call is where the share becomes the limiter's ceiling (lowered before the share is
// declared, as a fixed B is, and the limiter's B clamped to it at once), and withinLimits must
// then wait for running ≤ that ceiling.
type setTarget struct{ set *gateSet }

// shrinkPoll is how often ShrinkTo looks whether running work has come within the new share.
const shrinkPoll = 2 * time.Millisecond

// ShrinkTo lowers B and Q of every gate first, then P, so that the gates' B never add up to more
// than P, and waits until running operations and open connections are within them: lowering
// takes nothing from running work (see gate.setLimits and pool.setMax).
func (t setTarget) ShrinkTo(ctx context.Context, s fleet.Share) error {
	for i, g := range t.set.gates() {
		g.setLimits(s.Concurrent[i], s.Queue[i])
	}
	t.set.pool.setMax(s.DataConns())
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

// GrowTo raises P first, then B and Q, for the same reason.
func (t setTarget) GrowTo(s fleet.Share) {
	t.set.pool.setMax(s.DataConns())
	for i, g := range t.set.gates() {
		g.setLimits(s.Concurrent[i], s.Queue[i])
	}
}

// fleetTotals returns the totals a normalized cfg sets for its fleet.
func fleetTotals(cfg *Config) fleet.Share {
	t := fleet.Share{Conns: cfg.MaxConns, Concurrent: []int{cfg.Concurrent}, Queue: []int{orZero(cfg.Queue)}}
	for _, w := range cfg.Workloads {
		t.Concurrent = append(t.Concurrent, w.Concurrent)
		t.Queue = append(t.Queue, orZero(w.Queue))
	}
	return t
}

// startFleet makes the set a member of its fleet: it starts holding nothing, so that its gates
// refuse every operation until the database has granted it a share.
func (set *gateSet) startFleet(cfg *Config, dial func(context.Context) (fleet.Conn, error)) {
	totals := fleetTotals(cfg)
	t := setTarget{set}
	t.ShrinkTo(context.Background(), fleet.ZeroShare(len(totals.Concurrent))) // returns at once: nothing runs yet
	set.fleet = fleet.New(fleet.Config{
		Name: cfg.Name, Table: cfg.fleetTable(), TTL: cfg.fleetTTL(), Refresh: cfg.fleetRefresh(),
		Totals: totals, Info: fleet.Info(),
	}, dial, t, cfg.Logger)
	set.fleet.Start()
}

// fleetStats fills s.Fleet for gate g of the set.
func (set *gateSet) fleetStats(s *Stats, g *gate) {
	if set.fleet == nil {
		return
	}
	s.Fleet = FleetStats(set.fleet.Stats())
	totals := set.fleet.Totals()
	for i, sg := range set.gates() {
		if sg == g {
			s.Fleet.TotalConcurrent = totals.Concurrent[i]
			s.Fleet.TotalQueue = totals.Queue[i]
		}
	}
}
