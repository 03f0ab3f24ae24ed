package gated

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gatedsql/gated/internal/dsn"
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

// A dsnKey is everything gated knows of one gate_ key: how ParseDSN stores its value in a
// Config, and how FormatDSN and sameGate read it back. A new key is a new row of dsnKeys (and
// its field of Config, with its default in fillDefaults); TestDSNKeysTable checks that every row
// parses, formats, round-trips, is compared and is documented.
type dsnKey struct {
	name string
	// set stores the key's value, as the DSN gives it, in c.
	set func(c *Config, value string) error
	// get returns the key's value in c, whose defaults are filled in, as FormatDSN writes it,
	// and whether it is the value ParseDSN gives the key when the DSN does not name it. Equal
	// gates have equal values.
	get func(c *Config) (value string, isDefault bool)
}

// dsnKeys lists the keys in the order FormatDSN writes them and sameGate compares them.
var dsnKeys = [...]dsnKey{
	{keyDriver, func(c *Config, v string) error {
		switch v {
		case "":
			return errEmptyDriver
		case DriverName:
			return errSelfDriver
		}
		c.Driver = v
		return nil
	}, func(c *Config) (string, bool) { return c.Driver, c.Driver == defaultDriver }},
	{keyMaxConns, func(c *Config, v string) (err error) {
		c.MaxConns, err = parseCount(v, 1)
		return err
	}, func(c *Config) (string, bool) { return strconv.Itoa(c.MaxConns), c.MaxConns == defaultMaxConns }},
	{keyConcurrent, func(c *Config, v string) (err error) {
		if v == "auto" {
			c.Concurrent, c.ConcurrentAuto = 0, true
			return nil
		}
		c.ConcurrentAuto = false
		c.Concurrent, err = parseCount(v, 1)
		return err
	}, func(c *Config) (string, bool) {
		if c.ConcurrentAuto {
			return "auto", false
		}
		return strconv.Itoa(c.Concurrent), c.Concurrent == c.MaxConns-workloadsB(c.Workloads)
	}},
	{keyConcurrentMin, func(c *Config, v string) (err error) {
		c.ConcurrentMin, err = parseCount(v, 1)
		return err
	}, func(c *Config) (string, bool) { return strconv.Itoa(c.ConcurrentMin), c.ConcurrentMin <= 1 }},
	{keyQueue, func(c *Config, v string) (err error) {
		c.Queue, err = parseCountOrNone(v)
		return err
	}, func(c *Config) (string, bool) { return strconv.Itoa(orZero(c.Queue)), c.Queue == c.Concurrent }},
	{keyQueueWait, func(c *Config, v string) (err error) {
		c.QueueWait, err = parseDurationOrNone(v)
		return err
	}, durationGetter(func(c *Config) time.Duration { return c.QueueWait }, defaultQueueWait)},
	{keyMaxConnLifetime, func(c *Config, v string) (err error) {
		c.MaxConnLifetime, err = parseDurationOrNone(v)
		return err
	}, durationGetter(func(c *Config) time.Duration { return c.MaxConnLifetime }, defaultMaxConnLifetime)},
	{keyMaxConnLifetimeJitter, func(c *Config, v string) (err error) {
		c.MaxConnLifetimeJitter, err = parseDurationOrNone(v)
		return err
	}, func(c *Config) (string, bool) {
		// The default follows the lifetime: compare what the pool gets, write what was given.
		return c.lifetimeJitter().String(), c.MaxConnLifetimeJitter == 0
	}},
	{keyMaxConnIdleTime, func(c *Config, v string) (err error) {
		c.MaxConnIdleTime, err = parseDurationOrNone(v)
		return err
	}, durationGetter(func(c *Config) time.Duration { return c.MaxConnIdleTime }, defaultMaxConnIdleTime)},
	{keyQueueOrder, func(c *Config, v string) error {
		if v != QueueFIFO && v != QueueAdaptive {
			return fmt.Errorf("invalid value %s: want %q or %q", shownValue(v), QueueFIFO, QueueAdaptive)
		}
		c.QueueOrder = v
		return nil
	}, func(c *Config) (string, bool) {
		if c.QueueOrder == "" {
			return QueueFIFO, true
		}
		return c.QueueOrder, c.QueueOrder == QueueFIFO
	}},
	{keyWorkloads, func(c *Config, v string) (err error) {
		c.Workloads, err = parseWorkloads(v)
		return err
	}, func(c *Config) (string, bool) { return formatWorkloads(c.Workloads), len(c.Workloads) == 0 }},
	{keyName, func(c *Config, v string) error {
		if v == "" {
			return errors.New("empty name")
		}
		c.Name = v
		return nil
	}, func(c *Config) (string, bool) { return c.Name, c.Name == "" }},
	{keyStmtTimeout, func(c *Config, v string) (err error) {
		c.StatementTimeout, c.StatementDeadline, err = parseStatementTimeout(v)
		return err
	}, func(c *Config) (string, bool) {
		return formatStatementTimeout(c.StatementTimeout, c.StatementDeadline), c.StatementTimeout <= 0 && !c.StatementDeadline
	}},
	{keyLockTimeout, func(c *Config, v string) (err error) {
		c.LockTimeout, err = parseTimeout(v)
		return err
	}, func(c *Config) (string, bool) { return orZero(c.LockTimeout).String(), c.LockTimeout <= 0 }},
	{keyPooler, func(c *Config, v string) error {
		switch v {
		case "none", PoolerTransaction:
			c.Pooler = v
			return nil
		}
		return fmt.Errorf("invalid value %s: want \"none\" or %q", shownValue(v), PoolerTransaction)
	}, func(c *Config) (string, bool) {
		if c.Pooler == "" {
			return "none", true
		}
		return c.Pooler, c.Pooler == "none"
	}},
	{keyFleet, func(c *Config, v string) error {
		switch v {
		case "on":
			c.Fleet = true
		case "off":
			c.Fleet = false
		default:
			return fmt.Errorf("invalid value %s: want \"on\" or \"off\"", shownValue(v))
		}
		return nil
	}, func(c *Config) (string, bool) {
		if c.Fleet {
			return "on", false
		}
		return "off", true
	}},
	{keyFleetTable, func(c *Config, v string) error {
		c.FleetTable = v
		return nil
	}, func(c *Config) (string, bool) { return c.fleetTable(), c.fleetTable() == fleet.DefaultTable }},
	{keyFleetTTL, func(c *Config, v string) (err error) {
		c.FleetTTL, err = parsePositiveDuration(v)
		return err
	}, durationGetter((*Config).fleetTTL, defaultFleetTTL)},
	{keyFleetRefresh, func(c *Config, v string) (err error) {
		c.FleetRefresh, err = parsePositiveDuration(v)
		return err
	}, durationGetter((*Config).fleetRefresh, defaultFleetRefresh)},
}

// durationGetter is the get of a duration key whose None is written 0s.
func durationGetter(field func(*Config) time.Duration, def time.Duration) func(*Config) (string, bool) {
	return func(c *Config) (string, bool) {
		d := field(c)
		return orZero(d).String(), d == def
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

func parseCount(value string, least int) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil {
		// strconv's own error would repeat the value; keep only its reason.
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			err = ne.Err
		}
		return 0, fmt.Errorf("invalid value %s: want an integer >= %d: %w", shownValue(value), least, err)
	}
	if n < least {
		return 0, fmt.Errorf("invalid value %s: want an integer >= %d", shownValue(value), least)
	}
	return n, nil
}

// parseCountOrNone reads a count whose 0 means none: the Config stores that as None, its zero
// being the default.
func parseCountOrNone(value string) (int, error) {
	n, err := parseCount(value, 0)
	if err == nil && n == 0 {
		n = None
	}
	return n, err
}

func parseDuration(value string) (time.Duration, error) {
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, fmt.Errorf("invalid value %s: want a Go duration such as 250ms or 2m", shownValue(value))
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid value %s: want a duration >= 0", shownValue(value))
	}
	return d, nil
}

// parsePositiveDuration reads a duration that must be more than 0.
func parsePositiveDuration(value string) (time.Duration, error) {
	d, err := parseDuration(value)
	if err == nil && d == 0 {
		err = fmt.Errorf("invalid value %s: want a duration > 0", shownValue(value))
	}
	return d, err
}

// parseDurationOrNone reads a duration whose 0 means none, stored as None.
func parseDurationOrNone(value string) (time.Duration, error) {
	d, err := parseDuration(value)
	if err == nil && d == 0 {
		d = None
	}
	return d, err
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

// checkInnerDSN refuses a DSN left for the inner driver that still holds a gate_ key, or a
// pool_ key with a driver that would send it to the server as a setting: either fails only at
// the first connection ("unrecognized configuration parameter"), far from the mistake. A DSN the
// inner driver cannot read is left for that driver to report.
func checkInnerDSN(driver, inner string) error {
	_, params, err := splitGateKeys(inner)
	if len(params) > 0 {
		return &DSNError{Key: params[0].Key, Err: errInnerGateKey}
	}
	var de *DSNError
	if errors.As(err, &de) && de.Key != "" {
		return &DSNError{Key: de.Key, Err: errInnerGateKey}
	}
	switch driver {
	case "pgx", "postgres", "mysql":
	default:
		return nil // the driver may have pool_ settings of its own
	}
	if _, params, _ := dsn.Split(inner, isPoolKey); len(params) > 0 {
		return &DSNError{Key: params[0].Key, Err: poolKeyAdvice(params[0].Key)}
	}
	return nil
}

var errInnerGateKey = errors.New("would stay in the inner driver's DSN (Config.DSN); ParseDSN moves gate_ keys into the Config fields")

// isPoolKey reports whether key is a pool setting of another pool (pgxpool's pool_ keys).
var isPoolKey = dsn.Prefixed("pool_")

// poolKeyAdvice says which gate_ key does what a pgxpool pool_ key does, or that none does.
func poolKeyAdvice(key string) error {
	const prefix = "is a pgxpool setting, which gated's inner driver would send to the server: "
	var advice string
	switch strings.ToLower(key) {
	case "pool_max_conns":
		advice = "use gate_max_conns (physical connections) and gate_concurrent (operations running at once)"
	case "pool_max_conn_lifetime":
		advice = "use gate_max_conn_lifetime"
	case "pool_max_conn_lifetime_jitter":
		advice = "use gate_max_conn_lifetime_jitter"
	case "pool_max_conn_idle_time":
		advice = "use gate_max_conn_idle_time"
	case "pool_min_conns", "pool_min_idle_conns":
		advice = "gated has no minimum: it opens physical connections when operations need them"
	case "pool_health_check_period", "pool_ping_timeout":
		advice = "gated has no periodic check: it checks an idle connection's socket before its next use and replaces a dead one"
	default:
		advice = "gated has no pool_ keys; its settings are the gate_ keys (" + keyNames() + ")"
	}
	return errors.New(prefix + advice)
}

// workloadsB returns the sum of the workloads' B.
func workloadsB(ws []Workload) int {
	n := 0
	for _, w := range ws {
		n += w.Concurrent
	}
	return n
}
