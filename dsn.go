package gated

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config configures a [Connector]. Build one with [ParseDSN] or [NewConfig] and adjust its fields;
// [NewConnector] copies it, so later changes do not affect a connector already made.
//
// A Config built as a literal gets different defaults from one built by NewConfig: a zero Queue,
// QueueWait, MaxConnLifetime or MaxConnIdleTime is taken literally (no queue, try once, no limit,
// no limit); a zero MaxConns becomes the larger of 10 and Concurrent, and a zero Concurrent
// becomes MaxConns.
type Config struct {
	// Driver is the inner database/sql driver name (gate_driver): "pgx" (default), "postgres"
	// (lib/pq) or any registered driver.
	Driver string
	// DSN is the inner driver's data source name, without any gate_ key.
	DSN string
	// MaxConns is P, the most physical connections open at once (gate_max_conns, default 10, or
	// Concurrent when that is larger and gate_max_conns is not given).
	MaxConns int
	// Concurrent is B, the execution permits (gate_concurrent, default MaxConns).
	Concurrent int
	// Queue is Q, the admission permits beyond B (gate_queue, default Concurrent).
	Queue int
	// QueueWait is the longest an admitted operation waits for an execution permit
	// (gate_queue_wait, default 1s). Zero means try once without waiting.
	QueueWait time.Duration
	// MaxConnLifetime closes physical connections older than this when they are next idle
	// (gate_max_conn_lifetime, default 1h). Zero means no limit.
	MaxConnLifetime time.Duration
	// MaxConnIdleTime closes physical connections idle for longer than this
	// (gate_max_conn_idle_time, default 30m). Zero means no limit.
	MaxConnIdleTime time.Duration
	// QueueOrder is how waiters are served (gate_queue_order): QueueFIFO (default, also "") or
	// QueueAdaptive. See [QueueAdaptive].
	QueueOrder string

	// Observer, when not nil, receives every measurement as it happens (see [Observer]); set it
	// in code, there is no DSN key, or attach Observers to the Connector later with
	// [Connector.Attach]. Nil (the default) costs nothing; an Observer attached costs a few
	// clock readings per operation and no allocation.
	Observer Observer
	// Logger, when not nil, receives connection failures (at most one line per second,
	// counting the others), every commit whose outcome is unknown, and refusals summarized at
	// most once per second per workload, never a line per refused call. Set it in code; nil
	// (the default) logs nothing.
	Logger *slog.Logger
	// Workloads are the named gates beside the default one (gate_workloads, default none),
	// chosen per operation with [WithWorkload]. Each has budgets of its own; all share the
	// physical pool, so the B of the default gate and of every workload add up to at most
	// MaxConns. A zero Concurrent of the default gate becomes MaxConns minus the workloads' B.
	Workloads []Workload
	// Name is gate_name (default none): the Connectors of this process made with the same
	// non-empty Name share one set of gates and one physical pool, and must have equal
	// configurations. With pgx and lib/pq it is also the application_name of the physical
	// connections when the DSN sets none.
	Name string
	// StatementTimeout is the server-side limit on each statement (gate_statement_timeout): with
	// StatementDeadline false, a fixed limit (zero: none, "off"); with StatementDeadline true,
	// the cap on the context's remaining time, or the limit when the context has no deadline
	// (zero: no cap). See [ParseDSN] for the DSN spelling. PostgreSQL drivers only.
	StatementTimeout time.Duration
	// StatementDeadline makes the server-side limit follow the context's deadline
	// (gate_statement_timeout=deadline or deadline:<dur>).
	StatementDeadline bool
	// LockTimeout is the server's lock_timeout for gated's operations (gate_lock_timeout,
	// default zero: "off", the server's own setting). PostgreSQL drivers only.
	LockTimeout time.Duration
	// Pooler is gate_pooler: "" (none, the default) or [PoolerTransaction] when the DSN points
	// at a pooler in transaction mode (PgBouncer's pool_mode=transaction). PostgreSQL drivers
	// only.
	Pooler string
}

// PoolerTransaction is gate_pooler=transaction ([Config.Pooler]): the server is reached through a
// pooler that gives each transaction, and each statement outside one, whichever server
// connection is free (PgBouncer in transaction mode). Nothing may then depend on the session
// outliving a transaction: gated prepares no statement on the server (a db.Prepare'd statement is
// sent as an unprepared query at each use, except lib/pq's COPY, which only runs prepared, inside
// a transaction), sets no session value (gate_statement_timeout=deadline applies in transactions
// only, with SET LOCAL) and sends no startup parameter of its own (a fixed gate_statement_timeout
// or gate_lock_timeout is an error: set them on the role). The inner driver must use no named
// statements either: pgx needs default_query_exec_mode=exec or simple_protocol, lib/pq
// binary_parameters=yes — NewConnector says so when the DSN lacks it.
const PoolerTransaction = "transaction"

// The values of gate_queue_order ([Config.QueueOrder]).
const (
	// QueueFIFO serves waiters in arrival order, each waiting at most gate_queue_wait.
	QueueFIFO = "fifo"
	// QueueAdaptive serves in arrival order while the queue keeps emptying. Once it has stayed
	// non-empty for 100 ms (a standing queue: the gate is overloaded) it serves the newest waiter
	// first, which still has most of its deadline left, and refuses with ErrAdmissionTimeout the
	// waiters that have waited more than 5 ms, rather than serving them after their callers gave
	// up (adaptive LIFO with a CoDel-style bound, as in Facebook's "Fail at Scale"). It matters
	// when Q is large compared with B; see BENCHMARKS.md.
	QueueAdaptive = "adaptive"
)

// Defaults of the DSN keys, as [NewConfig] and [ParseDSN] apply them.
const (
	defaultDriver          = "pgx"
	defaultMaxConns        = 10
	defaultQueueWait       = time.Second
	defaultMaxConnLifetime = time.Hour
	defaultMaxConnIdleTime = 30 * time.Minute
)

// The DSN keys gated reads. Every key with gatePrefix belongs to gated, so a misspelt one is an
// error instead of a parameter silently forwarded to the database server.
const (
	gatePrefix         = "gate_"
	keyDriver          = "gate_driver"
	keyMaxConns        = "gate_max_conns"
	keyConcurrent      = "gate_concurrent"
	keyQueue           = "gate_queue"
	keyQueueWait       = "gate_queue_wait"
	keyMaxConnLifetime = "gate_max_conn_lifetime"
	keyMaxConnIdleTime = "gate_max_conn_idle_time"
	keyQueueOrder      = "gate_queue_order"
	keyWorkloads       = "gate_workloads"
	keyName            = "gate_name"
	keyStmtTimeout     = "gate_statement_timeout"
	keyLockTimeout     = "gate_lock_timeout"
	keyPooler          = "gate_pooler"
)

// gateKeys lists the keys in the order FormatDSN writes them.
var gateKeys = [...]string{
	keyDriver, keyMaxConns, keyConcurrent, keyQueue, keyQueueWait, keyMaxConnLifetime, keyMaxConnIdleTime,
	keyQueueOrder, keyWorkloads, keyName, keyStmtTimeout, keyLockTimeout, keyPooler,
}

var (
	errEmptyDriver  = errors.New("empty driver name")
	errSelfDriver   = errors.New(`"` + DriverName + `" would wrap gated in itself`)
	errRepeatedKey  = errors.New("key given more than once")
	errUnknownKey   = errors.New("unknown key (known: " + strings.Join(gateKeys[:], ", ") + ")")
	errMissingValue = errors.New(`missing "=" and value`)
	errUnterminated = errors.New("unterminated quoted value")
	errBackslashEnd = errors.New("value ends with a lone backslash")
	errStrandedKey  = errors.New("cannot be taken out: what is left for the inner driver would still hold it")
	errInnerGateKey = errors.New("would stay in the inner driver's DSN (Config.DSN); ParseDSN moves gate_ keys into the Config fields")
)

// NewConfig returns a Config with the defaults a DSN without gate_ keys gets: Driver "pgx",
// MaxConns 10, Concurrent 10, Queue 10, QueueWait 1s, MaxConnLifetime 1h, MaxConnIdleTime 30m and
// an empty DSN. These differ from the zero-value defaults of a Config literal (see [Config]).
func NewConfig() *Config {
	return &Config{
		Driver:          defaultDriver,
		MaxConns:        defaultMaxConns,
		Concurrent:      defaultMaxConns,
		Queue:           defaultMaxConns,
		QueueWait:       defaultQueueWait,
		MaxConnLifetime: defaultMaxConnLifetime,
		MaxConnIdleTime: defaultMaxConnIdleTime,
	}
}

// Clone returns a copy of c, or nil when c is nil. The copy shares c's Observer and Logger, which
// are meant to be shared, and nothing else.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	cp := *c
	cp.Workloads = slices.Clone(c.Workloads)
	return &cp
}

// ParseDSN reads the gate_ keys out of dsn and returns a Config whose DSN field is the rest of
// dsn, for the inner driver, with every other byte unchanged. The keys, all optional:
//
//   - gate_driver: inner database/sql driver name, not "gated" (default "pgx"). Whether it is
//     registered is checked by [NewConnector], not here.
//   - gate_max_conns: P, physical connections, an integer ≥ 1 (default 10).
//   - gate_concurrent: B, execution permits, an integer from 1 to gate_max_conns (default
//     gate_max_conns).
//   - gate_queue: Q, admission permits beyond B, an integer ≥ 0 (default gate_concurrent).
//   - gate_queue_wait: longest wait for an execution permit, a Go duration ≥ 0 such as 250ms
//     (default 1s; 0 means try once).
//   - gate_max_conn_lifetime, gate_max_conn_idle_time: Go durations ≥ 0 (defaults 1h and 30m;
//     0 means no limit).
//   - gate_queue_order: "fifo" (default) or "adaptive" ([QueueAdaptive]).
//   - gate_workloads: named gates beside the default one, "name:B[:Q[:wait]],..." (default
//     none; Q defaults to B, wait to gate_queue_wait; see [Workload]). With workloads,
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
// Every error is a *[DSNError] naming the gate_ key at fault, or with an empty Key when the
// keyword/value syntax itself is broken; its message holds at most that key and its value, never
// the rest of dsn. An unknown or repeated gate_ key is an error. ParseDSN returns a nil Config
// with any error. It is safe for concurrent use.
func ParseDSN(dsn string) (*Config, error) {
	inner, params, err := splitGateParams(dsn)
	if err != nil {
		return nil, err
	}
	c := NewConfig()
	c.DSN = inner
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if lower := strings.ToLower(p.key); lower != p.key {
			return nil, &DSNError{Key: p.key, Err: fmt.Errorf("gate_ keys are lower case (%s)", lower)}
		}
		if seen[p.key] {
			return nil, &DSNError{Key: p.key, Err: errRepeatedKey}
		}
		seen[p.key] = true
		if err := c.set(p.key, p.value); err != nil {
			return nil, &DSNError{Key: p.key, Err: err}
		}
	}
	// The defaults chain, each only once the keys it follows are final: a workload's wait
	// follows gate_queue_wait; gate_concurrent follows gate_max_conns less the workloads' B;
	// gate_max_conns not given grows to the B asked for (gate_concurrent=16 alone asks for 16
	// running operations, as B ≤ P requires), which normalize does for zero fields; gate_queue
	// follows the final gate_concurrent.
	for i := range c.Workloads {
		if c.Workloads[i].QueueWait < 0 {
			c.Workloads[i].QueueWait = c.QueueWait
		}
	}
	if !seen[keyMaxConns] {
		c.MaxConns = 0
	}
	if !seen[keyConcurrent] {
		c.Concurrent = 0
	}
	if err := c.normalize(); err != nil {
		// Taking keys out can change the form of what is left ("gate_queue=1 x?gate_queue_wait=1s"
		// leaves a query); normalize's advice to use ParseDSN would not help here.
		if de, ok := err.(*DSNError); ok && de.Err == errInnerGateKey {
			de.Err = errStrandedKey
		}
		return nil, err
	}
	if !seen[keyQueue] {
		c.Queue = c.Concurrent
	}
	return c, nil
}

// set stores the value of one DSN key in c. Zero counts are refused here although normalize
// would default them: a DSN that says gate_max_conns=0 means something, and it is not 10.
func (c *Config) set(key, value string) error {
	var err error
	switch key {
	case keyDriver:
		switch value {
		case "":
			return errEmptyDriver
		case DriverName:
			return errSelfDriver
		}
		c.Driver = value
	case keyMaxConns:
		c.MaxConns, err = parseCount(value, 1)
	case keyConcurrent:
		c.Concurrent, err = parseCount(value, 1)
	case keyQueue:
		c.Queue, err = parseCount(value, 0)
	case keyQueueWait:
		c.QueueWait, err = parseDuration(value)
	case keyMaxConnLifetime:
		c.MaxConnLifetime, err = parseDuration(value)
	case keyMaxConnIdleTime:
		c.MaxConnIdleTime, err = parseDuration(value)
	case keyQueueOrder:
		if value != QueueFIFO && value != QueueAdaptive {
			return fmt.Errorf("invalid value %s: want %q or %q", shownValue(value), QueueFIFO, QueueAdaptive)
		}
		c.QueueOrder = value
		if value == QueueFIFO {
			c.QueueOrder = "" // the default, so that Parse → Format → Parse is stable
		}
	case keyWorkloads:
		c.Workloads, err = parseWorkloads(value)
	case keyName:
		if value == "" {
			return errors.New("empty name")
		}
		c.Name = value
	case keyStmtTimeout:
		c.StatementTimeout, c.StatementDeadline, err = parseStatementTimeout(value)
	case keyLockTimeout:
		c.LockTimeout, err = parseTimeout(value)
	case keyPooler:
		switch value {
		case "none":
			c.Pooler = "" // the default, so that Parse → Format → Parse is stable
		case PoolerTransaction:
			c.Pooler = value
		default:
			return fmt.Errorf("invalid value %s: want \"none\" or %q", shownValue(value), PoolerTransaction)
		}
	default:
		return errUnknownKey
	}
	return err
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

// normalize gives the zero fields of a code-built Config their defaults (Driver "pgx", MaxConns
// 10, Concurrent MaxConns) and validates every field, naming the DSN key of a bad one in a
// *DSNError. Queue, QueueWait and the lifetimes are taken literally. On error c is unchanged, so
// a caller may report the fields as they were given.
func (c *Config) normalize() error {
	driver, maxConns, concurrent := c.Driver, c.MaxConns, c.Concurrent
	wB, err := checkWorkloads(c.Workloads)
	if err != nil {
		return err
	}
	if driver == "" {
		driver = defaultDriver
	}
	if driver == DriverName {
		return &DSNError{Key: keyDriver, Err: errSelfDriver}
	}
	switch {
	case maxConns < 0:
		return &DSNError{Key: keyMaxConns, Err: fmt.Errorf("%d is negative", maxConns)}
	case maxConns == 0:
		maxConns = max(defaultMaxConns, concurrent+wB)
	}
	switch {
	case concurrent < 0:
		return &DSNError{Key: keyConcurrent, Err: fmt.Errorf("%d is negative", concurrent)}
	case concurrent == 0 && wB >= maxConns:
		return &DSNError{Key: keyWorkloads, Err: fmt.Errorf("the workloads' B add up to %d, leaving no execution permit of gate_max_conns (%d) for the default workload", wB, maxConns)}
	case concurrent == 0:
		concurrent = maxConns - wB
	case wB > 0 && concurrent+wB > maxConns:
		// Σ B > P would make operations wait for a physical connection, the wait the gates
		// exist to replace.
		return &DSNError{Key: keyWorkloads, Err: fmt.Errorf("the B of all workloads add up to %d (%s), more than gate_max_conns (%d)", concurrent+wB, sumOfB(concurrent, c.Workloads), maxConns)}
	case concurrent > maxConns:
		// B > P would make operations wait for a physical connection, the wait the gate exists
		// to replace.
		return &DSNError{Key: keyConcurrent, Err: fmt.Errorf("%d is more than gate_max_conns (%d)", concurrent, maxConns)}
	}
	if c.Queue < 0 {
		return &DSNError{Key: keyQueue, Err: fmt.Errorf("%d is negative", c.Queue)}
	}
	if c.QueueOrder != "" && c.QueueOrder != QueueFIFO && c.QueueOrder != QueueAdaptive {
		return &DSNError{Key: keyQueueOrder, Err: fmt.Errorf("invalid value %s: want %q or %q", shownValue(c.QueueOrder), QueueFIFO, QueueAdaptive)}
	}
	for _, d := range [...]struct {
		key string
		d   time.Duration
	}{{keyQueueWait, c.QueueWait}, {keyMaxConnLifetime, c.MaxConnLifetime}, {keyMaxConnIdleTime, c.MaxConnIdleTime},
		{keyStmtTimeout, c.StatementTimeout}, {keyLockTimeout, c.LockTimeout}} {
		if d.d < 0 {
			return &DSNError{Key: d.key, Err: fmt.Errorf("%v is negative", d.d)}
		}
	}
	if (c.StatementTimeout > 0 || c.StatementDeadline || c.LockTimeout > 0) && driver != "pgx" && driver != "postgres" {
		key := keyLockTimeout
		if c.StatementTimeout > 0 || c.StatementDeadline {
			key = keyStmtTimeout
		}
		return &DSNError{Key: key, Err: fmt.Errorf("needs a PostgreSQL driver (gate_driver pgx or postgres), not %s", shownValue(driver))}
	}
	switch {
	case c.Pooler != "" && c.Pooler != PoolerTransaction:
		return &DSNError{Key: keyPooler, Err: fmt.Errorf("invalid value %s: want \"none\" or %q", shownValue(c.Pooler), PoolerTransaction)}
	case c.Pooler != "" && driver != "pgx" && driver != "postgres":
		return &DSNError{Key: keyPooler, Err: fmt.Errorf("needs a PostgreSQL driver (gate_driver pgx or postgres), not %s", shownValue(driver))}
	case c.Pooler != "" && (c.LockTimeout > 0 || c.StatementTimeout > 0):
		key := keyLockTimeout
		if c.StatementTimeout > 0 {
			key = keyStmtTimeout
		}
		return &DSNError{Key: key, Err: errors.New("a fixed limit would be a startup parameter, which a transaction pooler refuses (gate_pooler=transaction): set it on the database role instead (ALTER ROLE ... SET)")}
	}
	// A gate_ key left in a code-built DSN would reach the inner driver, which forwards unknown
	// keys to the server as settings and fails on the first connection, far from the mistake.
	// A DSN the inner driver cannot read is left for that driver to report.
	_, params, err := splitGateParams(c.DSN)
	if len(params) > 0 {
		return &DSNError{Key: params[0].key, Err: errInnerGateKey}
	}
	var de *DSNError
	if errors.As(err, &de) && de.Key != "" {
		return &DSNError{Key: de.Key, Err: errInnerGateKey}
	}
	c.Driver, c.MaxConns, c.Concurrent = driver, maxConns, concurrent
	return nil
}

// FormatDSN returns c.DSN with c's gate_ keys added, in a DSN that [ParseDSN] turns back into a
// Config equal to c (for a c that [NewConnector] accepts). It writes only the keys whose value
// differs from what ParseDSN would default it to, in a fixed order, and gives zero Driver,
// MaxConns and Concurrent the defaults NewConnector gives them. The keys go in front of a
// keyword/value or empty c.DSN ("gate_concurrent=4 host=db") and into the query of any other
// ("postgres://db/app?sslmode=require&gate_concurrent=4"). FormatDSN does not validate c and does
// not change it.
func (c *Config) FormatDSN() string {
	driver, maxConns, concurrent := c.Driver, c.MaxConns, c.Concurrent
	if driver == "" {
		driver = defaultDriver
	}
	if maxConns == 0 {
		maxConns = defaultMaxConns
	}
	wB := 0
	for _, w := range c.Workloads {
		wB += w.Concurrent
	}
	if concurrent == 0 {
		concurrent = maxConns - wB
	}
	var buf [len(gateKeys)]gateParam
	params := buf[:0]
	if driver != defaultDriver {
		params = append(params, gateParam{keyDriver, driver})
	}
	if maxConns != defaultMaxConns {
		params = append(params, gateParam{keyMaxConns, strconv.Itoa(maxConns)})
	}
	if concurrent != maxConns-wB {
		params = append(params, gateParam{keyConcurrent, strconv.Itoa(concurrent)})
	}
	if c.Queue != concurrent {
		params = append(params, gateParam{keyQueue, strconv.Itoa(c.Queue)})
	}
	if c.QueueWait != defaultQueueWait {
		params = append(params, gateParam{keyQueueWait, c.QueueWait.String()})
	}
	if c.MaxConnLifetime != defaultMaxConnLifetime {
		params = append(params, gateParam{keyMaxConnLifetime, c.MaxConnLifetime.String()})
	}
	if c.MaxConnIdleTime != defaultMaxConnIdleTime {
		params = append(params, gateParam{keyMaxConnIdleTime, c.MaxConnIdleTime.String()})
	}
	if c.QueueOrder == QueueAdaptive {
		params = append(params, gateParam{keyQueueOrder, c.QueueOrder})
	}
	if len(c.Workloads) > 0 {
		params = append(params, gateParam{keyWorkloads, formatWorkloads(c.Workloads)})
	}
	if c.Name != "" {
		params = append(params, gateParam{keyName, c.Name})
	}
	if c.StatementTimeout > 0 || c.StatementDeadline {
		params = append(params, gateParam{keyStmtTimeout, formatStatementTimeout(c.StatementTimeout, c.StatementDeadline)})
	}
	if c.LockTimeout > 0 {
		params = append(params, gateParam{keyLockTimeout, c.LockTimeout.String()})
	}
	if c.Pooler != "" {
		params = append(params, gateParam{keyPooler, c.Pooler})
	}
	if len(params) == 0 {
		return c.DSN
	}

	var b strings.Builder
	if c.DSN == "" || dsnFormOf(c.DSN) == formKV {
		// In front, not behind: a trailing "password=" would take the next word as its value.
		for _, p := range params {
			b.WriteString(p.key)
			b.WriteByte('=')
			writeKVValue(&b, p.value)
			b.WriteByte(' ')
		}
		if c.DSN == "" {
			return b.String()[:b.Len()-1]
		}
		b.WriteString(c.DSN)
		return b.String()
	}
	q, frag := queryBounds(c.DSN)
	b.WriteString(c.DSN[:frag])
	sep := byte('?')
	if q >= 0 {
		// Even after an empty query ("db?"): ParseDSN keeps the '?' only while a parameter,
		// even an empty one, is left, so "db?&gate_queue=1" is what reads back as "db?".
		sep = '&'
	}
	for _, p := range params {
		b.WriteByte(sep)
		sep = '&'
		b.WriteString(p.key)
		b.WriteByte('=')
		// QueryEscape also escapes '@', '/', '?' and '#', so the added text cannot move the
		// query's start or the fragment that queryBounds finds.
		b.WriteString(url.QueryEscape(p.value))
	}
	b.WriteString(c.DSN[frag:])
	return b.String()
}

// gateParam is one gate_ key and its decoded value.
type gateParam struct{ key, value string }

type dsnForm int

const (
	formPlain dsnForm = iota // neither form: no gate_ keys possible
	formQuery
	formKV
)

// dsnFormOf tells which form dsn is in. A leading "keyword=" wins over '?' and "://" because
// libpq and pgx read such a DSN as keyword/value whatever its values contain (a password may
// hold a '?'), while no URL and no mysql DSN starts with "word=".
func dsnFormOf(dsn string) dsnForm {
	switch {
	case startsWithKeyword(dsn):
		return formKV
	case strings.Contains(dsn, "://") || strings.IndexByte(dsn, '?') >= 0:
		return formQuery
	case strings.IndexByte(dsn, '=') >= 0:
		return formKV
	}
	return formPlain
}

// startsWithKeyword reports whether s starts with an identifier and '=', spaces allowed.
func startsWithKeyword(s string) bool {
	i := skipSpace(s, 0)
	start := i
	for i < len(s) && (s[i] == '_' || 'a' <= s[i] && s[i] <= 'z' || 'A' <= s[i] && s[i] <= 'Z' ||
		i > start && '0' <= s[i] && s[i] <= '9') {
		i++
	}
	if i == start {
		return false
	}
	i = skipSpace(s, i)
	return i < len(s) && s[i] == '='
}

// splitGateParams returns dsn without its gate_ keys, and those keys in the order given.
func splitGateParams(dsn string) (inner string, params []gateParam, err error) {
	switch dsnFormOf(dsn) {
	case formKV:
		return splitKV(dsn)
	case formQuery:
		return splitQuery(dsn)
	}
	return dsn, nil, nil
}

// queryBounds returns the index of the '?' that starts dsn's query (-1 if none) and the index
// of the '#' that starts its fragment (len(dsn) if none). Without a query, frag is where one
// would be inserted.
func queryBounds(dsn string) (q, frag int) {
	start := 0
	if i := strings.Index(dsn, "://"); i >= 0 {
		start = i + len("://")
		if j := strings.IndexAny(dsn[start:], "/?#"); j >= 0 {
			start += j
		} else {
			start = len(dsn)
		}
	} else if i := strings.LastIndexByte(dsn, '@'); i >= 0 {
		// user:password@...: a password may contain '?' and '#'.
		start = i + 1
	}
	j := strings.IndexAny(dsn[start:], "?#")
	if j < 0 {
		return -1, len(dsn)
	}
	j += start
	if dsn[j] == '#' {
		return -1, j
	}
	if k := strings.IndexByte(dsn[j+1:], '#'); k >= 0 {
		return j, j + 1 + k
	}
	return j, len(dsn)
}

// splitQuery is splitGateParams for the query form. The other parameters stay exactly as
// written, percent-encoding included, because each inner driver decodes its DSN its own way.
func splitQuery(dsn string) (string, []gateParam, error) {
	q, frag := queryBounds(dsn)
	if q < 0 {
		return dsn, nil, nil
	}
	var params []gateParam
	var kept []string
	for part := range strings.SplitSeq(dsn[q+1:frag], "&") {
		rawKey, rawValue, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			if isGateKey(rawKey) {
				return "", nil, &DSNError{Key: rawKey, Err: fmt.Errorf("bad percent-encoding in key: %w", err)}
			}
			kept = append(kept, part) // not ours to judge
			continue
		}
		if !isGateKey(key) {
			kept = append(kept, part)
			continue
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return "", nil, &DSNError{Key: key, Err: fmt.Errorf("bad percent-encoding in value: %w", err)}
		}
		params = append(params, gateParam{key, value})
	}
	if len(params) == 0 {
		return dsn, nil, nil
	}
	var b strings.Builder
	b.Grow(len(dsn))
	b.WriteString(dsn[:q])
	if len(kept) > 0 {
		b.WriteByte('?')
		b.WriteString(strings.Join(kept, "&"))
	}
	b.WriteString(dsn[frag:])
	return b.String(), params, nil
}

// splitKV is splitGateParams for the keyword/value form. It follows libpq's tokenizer: a key
// runs to whitespace or '=', spaces may surround '=', an empty value takes the next word (as in
// libpq), a quoted value ends at its closing quote and an unquoted one at whitespace, with a
// backslash escaping the next byte in both. A word without '=' is left for the inner driver to
// reject unless it is a gate_ key. Each gate_ pair is cut out with one adjacent whitespace byte.
func splitKV(dsn string) (string, []gateParam, error) {
	var params []gateParam
	var cuts [][2]int
	n := len(dsn)
	for i := skipSpace(dsn, 0); i < n; i = skipSpace(dsn, i) {
		start := i
		for i < n && !isKVSpace(dsn[i]) && dsn[i] != '=' {
			i++
		}
		key := dsn[start:i]
		gate := isGateKey(key)
		eq := skipSpace(dsn, i)
		if eq == n || dsn[eq] != '=' {
			if gate {
				return "", nil, &DSNError{Key: key, Err: errMissingValue}
			}
			continue
		}
		i = skipSpace(dsn, eq+1)
		var raw string
		if i < n && dsn[i] == '\'' {
			i++
			vstart := i
			for i < n && dsn[i] != '\'' {
				if dsn[i] == '\\' {
					i++
				}
				i++
			}
			if i >= n {
				if gate {
					return "", nil, &DSNError{Key: key, Err: errUnterminated}
				}
				// Naming the key could quote a password: in "password=se cret='x" the
				// key would be "cret".
				return "", nil, &DSNError{Err: errors.New("unterminated quoted value in keyword/value DSN")}
			}
			raw = dsn[vstart:i]
			i++
		} else {
			vstart := i
			for i < n && !isKVSpace(dsn[i]) {
				if dsn[i] == '\\' {
					i++
				}
				i++
			}
			if i > n {
				if gate {
					return "", nil, &DSNError{Key: key, Err: errBackslashEnd}
				}
				i = n
			}
			raw = dsn[vstart:i]
		}
		if gate {
			params = append(params, gateParam{key, unescapeKV(raw)})
			cuts = append(cuts, [2]int{start, i})
		}
	}
	if len(params) == 0 {
		return dsn, nil, nil
	}
	var b strings.Builder
	b.Grow(len(dsn))
	prev := 0
	for _, cut := range cuts {
		s, e := cut[0], cut[1]
		// One separating byte goes with the pair, so FormatDSN's "gate_x=1 " + inner reads back
		// exactly: the one before it unless an earlier cut took that, else the one after.
		switch {
		case e < n && !isKVSpace(dsn[e]):
			// A quoted value ended the pair and the next pair starts right after it: the
			// space before must stay, or "a=0 gate_x='1'=b" would become "a=0=b".
		case s > prev && isKVSpace(dsn[s-1]):
			s--
		case e < n:
			e++
		}
		b.WriteString(dsn[prev:s])
		prev = e
	}
	b.WriteString(dsn[prev:])
	return b.String(), params, nil
}

// unescapeKV decodes \\ and \' as pgx does; any other backslash stays.
func unescapeKV(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '\\' || s[i+1] == '\'') {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// writeKVValue writes v so that splitKV reads it back unchanged.
func writeKVValue(b *strings.Builder, v string) {
	if v != "" && !strings.ContainsAny(v, " \t\n\v\f\r'\\") {
		b.WriteString(v)
		return
	}
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' || v[i] == '\'' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('\'')
}

// isGateKey reports whether key belongs to gated. The prefix is matched in any case, so that a
// misspelt GATE_CONCURRENT is refused instead of being forwarded to the server as a setting.
func isGateKey(key string) bool {
	return len(key) >= len(gatePrefix) && strings.EqualFold(key[:len(gatePrefix)], gatePrefix)
}

func isKVSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func skipSpace(s string, i int) int {
	for i < len(s) && isKVSpace(s[i]) {
		i++
	}
	return i
}

// shownValue quotes a gate_ value for an error message, unless it may hold another key's value: in
// keyword/value form "gate_queue= password=secret" gives gate_queue the value "password=secret",
// as libpq reads it, and an error must not repeat that.
func shownValue(v string) string {
	if strings.ContainsAny(v, "= \t\n\r\\'") {
		return "(not shown: it contains '=', a quote, a backslash or a space; is a value missing?)"
	}
	return strconv.Quote(v)
}
