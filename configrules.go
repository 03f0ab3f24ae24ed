package gated

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// checkRules validates what ties several keys together, once the defaults are filled in: the
// sum of all B against gate_max_conns, the limits of gate_concurrent=auto, the keys that need a
// PostgreSQL driver (the rows of dsnKeys marked postgres), the keys that a transaction pooler or
// a fleet rule out, the pgx hooks, and a gate_ key left in the inner DSN. Each key's value on its
// own is its row's check, run before (checkGiven). Every error is a *DSNError naming one key.
func (c *Config) checkRules() error {
	wB := workloadsB(c.Workloads)
	switch {
	case c.Concurrent <= 0:
		// Only a default can get here: the workloads took every permit of MaxConns.
		return &DSNError{Key: keyWorkloads, Err: fmt.Errorf("the workloads' B add up to %d, leaving no execution permit of gate_max_conns (%d) for the default workload", wB, c.MaxConns)}
	case wB > 0 && c.Concurrent+wB > c.MaxConns:
		// Σ B > P would make operations wait for a physical connection, the wait the gates
		// exist to replace.
		return &DSNError{Key: keyWorkloads, Err: fmt.Errorf("the B of all workloads add up to %d (%s), more than gate_max_conns (%d)", c.Concurrent+wB, sumOfB(c.Concurrent, c.Workloads), c.MaxConns)}
	case c.Concurrent > c.MaxConns:
		// B > P would make operations wait for a physical connection, the wait the gate exists
		// to replace.
		return &DSNError{Key: keyConcurrent, Err: fmt.Errorf("%d is more than gate_max_conns (%d)", c.Concurrent, c.MaxConns)}
	}
	if c.ConcurrentAuto && c.Concurrent != c.MaxConns-wB {
		return &DSNError{Key: keyConcurrent, Err: fmt.Errorf("auto takes gate_max_conns less the workloads' B (%d) as its ceiling, not %d", c.MaxConns-wB, c.Concurrent)}
	}
	if c.ConcurrentAuto && max(c.ConcurrentMin, 1) > c.Concurrent {
		return &DSNError{Key: keyConcurrentMin, Err: fmt.Errorf("%d is more than the default gate's ceiling (%d)", c.ConcurrentMin, c.Concurrent)}
	}
	for _, w := range c.Workloads {
		if w.Auto && max(c.ConcurrentMin, 1) > w.Concurrent {
			return &DSNError{Key: keyConcurrentMin, Err: fmt.Errorf("%d is more than the B of workload %s (%d)", c.ConcurrentMin, shownValue(w.Name), w.Concurrent)}
		}
	}
	if c.MaxConnLifetimeJitter > 0 && c.MaxConnLifetime == None {
		return &DSNError{Key: keyMaxConnLifetimeJitter, Err: errors.New("spreads gate_max_conn_lifetime, which is 0 (no limit)")}
	}
	if c.Driver != "pgx" && c.Driver != "postgres" {
		for _, k := range dsnKeys {
			if !k.postgres {
				continue
			}
			if _, isDefault := k.get(c); !isDefault {
				return &DSNError{Key: k.name, Err: fmt.Errorf("needs a PostgreSQL driver (gate_driver pgx or postgres), not %s", shownValue(c.Driver))}
			}
		}
	}
	if c.Pooler != "" && (c.LockTimeout > 0 || c.StatementTimeout > 0) {
		key := keyLockTimeout
		if c.StatementTimeout > 0 {
			key = keyStmtTimeout
		}
		return &DSNError{Key: key, Err: errors.New("a fixed limit would be a startup parameter, which a transaction pooler refuses (gate_pooler=transaction): set it on the database role instead (ALTER ROLE ... SET)")}
	}
	switch ttl, refresh := c.fleetTTL(), c.fleetRefresh(); {
	case 3*refresh > ttl:
		// A member fences itself two thirds of a TTL after its last refresh: at a third, one
		// refresh may fail without that.
		return &DSNError{Key: keyFleetRefresh, Err: fmt.Errorf("%v is more than a third of gate_fleet_ttl (%v)", refresh, ttl)}
	case c.Fleet && c.Pooler != "":
		return &DSNError{Key: keyFleet, Err: errors.New("cannot hold a lease through a transaction pooler, which ends the session's advisory lock with each transaction: point gate_fleet at the server, or size the pooler's pool instead (docs/fleet.md)")}
	}
	if (c.PgxBeforeConnect != nil || c.PgxAfterConnect != nil) && c.Driver != "pgx" {
		return &DSNError{Key: keyDriver, Err: fmt.Errorf("Config.PgxBeforeConnect and PgxAfterConnect need gate_driver pgx, not %s", shownValue(c.Driver))}
	}
	return checkInnerDSN(c.Driver, c.DSN)
}

// errFleetName is the error of gate_fleet=on without a gate_name. NewConnector checks it, not
// checkRules, so that ParseDSN reads each key on its own.
var errFleetName = &DSNError{Key: keyFleet, Err: errors.New("needs a gate_name: the fleet is every instance of that name on the database")}

// workloadsB returns the sum of the workloads' B: with the default gate's B, at most
// gate_max_conns (checkRules).
func workloadsB(ws []Workload) int {
	n := 0
	for _, w := range ws {
		n += w.Concurrent
	}
	return n
}

// sumOfB spells out the sum of all B for an error: "default 8 + batch 2 + report 1".
func sumOfB(concurrent int, ws []Workload) string {
	var b strings.Builder
	b.WriteString(DefaultWorkload + " " + strconv.Itoa(concurrent))
	for _, w := range ws {
		b.WriteString(" + " + w.Name + " " + strconv.Itoa(w.Concurrent))
	}
	return b.String()
}
