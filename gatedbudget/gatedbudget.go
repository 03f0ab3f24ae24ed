// Package gatedbudget checks a fleet's connection budget against a PostgreSQL server:
//
//	(instances + surge) × P + other ≤ max_connections − superuser_reserved_connections − reserved_connections
//
// where instances is the peak number of application instances (the autoscaling maximum), surge
// the extra instances a rolling deploy runs beside them, P the physical connections one instance
// may open (the sum of gate_max_conns over its gated pools: *sql.DB handles with the same
// gate_name share one) and other everything else
// that connects: administrators, migrations, cron jobs, monitoring. Connections the server keeps
// for superusers (superuser_reserved_connections) and, from PostgreSQL 16 on, for roles with
// pg_use_reserved_connections (reserved_connections) are not available to the application.
// Background workers, autovacuum and (since PostgreSQL 12) WAL senders have slots of their own and
// do not count.
//
// Behind a connection pooler such as PgBouncer the server sees the pooler's connections, not the
// application's: the application's P counts against the pooler's max_client_conn, and what
// counts against max_connections is the pooler's pools (default_pool_size per database and user
// pair, plus reserve_pool_size). Check those numbers instead: pass the pooler's server
// connections as other, or as instances × P.
//
// A pool with gate_fleet=on (see docs/fleet.md) is different: its gate_max_conns is the total of
// working connections of all the fleet's instances, held by the fleet as a whole, and each
// instance keeps one lease connection more, outside that total:
//
//	(instances + surge) × P + fleet totals + (instances + surge) + other ≤ max_connections − superuser_reserved_connections − reserved_connections
//
// with P the pools without gate_fleet=on ([Plan.FleetConns], [Plan.FleetLeases]).
//
// The check reads a PostgreSQL server. For MySQL and MariaDB (gate_driver=mysql) the same formula
// holds against max_connections with P+1 per gated *sql.DB: gated opens one session of its own
// beyond P to stop canceled statements (KILL QUERY).
//
// The command cmd/gatedbudget prints the same [Report] for CI; a service can call [Check] at
// start-up:
//
//	c, _ := gated.FromDB(db)
//	r, err := gatedbudget.Check(ctx, db, gatedbudget.Plan{
//		Instances: 12, Surge: 3, Other: 10, PerInstance: c.Config().MaxConns,
//	})
//	if err == nil && !r.Fits {
//		log.Printf("connection budget exceeded:\n%s", r)
//	}
//
// The package uses only the standard library and gated's root package; it queries through any
// *sql.DB connected to PostgreSQL (gated or not).
package gatedbudget

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gatedsql/gated"
)

// Settings are the server's connection limits, as the server reports them.
type Settings struct {
	MaxConnections    int // max_connections
	SuperuserReserved int // superuser_reserved_connections
	Reserved          int // reserved_connections (PostgreSQL 16+; 0 before)
}

// Available returns the connections the application may plan for: max_connections minus both
// reserves.
func (s Settings) Available() int { return s.MaxConnections - s.SuperuserReserved - s.Reserved }

// Plan is the fleet's side of the budget.
type Plan struct {
	Instances   int // peak instances (the autoscaling maximum), ≥ 1
	Surge       int // extra instances during a rolling deploy, ≥ 0
	Other       int // connections of everything else, ≥ 0
	PerInstance int // P: physical connections per instance (Σ gate_max_conns of the pools without gate_fleet=on), ≥ 0, ≥ 1 without FleetConns
	// FleetConns is Σ gate_max_conns of the pools with gate_fleet=on, ≥ 0: each is the total of
	// working connections of all the fleet's instances, held by the fleet as a whole, so it
	// counts once, not per instance; each instance holds one lease connection more, outside the
	// total (FleetLeases).
	FleetConns int
}

// FleetLeases is how many connections a plan's fleets hold beside their totals: each instance's
// lease connection, one per instance, surge included, for each gated pool with gate_fleet=on that
// an instance opens (counted once here: one such pool per instance, as is usual; count the others
// in Other).
func (p Plan) FleetLeases() int {
	if p.FleetConns == 0 {
		return 0
	}
	return p.Instances + p.Surge
}

// FleetJoining is FleetLeases, under the name of the time when only a joining instance's lease
// connection counted above the total.
//
// Deprecated: use FleetLeases; every instance's lease connection is outside the total.
func (p Plan) FleetJoining() int { return p.FleetLeases() }

// Report is the budget worked out for one server and one plan.
type Report struct {
	Settings Settings
	Plan     Plan

	Available      int  // Settings.Available()
	Needed         int  // (Instances + Surge) × PerInstance + FleetConns + FleetLeases + Other
	Headroom       int  // Available − Needed; negative when it does not fit
	MaxPerInstance int  // the largest P that fits with this plan; 0 when none does
	Fits           bool // Needed ≤ Available
}

// Evaluate works out the budget. It fails only for a plan outside the ranges documented on
// [Plan].
func Evaluate(s Settings, p Plan) (Report, error) {
	switch {
	case p.Instances < 1:
		return Report{}, fmt.Errorf("gated: budget: instances must be at least 1, not %d", p.Instances)
	case p.Surge < 0:
		return Report{}, fmt.Errorf("gated: budget: surge must not be negative, not %d", p.Surge)
	case p.Other < 0:
		return Report{}, fmt.Errorf("gated: budget: other must not be negative, not %d", p.Other)
	case p.FleetConns < 0:
		return Report{}, fmt.Errorf("gated: budget: fleet connections must not be negative, not %d", p.FleetConns)
	case p.PerInstance < 0 || p.PerInstance == 0 && p.FleetConns == 0:
		return Report{}, fmt.Errorf("gated: budget: connections per instance must be at least 1, not %d", p.PerInstance)
	}
	r := Report{Settings: s, Plan: p, Available: s.Available()}
	fleet := p.FleetConns + p.FleetLeases()
	r.Needed = (p.Instances+p.Surge)*p.PerInstance + fleet + p.Other
	r.Headroom = r.Available - r.Needed
	r.Fits = r.Headroom >= 0
	r.MaxPerInstance = max((r.Available-p.Other-fleet)/(p.Instances+p.Surge), 0)
	return r, nil
}

// String returns the report as the command prints it: the formula with its numbers, the headroom
// and the largest P that fits.
func (r Report) String() string {
	var b strings.Builder
	s, p := r.Settings, r.Plan
	fmt.Fprintf(&b, "available: max_connections %d − superuser_reserved_connections %d − reserved_connections %d = %d\n",
		s.MaxConnections, s.SuperuserReserved, s.Reserved, r.Available)
	if p.FleetConns > 0 {
		fmt.Fprintf(&b, "needed:    (instances %d + surge %d) × P %d + fleet totals %d + leases %d + other %d = %d\n",
			p.Instances, p.Surge, p.PerInstance, p.FleetConns, p.FleetLeases(), p.Other, r.Needed)
	} else {
		fmt.Fprintf(&b, "needed:    (instances %d + surge %d) × P %d + other %d = %d\n",
			p.Instances, p.Surge, p.PerInstance, p.Other, r.Needed)
	}
	verdict := "fits"
	if !r.Fits {
		verdict = "does NOT fit"
	}
	fmt.Fprintf(&b, "headroom:  %d − %d = %d: %s\n", r.Available, r.Needed, r.Headroom, verdict)
	if p.FleetConns > 0 {
		fmt.Fprintf(&b, "largest P per instance that fits beside the fleets: %d\n", r.MaxPerInstance)
	} else {
		fmt.Fprintf(&b, "largest P per instance that fits: %d\n", r.MaxPerInstance)
	}
	return b.String()
}

// ReadSettings reads max_connections, superuser_reserved_connections and reserved_connections
// from the server behind db (pg_settings; reserved_connections is 0 on servers before 16, which
// lack it). It runs one query under ctx.
func ReadSettings(ctx context.Context, db *sql.DB) (Settings, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, setting FROM pg_settings
		WHERE name IN ('max_connections', 'superuser_reserved_connections', 'reserved_connections')`)
	if err != nil {
		return Settings{}, fmt.Errorf("gated: budget: reading the server's settings: %w", err)
	}
	defer rows.Close()
	var s Settings
	seen := 0
	for rows.Next() {
		var name, setting string
		if err := rows.Scan(&name, &setting); err != nil {
			return Settings{}, fmt.Errorf("gated: budget: reading the server's settings: %w", err)
		}
		n, err := strconv.Atoi(setting)
		if err != nil {
			return Settings{}, fmt.Errorf("gated: budget: setting %s is %q, not a number", name, setting)
		}
		switch name {
		case "max_connections":
			s.MaxConnections = n
			seen++
		case "superuser_reserved_connections":
			s.SuperuserReserved = n
		case "reserved_connections":
			s.Reserved = n
		}
	}
	if err := rows.Err(); err != nil {
		return Settings{}, fmt.Errorf("gated: budget: reading the server's settings: %w", err)
	}
	if seen == 0 {
		return Settings{}, errors.New("gated: budget: the server reports no max_connections (is it PostgreSQL?)")
	}
	return s, nil
}

// Check reads the server's settings through db and evaluates plan against them.
func Check(ctx context.Context, db *sql.DB, plan Plan) (Report, error) {
	if _, err := Evaluate(Settings{}, plan); err != nil {
		return Report{}, err
	}
	s, err := ReadSettings(ctx, db)
	if err != nil {
		return Report{}, err
	}
	return Evaluate(s, plan)
}

// PerInstance returns P for gated DSNs: the sum of gate_max_conns (10 where a DSN does not set
// it) over their pools without gate_fleet=on (those count once, see [FleetConns]), each pool
// counted once: DSNs with the same gate_name share one gate set
// and one pool in a process (see [Pools]). Errors are gated.ParseDSN's, which never contain a
// password, or that DSNs sharing a gate_name give it different gate_max_conns.
func PerInstance(dsns ...string) (int, error) {
	pools, err := Pools(dsns...)
	if err != nil {
		return 0, err
	}
	p := 0
	for _, pl := range pools {
		if !pl.Fleet {
			p += pl.MaxConns
		}
	}
	return p, nil
}

// FleetConns returns Plan.FleetConns for gated DSNs: the sum of gate_max_conns over their pools
// with gate_fleet=on, each the total of its fleet, counted once. Errors are those of [Pools].
func FleetConns(dsns ...string) (int, error) {
	pools, err := Pools(dsns...)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pl := range pools {
		if pl.Fleet {
			n += pl.MaxConns
		}
	}
	return n, nil
}

// A Pool is one physical pool of an instance: the pool of one DSN, or the one pool that DSNs
// with the same gate_name share.
type Pool struct {
	Name     string // the gate_name; "" for a DSN without one
	MaxConns int    // its gate_max_conns, P of this pool; with Fleet, the total of all the fleet's instances
	DSNs     int    // how many of the DSNs use it
	Fleet    bool   // gate_fleet=on: the pool is the instance's share of a fleet's MaxConns
}

// Pools returns the distinct pools of dsns, in the order each first appears. DSNs with the same
// gate_name share a pool, which counts once; their gate_max_conns must then be equal, as gated
// itself requires when the second opens. Errors are gated.ParseDSN's, or that difference.
func Pools(dsns ...string) ([]Pool, error) {
	var pools []Pool
	byName := map[string]int{}
	for i, dsn := range dsns {
		cfg, err := gated.ParseDSN(dsn)
		if err != nil {
			return nil, err
		}
		if cfg.Name != "" {
			if j, ok := byName[cfg.Name]; ok {
				if pools[j].MaxConns != cfg.MaxConns {
					return nil, fmt.Errorf("gated: budget: DSN %d shares gate_name %q with an earlier DSN but sets gate_max_conns %d, not %d; gated refuses to open it",
						i+1, cfg.Name, cfg.MaxConns, pools[j].MaxConns)
				}
				pools[j].DSNs++
				continue
			}
			byName[cfg.Name] = len(pools)
		}
		pools = append(pools, Pool{Name: cfg.Name, MaxConns: cfg.MaxConns, DSNs: 1, Fleet: cfg.Fleet}) // ParseDSN applied the default
	}
	return pools, nil
}

// Backends is one group of the server's client backends.
type Backends struct {
	ApplicationName string // "" when the client set none
	State           string // active, idle, idle in transaction, ...; "" when not visible to this role
	Count           int
}

// Live returns the server's client backends now, grouped by application_name and state, in that
// order (from pg_stat_activity; the connection running the query is counted as active). A role
// without pg_read_all_stats sees other roles' backends with an empty state.
func Live(ctx context.Context, db *sql.DB) ([]Backends, error) {
	rows, err := db.QueryContext(ctx, `SELECT coalesce(application_name, ''), coalesce(state, ''), count(*)
		FROM pg_stat_activity WHERE backend_type = 'client backend'
		GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("gated: budget: reading pg_stat_activity: %w", err)
	}
	defer rows.Close()
	var out []Backends
	for rows.Next() {
		var b Backends
		if err := rows.Scan(&b.ApplicationName, &b.State, &b.Count); err != nil {
			return nil, fmt.Errorf("gated: budget: reading pg_stat_activity: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("gated: budget: reading pg_stat_activity: %w", err)
	}
	return out, nil
}
