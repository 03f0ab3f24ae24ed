package gated

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/dsn"
)

// A DSN to and from a Config: ParseDSN reads its gate_ keys through the key table (keys.go),
// FormatDSN writes them back, and checkInnerDSN judges what is left for the inner driver. The
// syntax of both DSN forms is internal/dsn's.

var (
	errRepeatedKey = errors.New("key given more than once")
	errStrandedKey = errors.New("cannot be taken out: what is left for the inner driver would still hold it")
)

// ParseDSN reads the gate_ keys out of dsn and returns a Config whose DSN field is the rest of
// dsn, for the inner driver, with every other byte unchanged. The keys, all optional:
//
//   - gate_driver: inner database/sql driver name, not "gated" (default "pgx"). Whether it is
//     registered is checked by [NewConnector], not here.
//   - gate_max_conns: P, physical connections, an integer ≥ 1 (default 10).
//   - gate_concurrent: B, execution permits, an integer from 1 to gate_max_conns (default
//     gate_max_conns), or "auto": the limit moves between gate_concurrent_min and that default
//     from the database's service times (see [Config.ConcurrentAuto]).
//   - gate_concurrent_min: the lowest limit of gate_concurrent=auto and of workloads with the
//     option auto, an integer ≥ 1 (default 1).
//   - gate_queue: Q, admission permits beyond B, an integer ≥ 0 (default gate_concurrent; 0
//     means no queue).
//   - gate_queue_wait: longest wait for an execution permit, a Go duration ≥ 0 such as 250ms
//     (default 1s; 0 means try once).
//   - gate_max_conn_lifetime, gate_max_conn_idle_time: Go durations ≥ 0 (defaults 1h and 30m;
//     0 means no limit).
//   - gate_max_conn_lifetime_jitter: a Go duration ≥ 0; each physical connection lives
//     gate_max_conn_lifetime plus a random part of it (default a tenth of
//     gate_max_conn_lifetime; 0 means none). See [Config.MaxConnLifetimeJitter].
//   - gate_queue_order: "fifo" (default) or "adaptive" ([QueueAdaptive]).
//   - gate_workloads: named gates beside the default one, "name:B[:Q[:wait[:auto][:lend]]],..."
//     (default none; Q defaults to B, wait to gate_queue_wait; auto makes B a ceiling, lend
//     lends idle permits to the other gates; see [Workload]). With workloads,
//     gate_concurrent defaults to gate_max_conns minus their B, and gate_max_conns, when not
//     given, grows to the sum of all B. The sum of all B above gate_max_conns is an error.
//   - gate_name: share the gates and the pool with every Connector of this process of the same
//     name (default none); also the connections' application_name when dsn sets none.
//   - gate_statement_timeout: "off" (default, also 0), a Go duration > 0, "deadline" (the
//     context's remaining time) or "deadline:<dur>" (the smaller of the two; dur without a
//     deadline). See [Config.StatementTimeout].
//   - gate_lock_timeout: "off" (default, also 0) or a Go duration > 0.
//   - gate_pooler: "none" (default) or "transaction" ([PoolerTransaction]): the DSN points at a
//     pooler in transaction mode.
//   - gate_fleet: "off" (default) or "on": the budgets are the totals of every live instance
//     with this gate_name on the database, each running with its share ([Config.Fleet]);
//     NewConnector requires a gate_name with it.
//   - gate_fleet_table: the fleet's lease table (default "gated_fleet"), gate_fleet_ttl: a
//     lease's life by the database's clock (default 15s), gate_fleet_refresh: how often a
//     lease is refreshed, at most a third of gate_fleet_ttl (default 5s).
//
// Two forms of dsn are understood:
//
//   - Query form, for a dsn that contains "://" or '?' (URLs, and DSNs like mysql's
//     "user:pw@tcp(h)/db?parseTime=true" or SQLite's "file:x.db?mode=ro"): the keys are query
//     parameters, percent-encoded like any other. The query starts at the first '?' after the
//     authority of a "scheme://" dsn, and otherwise at the first '?' after the last '@', so that
//     a mysql password may contain '?'; a raw '@' in the query of such a dsn must therefore be
//     written %40. The '?' is dropped when only gate_ keys followed it; a #fragment is kept.
//   - Keyword/value form (libpq), for a dsn that starts with "keyword=" or otherwise contains '='
//     but neither "://" nor '?': whitespace-separated key=value pairs, values optionally in single
//     quotes with \' and \\ escapes ("password='se cret' gate_concurrent=4"). A dsn starting with
//     "keyword=" is in this form even when a value contains '?' or "://".
//
// Any other dsn (":memory:", "") has no gate_ keys and passes through unchanged.
//
// Where a key's 0 means "none" (gate_queue, gate_queue_wait, the connection lifetimes), the
// Config gets [None] for it, since a zero field means the default: the Config ParseDSN returns,
// a literal with the same fields and the DSN [Config.FormatDSN] writes all give the same gate.
// pgxpool's pool_ keys (pool_max_conns, ...) are refused with gate_driver pgx, postgres and
// mysql, naming the gate_ key to use instead: the inner driver would send them to the server as
// settings, which fails the first connection.
//
// Every error is a *[DSNError] naming the gate_ (or pool_) key at fault, or with an empty Key when the
// keyword/value syntax itself is broken; its message holds at most that key and its value, never
// the rest of dsn. An unknown or repeated gate_ key is an error. ParseDSN returns a nil Config
// with any error. It is safe for concurrent use.
func ParseDSN(dsn string) (*Config, error) {
	inner, params, err := splitGateKeys(dsn)
	if err != nil {
		return nil, err
	}
	c := &Config{DSN: inner}
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if lower := strings.ToLower(p.Key); lower != p.Key {
			return nil, &DSNError{Key: p.Key, Err: fmt.Errorf("gate_ keys are lower case (%s)", lower)}
		}
		if seen[p.Key] {
			return nil, &DSNError{Key: p.Key, Err: errRepeatedKey}
		}
		seen[p.Key] = true
		if err := c.set(p.Key, p.Value); err != nil {
			return nil, &DSNError{Key: p.Key, Err: err}
		}
	}
	// The keys not given are zero fields, which normalize defaults as for a Config literal.
	if err := c.normalize(); err != nil {
		// Taking keys out can change the form of what is left ("gate_queue=1 x?gate_queue_wait=1s"
		// leaves a query); normalize's advice to use ParseDSN would not help here.
		if de, ok := err.(*DSNError); ok && de.Err == errInnerGateKey {
			de.Err = errStrandedKey
		}
		return nil, err
	}
	return c, nil
}

// FormatDSN returns c.DSN with c's gate_ keys added, in a DSN that [ParseDSN] turns back into a
// Config equal to c once normalized (for a c that [NewConnector] accepts): the same gate. It
// writes only the keys whose value differs from what ParseDSN would default it to, in a fixed
// order, after filling in the defaults of c's zero fields as NewConnector does; a None is written
// 0. The keys go in front of a keyword/value or empty c.DSN ("gate_concurrent=4 host=db") and
// into the query of any other ("postgres://db/app?sslmode=require&gate_concurrent=4"). Observer,
// Logger and the pgx hooks have no key and are not written. FormatDSN does not validate c and
// does not change it.
func (c *Config) FormatDSN() string {
	d := c.Clone()
	d.fillDefaults()
	var buf [len(dsnKeys)]dsn.Param
	params := buf[:0]
	for _, k := range dsnKeys {
		if v, isDefault := k.get(d); !isDefault {
			params = append(params, dsn.Param{Key: k.name, Value: v})
		}
	}
	return dsn.Join(c.DSN, params)
}

// isGateKey reports whether key belongs to gated. The prefix is matched in any case, so that a
// misspelt GATE_CONCURRENT is refused instead of being forwarded to the server as a setting.
var isGateKey = dsn.Prefixed(gatePrefix)

// splitGateKeys returns s without its gate_ keys, and those keys in the order given; its error is
// a *DSNError.
func splitGateKeys(s string) (inner string, params []dsn.Param, err error) {
	inner, params, err = dsn.Split(s, isGateKey)
	var de *dsn.Error
	if errors.As(err, &de) {
		err = &DSNError{Key: de.Key, Err: de.Err}
	}
	return inner, params, err
}

// settingError returns the driver seam's error about one of gated's settings (a driver that is not
// registered, an inner DSN that a transaction pooler cannot serve) as the *DSNError of its key;
// any other error unchanged.
func settingError(err error) error {
	var se *drivers.SettingError
	if !errors.As(err, &se) {
		return err
	}
	key := keyDriver
	if se.Setting == drivers.SettingPooler {
		key = keyPooler
	}
	return &DSNError{Key: key, Err: se.Err}
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

// shownValue quotes a gate_ value for an error message, unless it may hold another key's value
// (see dsn.ShownValue).
func shownValue(v string) string { return dsn.ShownValue(v) }
