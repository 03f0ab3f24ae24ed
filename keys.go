package gated

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gatedsql/gated/internal/fleet"
)

// The DSN keys gated reads. Every key with gatePrefix belongs to gated, so a misspelt one is an
// error instead of a parameter silently forwarded to the database server.
const (
	gatePrefix               = "gate_"
	keyDriver                = "gate_driver"
	keyMaxConns              = "gate_max_conns"
	keyConcurrent            = "gate_concurrent"
	keyConcurrentMin         = "gate_concurrent_min"
	keyQueue                 = "gate_queue"
	keyQueueWait             = "gate_queue_wait"
	keyMaxConnLifetime       = "gate_max_conn_lifetime"
	keyMaxConnLifetimeJitter = "gate_max_conn_lifetime_jitter"
	keyMaxConnIdleTime       = "gate_max_conn_idle_time"
	keyQueueOrder            = "gate_queue_order"
	keyWorkloads             = "gate_workloads"
	keyName                  = "gate_name"
	keyStmtTimeout           = "gate_statement_timeout"
	keyLockTimeout           = "gate_lock_timeout"
	keyPooler                = "gate_pooler"
	keyFleet                 = "gate_fleet"
	keyFleetTable            = "gate_fleet_table"
	keyFleetTTL              = "gate_fleet_ttl"
	keyFleetRefresh          = "gate_fleet_refresh"
)

// A dsnKey is everything gated knows of one gate_ key: how ParseDSN reads its value into a
// Config, its default, what values it takes, whether it needs PostgreSQL, and how FormatDSN and
// sameGate read it back. A new key is a new row of dsnKeys and its field of Config; the rules
// that tie several keys together are in checkRules (config.go). TestDSNKeysTable checks
// that every row parses, formats, round-trips, is compared and is documented.
type dsnKey struct {
	name string
	// set stores the key's value, as the DSN gives it, in c (see keyvalues.go for the syntax).
	set func(c *Config, value string) error
	// get returns the key's value in c, whose defaults are filled in, as FormatDSN writes it,
	// and whether it is the value ParseDSN gives the key when the DSN does not name it. Equal
	// gates have equal values.
	get func(c *Config) (value string, isDefault bool)
	// fill, when not nil, gives the key's zero field its default, and writes a spelling of the
	// default that has a zero of its own ("fifo", "none", None timeouts) as that zero, so that
	// equal gates have equal Configs. fillDefaults runs the rows in order, so a default may
	// follow the value of an earlier row's key. A key without fill keeps zero for its default.
	fill func(c *Config)
	// check, when not nil, validates the key's field as given, before the defaults are filled
	// in; its error is wrapped in a *DSNError naming the key.
	check func(c *Config) error
	// postgres: any value but the default needs a PostgreSQL driver (gate_driver pgx or
	// postgres).
	postgres bool
}

// dsnKeys lists the keys in the order FormatDSN writes them, sameGate compares them and
// fillDefaults fills them in.
var dsnKeys = [...]dsnKey{
	{
		name: keyDriver,
		set: func(c *Config, v string) error {
			switch v {
			case "":
				return errEmptyDriver
			case DriverName:
				return errSelfDriver
			}
			c.Driver = v
			return nil
		},
		get: func(c *Config) (string, bool) { return c.Driver, c.Driver == defaultDriver },
		fill: func(c *Config) {
			if c.Driver == "" {
				c.Driver = defaultDriver
			}
		},
		check: func(c *Config) error {
			if c.Driver == DriverName {
				return errSelfDriver
			}
			return nil
		},
	},
	{
		name: keyMaxConns,
		set: func(c *Config, v string) (err error) {
			c.MaxConns, err = parseCount(v, 1)
			return err
		},
		get: func(c *Config) (string, bool) { return strconv.Itoa(c.MaxConns), c.MaxConns == defaultMaxConns },
		fill: func(c *Config) {
			if c.MaxConns == 0 {
				// Not given, P grows to the B asked for.
				c.MaxConns = max(defaultMaxConns, c.Concurrent+workloadsB(c.Workloads))
			}
		},
		check: notNegative(func(c *Config) int { return c.MaxConns }),
	},
	{
		name: keyConcurrent,
		set: func(c *Config, v string) (err error) {
			if v == "auto" {
				c.Concurrent, c.ConcurrentAuto = 0, true
				return nil
			}
			c.ConcurrentAuto = false
			c.Concurrent, err = parseCount(v, 1)
			return err
		},
		get: func(c *Config) (string, bool) {
			if c.ConcurrentAuto {
				return "auto", false
			}
			return strconv.Itoa(c.Concurrent), c.Concurrent == c.MaxConns-workloadsB(c.Workloads)
		},
		fill: func(c *Config) {
			if c.Concurrent == 0 {
				c.Concurrent = c.MaxConns - workloadsB(c.Workloads)
			}
		},
		check: notNegative(func(c *Config) int { return c.Concurrent }),
	},
	{
		name: keyConcurrentMin,
		set: func(c *Config, v string) (err error) {
			c.ConcurrentMin, err = parseCount(v, 1)
			return err
		},
		get: func(c *Config) (string, bool) { return strconv.Itoa(c.ConcurrentMin), c.ConcurrentMin <= 1 },
		fill: func(c *Config) {
			if c.ConcurrentMin == 1 {
				c.ConcurrentMin = 0 // the default, spelt as its zero
			}
		},
		check: notNegative(func(c *Config) int { return c.ConcurrentMin }),
	},
	{
		name: keyQueue,
		set: func(c *Config, v string) (err error) {
			c.Queue, err = parseCountOrNone(v)
			return err
		},
		get: func(c *Config) (string, bool) { return strconv.Itoa(orZero(c.Queue)), c.Queue == c.Concurrent },
		fill: func(c *Config) {
			if c.Queue == 0 {
				c.Queue = c.Concurrent
			}
		},
		check: func(c *Config) error {
			if c.Queue < 0 && c.Queue != None {
				return fmt.Errorf("%d is negative (0 is the default, gated.None no queue)", c.Queue)
			}
			return nil
		},
	},
	durationKey(keyQueueWait, func(c *Config) *time.Duration { return &c.QueueWait }, defaultQueueWait, "no wait"),
	durationKey(keyMaxConnLifetime, func(c *Config) *time.Duration { return &c.MaxConnLifetime }, defaultMaxConnLifetime, "no limit"),
	{
		name: keyMaxConnLifetimeJitter,
		set: func(c *Config, v string) (err error) {
			c.MaxConnLifetimeJitter, err = parseDurationOrNone(v)
			return err
		},
		get: func(c *Config) (string, bool) {
			// The default follows the lifetime: compare what the pool gets, write what was given.
			return c.lifetimeJitter().String(), c.MaxConnLifetimeJitter == 0
		},
		// No fill: zero is the default, which follows MaxConnLifetime (lifetimeJitter).
		check: notNegativeDuration(func(c *Config) time.Duration { return c.MaxConnLifetimeJitter }, "no jitter"),
	},
	durationKey(keyMaxConnIdleTime, func(c *Config) *time.Duration { return &c.MaxConnIdleTime }, defaultMaxConnIdleTime, "no limit"),
	{
		name: keyQueueOrder,
		set: func(c *Config, v string) error {
			if err := checkQueueOrder(v); err != nil {
				return err
			}
			c.QueueOrder = v
			return nil
		},
		get: func(c *Config) (string, bool) {
			if c.QueueOrder == "" {
				return QueueFIFO, true
			}
			return c.QueueOrder, c.QueueOrder == QueueFIFO
		},
		fill: func(c *Config) {
			if c.QueueOrder == QueueFIFO {
				c.QueueOrder = ""
			}
		},
		check: func(c *Config) error {
			if c.QueueOrder == "" {
				return nil
			}
			return checkQueueOrder(c.QueueOrder)
		},
	},
	{
		name: keyWorkloads,
		set: func(c *Config, v string) (err error) {
			c.Workloads, err = parseWorkloads(v)
			return err
		},
		get: func(c *Config) (string, bool) { return formatWorkloads(c.Workloads), len(c.Workloads) == 0 },
		fill: func(c *Config) {
			for i := range c.Workloads {
				w := &c.Workloads[i]
				if w.Queue == 0 {
					w.Queue = w.Concurrent
				}
				if w.QueueWait == 0 {
					w.QueueWait = c.QueueWait
				}
			}
		},
		check: func(c *Config) error { return checkWorkloads(c.Workloads) },
	},
	{
		name: keyName,
		set: func(c *Config, v string) error {
			if v == "" {
				return errors.New("empty name")
			}
			c.Name = v
			return nil
		},
		get: func(c *Config) (string, bool) { return c.Name, c.Name == "" },
	},
	{
		name: keyStmtTimeout,
		set: func(c *Config, v string) (err error) {
			c.StatementTimeout, c.StatementDeadline, err = parseStatementTimeout(v)
			return err
		},
		get: func(c *Config) (string, bool) {
			return formatStatementTimeout(c.StatementTimeout, c.StatementDeadline), c.StatementTimeout <= 0 && !c.StatementDeadline
		},
		fill: func(c *Config) {
			if c.StatementTimeout == None {
				c.StatementTimeout = 0
			}
		},
		check:    notNegativeDuration(func(c *Config) time.Duration { return c.StatementTimeout }, "off"),
		postgres: true,
	},
	{
		name: keyLockTimeout,
		set: func(c *Config, v string) (err error) {
			c.LockTimeout, err = parseTimeout(v)
			return err
		},
		get: func(c *Config) (string, bool) { return orZero(c.LockTimeout).String(), c.LockTimeout <= 0 },
		fill: func(c *Config) {
			if c.LockTimeout == None {
				c.LockTimeout = 0
			}
		},
		check:    notNegativeDuration(func(c *Config) time.Duration { return c.LockTimeout }, "off"),
		postgres: true,
	},
	{
		name: keyPooler,
		set: func(c *Config, v string) error {
			if err := checkPooler(v); err != nil {
				return err
			}
			c.Pooler = v
			return nil
		},
		get: func(c *Config) (string, bool) {
			if c.Pooler == "" {
				return "none", true
			}
			return c.Pooler, c.Pooler == "none"
		},
		fill: func(c *Config) {
			if c.Pooler == "none" {
				c.Pooler = ""
			}
		},
		check: func(c *Config) error {
			if c.Pooler == "" {
				return nil
			}
			return checkPooler(c.Pooler)
		},
		postgres: true,
	},
	{
		name: keyFleet,
		set: func(c *Config, v string) error {
			switch v {
			case "on":
				c.Fleet = true
			case "off":
				c.Fleet = false
			default:
				return fmt.Errorf("invalid value %s: want \"on\" or \"off\"", shownValue(v))
			}
			return nil
		},
		get: func(c *Config) (string, bool) {
			if c.Fleet {
				return "on", false
			}
			return "off", true
		},
		postgres: true,
	},
	{
		name: keyFleetTable,
		set: func(c *Config, v string) error {
			c.FleetTable = v
			return nil
		},
		get: func(c *Config) (string, bool) { return c.fleetTable(), c.fleetTable() == fleet.DefaultTable },
		// No fill: zero is the default, so that a Config without a fleet reads as before.
		check: func(c *Config) error {
			if !fleet.ValidTable(c.fleetTable()) {
				return fmt.Errorf("invalid value %s: want a lowercase identifier, optionally schema-qualified, of at most 54 bytes", shownValue(c.FleetTable))
			}
			return nil
		},
	},
	{
		name: keyFleetTTL,
		set: func(c *Config, v string) (err error) {
			c.FleetTTL, err = parsePositiveDuration(v)
			return err
		},
		get:   durationGetter((*Config).fleetTTL, defaultFleetTTL),
		check: notNegativeDuration((*Config).fleetTTL, ""),
	},
	{
		name: keyFleetRefresh,
		set: func(c *Config, v string) (err error) {
			c.FleetRefresh, err = parsePositiveDuration(v)
			return err
		},
		get:   durationGetter((*Config).fleetRefresh, defaultFleetRefresh),
		check: notNegativeDuration((*Config).fleetRefresh, ""),
	},
}

// durationKey is the row of a duration key whose 0 means none (stored as None) and whose zero
// field means def.
func durationKey(name string, field func(*Config) *time.Duration, def time.Duration, none string) dsnKey {
	value := func(c *Config) time.Duration { return *field(c) }
	return dsnKey{
		name: name,
		set: func(c *Config, v string) (err error) {
			*field(c), err = parseDurationOrNone(v)
			return err
		},
		get: durationGetter(value, def),
		fill: func(c *Config) {
			if *field(c) == 0 {
				*field(c) = def
			}
		},
		check: notNegativeDuration(value, none),
	}
}

// durationGetter is the get of a duration key whose None is written 0s.
func durationGetter(field func(*Config) time.Duration, def time.Duration) func(*Config) (string, bool) {
	return func(c *Config) (string, bool) {
		d := field(c)
		return orZero(d).String(), d == def
	}
}

// notNegative is the check of a count field that has no None.
func notNegative(field func(*Config) int) func(*Config) error {
	return func(c *Config) error {
		if n := field(c); n < 0 {
			return fmt.Errorf("%d is negative", n)
		}
		return nil
	}
}

// notNegativeDuration is the check of a duration field: None, spelt none, is its only negative
// value; a field with none "" has no None.
func notNegativeDuration(field func(*Config) time.Duration, none string) func(*Config) error {
	return func(c *Config) error {
		switch d := field(c); {
		case d >= 0:
			return nil
		case none == "":
			return fmt.Errorf("%v is negative", d)
		case d != None:
			return fmt.Errorf("%v is negative (gated.None is %s)", d, none)
		}
		return nil
	}
}

// keyNamed returns the row of the key name, or nil.
func keyNamed(name string) *dsnKey {
	for i := range dsnKeys {
		if dsnKeys[i].name == name {
			return &dsnKeys[i]
		}
	}
	return nil
}

func keyNames() string {
	names := make([]string, len(dsnKeys))
	for i, k := range dsnKeys {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

// set stores the value of one DSN key in c.
func (c *Config) set(key, value string) error {
	k := keyNamed(key)
	if k == nil {
		return unknownKeyError(key)
	}
	return k.set(c, value)
}

// unknownKeyError is the error for the unknown key name: it suggests the known key nearest to
// name when one is near enough to be a misspelling of it, and lists them all.
func unknownKeyError(name string) error {
	if near := nearestKey(name); near != "" {
		return fmt.Errorf("unknown key, did you mean %s? (known: %s)", near, keyNames())
	}
	return errors.New("unknown key (known: " + keyNames() + ")")
}

// nearestKey returns the known key with the smallest edit distance to name (the first in
// dsnKeys' order on a tie), or "" when even that one differs in more than a third of what follows
// "gate_" (at most 3 edits): further away, a suggestion would be a guess.
func nearestKey(name string) string {
	best, bestDist := "", 0
	for _, k := range dsnKeys {
		if d := editDistance(name, k.name); best == "" || d < bestDist {
			best, bestDist = k.name, d
		}
	}
	suffix := len(strings.TrimPrefix(name, "gate_"))
	if bestDist == 0 || bestDist > min(3, max(1, suffix/3)) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes: the fewest insertions,
// deletions and substitutions that turn one into the other.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// sameGate reports the first setting in which b differs from a, the configuration of the gate
// already open under the same gate_name. Both are normalized. Observer, Logger and the pgx hooks
// are not compared: the first Connector's serve the shared gates.
func sameGate(a, b *Config) error {
	for _, k := range dsnKeys {
		was, _ := k.get(a)
		is, _ := k.get(b)
		if was != is {
			return &DSNError{Key: k.name, Err: fmt.Errorf("%s differs from the gate_name %q already open in this process (%s)", shownValue(is), b.Name, shownValue(was))}
		}
		if k.name == keyDriver && a.DSN != b.DSN {
			return &DSNError{Key: keyName, Err: fmt.Errorf("a gate named %q is already open in this process with another inner DSN", b.Name)}
		}
	}
	return nil
}
