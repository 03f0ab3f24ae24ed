package gated

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gatedsql/gated/internal/dsn"
	"github.com/gatedsql/gated/internal/fleet"
	"github.com/jackc/pgx/v5"
)

// Config configures a [Connector]. Build one with [ParseDSN] or as a literal; the two
// spellings of the same settings give the same gate. A zero field means the default of its
// DSN key (see [ParseDSN]): Config{DSN: d} is the gate of the DSN d, with B+Q and the connection
// lifetimes of a DSN that sets no gate_ key. Where the DSN's 0 means "none" (gate_queue=0,
// gate_queue_wait=0, gate_max_conn_lifetime=0, ...), the field takes [None], and that is what
// ParseDSN stores for such a 0. [NewConnector] copies the Config and fills in the defaults
// ([Connector.Config] shows the result), so later changes do not affect a connector already made.
type Config struct {
	// Driver is the inner database/sql driver name (gate_driver): "pgx" (default), "postgres"
	// (lib/pq) or any registered driver.
	Driver string
	// DSN is the inner driver's data source name, without any gate_ key.
	DSN string
	// MaxConns is P, the most physical connections open at once (gate_max_conns, default 10, or
	// the sum of all B when that is larger).
	MaxConns int
	// Concurrent is B, the execution permits (gate_concurrent, default MaxConns less the
	// workloads' B).
	Concurrent int
	// ConcurrentAuto (gate_concurrent=auto) makes Concurrent the default gate's ceiling: its
	// limit moves between ConcurrentMin and Concurrent from the service times of its
	// operations (see docs/adaptive.md). Concurrent must then be its default, MaxConns less the
	// workloads' B.
	ConcurrentAuto bool
	// ConcurrentMin is the lowest limit of every gate_concurrent=auto gate, and of workloads
	// with the option auto (gate_concurrent_min, default 1; zero means the default).
	ConcurrentMin int
	// Queue is Q, the admission permits beyond B (gate_queue, default Concurrent). None: no
	// queue, an operation that finds no execution permit free is refused at once.
	Queue int
	// QueueWait is the longest an admitted operation waits for an execution permit
	// (gate_queue_wait, default 1s). None: try once without waiting.
	QueueWait time.Duration
	// MaxConnLifetime closes physical connections older than this when they are next idle
	// (gate_max_conn_lifetime, default 1h). None: no limit.
	MaxConnLifetime time.Duration
	// MaxConnLifetimeJitter spreads the closing of connections opened together
	// (gate_max_conn_lifetime_jitter, pgxpool's MaxConnLifetimeJitter): each physical connection
	// draws a random extra life from [0, MaxConnLifetimeJitter) when it opens, so it lives from
	// MaxConnLifetime to MaxConnLifetime+MaxConnLifetimeJitter, never less. Zero means the
	// default, a tenth of MaxConnLifetime (6m of the default 1h), which turns the reconnects of a
	// fleet started together from a burst every hour into a trickle. None: no jitter, every
	// connection closes at MaxConnLifetime. Keep the sum below any limit the network or server
	// sets on a connection's age. It needs a MaxConnLifetime.
	MaxConnLifetimeJitter time.Duration
	// MaxConnIdleTime closes physical connections idle for longer than this
	// (gate_max_conn_idle_time, default 30m). None: no limit.
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
	// MaxConns.
	Workloads []Workload
	// Name is gate_name (default none): the Connectors of this process made with the same
	// non-empty Name share one set of gates and one physical pool, and must have equal
	// configurations. With pgx and lib/pq it is also the application_name of the physical
	// connections when the DSN sets none.
	Name string
	// StatementTimeout is the server-side limit on each statement (gate_statement_timeout): with
	// StatementDeadline false, a fixed limit (zero or None: none, "off"); with StatementDeadline
	// true, the cap on the context's remaining time, or the limit when the context has no
	// deadline (zero: no cap). See [ParseDSN] for the DSN spelling. PostgreSQL drivers only.
	StatementTimeout time.Duration
	// StatementDeadline makes the server-side limit follow the context's deadline
	// (gate_statement_timeout=deadline or deadline:<dur>).
	StatementDeadline bool
	// LockTimeout is the server's lock_timeout for gated's operations (gate_lock_timeout,
	// default zero or None: "off", the server's own setting). PostgreSQL drivers only.
	LockTimeout time.Duration
	// Pooler is gate_pooler: "" (none, the default, also "none") or [PoolerTransaction] when the
	// DSN points at a pooler in transaction mode (PgBouncer's pool_mode=transaction). PostgreSQL
	// drivers only.
	Pooler string
	// Fleet is gate_fleet=on (default off): MaxConns and every gate's B and Q are the totals of
	// all live instances with this Name on this database, and each instance runs with its share,
	// coordinated through the database itself (see docs/fleet.md). It needs a Name and a
	// PostgreSQL driver; each instance keeps one connection of its share for its lease.
	Fleet bool
	// FleetTable is gate_fleet_table (zero: "gated_fleet"): the table, created when the role
	// may, that holds the fleet's leases, a lowercase identifier optionally schema-qualified.
	FleetTable string
	// FleetTTL is gate_fleet_ttl (zero: 15s): how long a member's lease lasts, by the
	// database's clock. A crashed instance's share comes back after it.
	FleetTTL time.Duration
	// FleetRefresh is gate_fleet_refresh (zero: 5s): how often a member refreshes its lease,
	// at most a third of FleetTTL.
	FleetRefresh time.Duration

	// PgxBeforeConnect, when not nil, is called with gate_driver=pgx before each physical
	// connection opens, with a copy of the pgx configuration parsed from DSN that it may change
	// (pgxpool.Config's BeforeConnect): set a Tracer, a TLSConfig, OnNotice or OnNotification,
	// RuntimeParams. gated keeps what it owns: the socket is still dialed through gated (the hook
	// may set DialFunc, which gated then wraps), pgx's handling of an ended context stays the
	// default one, gated's startup parameters (gate_statement_timeout, gate_lock_timeout) and
	// the application_name of gate_name when none is set stay, and with gate_pooler=transaction
	// the query exec mode must still be exec or simple_protocol. An error fails the connection
	// attempt. Code only, no DSN key; with a shared gate_name the hooks of the first Connector
	// apply, as its Observer and Logger do. See docs/configuration-pgx.md.
	PgxBeforeConnect func(context.Context, *pgx.ConnConfig) error
	// PgxAfterConnect, when not nil, is called with gate_driver=pgx on each new physical
	// connection before its first use (pgxpool.Config's AfterConnect): register types on
	// conn.TypeMap() (conn.LoadType for enums, domains and composite types, pgvector's
	// RegisterTypes). An error closes the connection and fails the attempt. What it leaves in
	// the session (a SET) lasts as long as the connection, under every caller.
	PgxAfterConnect func(context.Context, *pgx.Conn) error
}

// None, in a [Config] or [Workload] field whose documentation says so, asks for none of it where
// zero means the default: Queue: None is no queue, QueueWait: None no wait (try once),
// MaxConnLifetime: None and MaxConnIdleTime: None no limit, MaxConnLifetimeJitter: None no
// jitter. A DSN spells it 0 (gate_queue=0, gate_queue_wait=0s), and [ParseDSN] stores None for
// that 0. Any other negative value is an error.
const None = -1

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
	// QueueFIFO serves waiters in arrival order, each waiting at most gate_queue_wait (within
	// one priority and tenant: see WithPriority and WithTenant).
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
	defaultFleetTTL        = 15 * time.Second
	defaultFleetRefresh    = 5 * time.Second
	// defaultJitterDivisor: the default jitter is a tenth of the lifetime. pgxpool's default is
	// none, HikariCP takes up to 2.5% off; a tenth spreads the reconnects of connections opened
	// in the same second (a fleet deployed together, a pool filled by a burst) over six minutes
	// of the default hour, while a connection still lives at most 10% longer than asked.
	defaultJitterDivisor = 10
)

var (
	errEmptyDriver = errors.New("empty driver name")
	errSelfDriver  = errors.New(`"` + DriverName + `" would wrap gated in itself`)
)

// Clone returns a copy of c, or nil when c is nil. The copy shares c's Observer, Logger and pgx
// hooks, which are meant to be shared, and nothing else.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	cp := *c
	cp.Workloads = slices.Clone(c.Workloads)
	return &cp
}

// fillDefaults gives the zero fields of c the defaults of their DSN keys, row by row of dsnKeys
// (each row's fill), in the order the defaults depend on each other: gate_max_conns not given
// grows to the B asked for; B follows P less the workloads' B; Q follows the final B; a
// workload's Q follows its B and its wait gate_queue_wait. It also writes the "none" spellings
// that have a zero of their own ("fifo", "none", None timeouts) as that zero, so that equal gates
// have equal Configs. It validates nothing: normalize does.
func (c *Config) fillDefaults() {
	for i := range dsnKeys {
		if fill := dsnKeys[i].fill; fill != nil {
			fill(c)
		}
	}
}

// fleetTable, fleetTTL and fleetRefresh return the fleet's settings of c, defaults filled in.
func (c *Config) fleetTable() string {
	if c.FleetTable == "" {
		return fleet.DefaultTable
	}
	return c.FleetTable
}

func (c *Config) fleetTTL() time.Duration {
	if c.FleetTTL == 0 {
		return defaultFleetTTL
	}
	return c.FleetTTL
}

func (c *Config) fleetRefresh() time.Duration {
	if c.FleetRefresh == 0 {
		return defaultFleetRefresh
	}
	return c.FleetRefresh
}

// normalize fills in the defaults of c's zero fields (fillDefaults) and validates every field,
// naming the DSN key of a bad one in a *DSNError: each key's value as given (checkGiven), then
// the rules between keys once the defaults are filled in (checkRules). On error c is unchanged,
// so a caller may report the fields as they were given. Normalizing a normalized Config changes
// nothing.
func (c *Config) normalize() error {
	if err := c.checkGiven(); err != nil {
		return err
	}
	n := c.Clone()
	n.fillDefaults()
	if err := n.checkRules(); err != nil {
		return err
	}
	*c = *n
	return nil
}

// checkGiven validates each key's field as given, before its default is filled in (each row's
// check): signs, the values of the string fields, the workloads.
func (c *Config) checkGiven() error {
	for _, k := range dsnKeys {
		if k.check == nil {
			continue
		}
		if err := k.check(c); err != nil {
			return &DSNError{Key: k.name, Err: err}
		}
	}
	return nil
}

// lifetimeJitter returns the jitter of a normalized c, as the pool takes it: 0 for none.
func (c *Config) lifetimeJitter() time.Duration {
	switch {
	case c.MaxConnLifetime <= 0 || c.MaxConnLifetimeJitter == None:
		return 0
	case c.MaxConnLifetimeJitter == 0:
		return c.MaxConnLifetime / defaultJitterDivisor
	}
	return c.MaxConnLifetimeJitter
}

// orZero turns the None of a normalized field into the zero that gates and pools read as none.
func orZero[T ~int | ~int64](v T) T { return max(v, 0) }

// How a Config and a Connector print: as the DSN that FormatDSN writes, with every password
// replaced by "xxxxx", whatever the verb (a Formatter: fmt would print a struct field by field,
// the DSN among them, for a verb a Stringer does not serve, such as %d) and in log/slog.
//
// Config's methods have value receivers so that a Config prints so whether it is a value or a
// pointer, alone or in an exported field, slice or map of another value: fmt does not find a
// pointer method on a value. fmt finds no method at all on an unexported field, so a type that
// holds a Config in one (a Connector) needs printing methods of its own; print_test.go finds
// every exported type that can reach a DSN and prints it.

var (
	_ fmt.Formatter  = Config{}
	_ fmt.Stringer   = Config{}
	_ fmt.GoStringer = Config{}
	_ slog.LogValuer = Config{}

	_ fmt.Formatter  = (*Connector)(nil)
	_ fmt.Stringer   = (*Connector)(nil)
	_ fmt.GoStringer = (*Connector)(nil)
	_ slog.LogValuer = (*Connector)(nil)
)

// String returns c as a DSN, as [Config.FormatDSN] writes it, with the value of every password
// key (password, sslpassword, ...) and a URL's or mysql DSN's userinfo password replaced by
// "xxxxx", and anything else that spells a piece of a password removed as [Redact] does.
// Observer and Logger are not shown. fmt's %v, %+v and %s use it; it never shows a password.
// Use FormatDSN for the DSN itself.
func (c Config) String() string {
	return dsn.RedactDSN(c.FormatDSN())
}

// GoString returns c for fmt's %#v, without its password: gated.Config("<String>").
func (c Config) GoString() string {
	return "gated.Config(" + strconv.Quote(c.String()) + ")"
}

// Format prints c for fmt: %#v as GoString, every other verb as that verb prints c's String
// (%x in hex, %d as a bad verb), so that no verb shows a password.
func (c Config) Format(f fmt.State, verb rune) {
	printRedacted(f, verb, c.String, c.GoString)
}

// LogValue returns c for log/slog: its String, which never shows a password.
func (c Config) LogValue() slog.Value {
	return slog.StringValue(c.String())
}

// String returns the Connector's configuration as [Config.String] prints it, defaults filled
// in: its DSN with every password replaced by "xxxxx". fmt's %v, %+v and %s use it.
func (c *Connector) String() string {
	if c == nil {
		return "<nil>"
	}
	return c.cfg.String()
}

// GoString returns c for fmt's %#v, without its password: &gated.Connector("<String>").
func (c *Connector) GoString() string {
	if c == nil {
		return "(*gated.Connector)(nil)"
	}
	return "&gated.Connector(" + strconv.Quote(c.String()) + ")"
}

// Format prints c for fmt: %#v as GoString, every other verb as that verb prints c's String,
// so that no verb shows a password.
func (c *Connector) Format(f fmt.State, verb rune) {
	printRedacted(f, verb, c.String, c.GoString)
}

// LogValue returns c for log/slog: its String, which never shows a password.
func (c *Connector) LogValue() slog.Value {
	return slog.StringValue(c.String())
}

// printRedacted prints a value whose text without passwords is str() and goString(): %#v as
// goString(), and every other verb as it would print the string str().
func printRedacted(f fmt.State, verb rune, str, goString func() string) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, goString())
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), str())
}

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
