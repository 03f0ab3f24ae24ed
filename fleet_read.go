package gated

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/gatedsql/gated/internal/fleet"
)

// A FleetMember is one instance of a fleet (gate_fleet=on) as the fleet's table records it.
type FleetMember struct {
	ID         int32         // the member's id in the table
	Info       string        // the instance's host and process id
	Joined     time.Time     // when it joined, by the database's clock
	LeaseLeft  time.Duration // until its lease expires by the database's clock; negative once expired
	Live       bool          // counted in the fleet: lease not expired, or its lease connection still holds its lock
	Conns      int           // its declared share of gate_max_conns, its working connections; its lease connection is one more (0: joining, fenced or without a seat)
	Concurrent []int         // its declared share of each gate's B: the default workload's first, then gate_workloads'
	Queue      []int         // its declared share of each gate's Q
	TotalConns int           // the gate_max_conns it was configured with
}

// ReadFleet returns the members of the fleet of cfg (its gate_name and gate_fleet_table), live
// or not, in the order they joined, read with db: what each has declared, which the live ones
// never add up to more than the totals. It changes nothing; db needs only to read the table. It
// returns an error wrapping the server's when the table does not exist. Safe for concurrent use.
func ReadFleet(ctx context.Context, db *sql.DB, cfg *Config) ([]FleetMember, error) {
	if cfg.Name == "" {
		return nil, errFleetName
	}
	table := cfg.fleetTable()
	if !fleet.ValidTable(table) {
		return nil, &DSNError{Key: keyFleetTable, Err: fmt.Errorf("invalid value %s", shownValue(table))}
	}
	recs, err := fleet.Read(ctx, db, cfg.Name, table)
	if err != nil {
		return nil, err
	}
	var out []FleetMember
	for _, r := range recs {
		out = append(out, FleetMember(r))
	}
	return out, nil
}
