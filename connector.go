package gated

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gatedsql/gated/internal/drivers"
	"github.com/gatedsql/gated/internal/fleet"
)

// A Connector is a gate and the physical connection pool behind it. It implements
// driver.Connector: use it with [OpenDB] (or sql.OpenDB), or let sql.Open("gated", dsn) make one.
// Connect hands out virtual connections that bind to a physical connection only while an
// operation runs; see the package documentation.
//
// A Connector is safe for concurrent use. Close it by closing the *sql.DB that uses it.
type Connector struct {
	cfg      *Config // a pointer, so that fmt never prints its DSN field by field (config.go)
	drv      Driver
	set      *gateSet         // the gates and the pool, shared with other Connectors of the same gate_name
	pool     *pool            // set.pool
	gate     *gate            // set's default gate
	gates    map[string]*gate // set's named workloads; read-only
	stmts    *stmtRegistry    // set.stmts
	obs      *observer        // set.obs: the Observer and Logger of the set's first Config (observer.go)
	timeouts timeouts         // statement_timeout and lock_timeout (timeout.go)
	closed   atomic.Bool
}

var _ driver.Connector = (*Connector)(nil)

// NewConnector validates a copy of cfg, with the defaults of its zero fields filled in (see
// [Config]), and returns a Connector for it. It does no I/O: the first physical connection opens with the first operation.
// With a Name (gate_name) already used by an open Connector of this process, the new one shares
// that Connector's gates and pool; its configuration must then be equal, or the error is a
// *[DSNError] naming the first key that differs. Such shared gates close with the last of their
// Connectors, so close every Connector made (closing its *sql.DB does).
// The inner driver must be registered with database/sql (import it), except "pgx" (pgx v5) and
// "postgres" (lib/pq), which gated imports and uses directly. Errors are *[DSNError] naming the
// key at fault, or the inner driver's DSN error with any password removed from its message.
func NewConnector(cfg *Config) (*Connector, error) {
	if cfg == nil {
		return nil, errNilConfig
	}
	c := &Connector{cfg: cfg.Clone()}
	if err := c.cfg.normalize(); err != nil {
		return nil, err
	}
	if c.cfg.Fleet && c.cfg.Name == "" {
		return nil, errFleetName
	}
	set, err := openGateSet(c.cfg)
	if err != nil {
		return nil, err
	}
	c.drv.c = c
	c.set, c.pool, c.gate, c.gates, c.stmts, c.obs = set, set.pool, set.def, set.named, &set.stmts, &set.obs
	c.timeouts = newTimeouts(c.cfg)
	return c, nil
}

// A gateSet is the gates of one configuration, the default one and one per workload, and the
// physical pool they share. Connectors of the same gate_name share one.
type gateSet struct {
	cfg   Config
	pool  *pool
	def   *gate
	named map[string]*gate
	stmts stmtRegistry
	obs   observer
	fleet *fleet.Member // the set's membership of its fleet (gate_fleet=on), or nil
	refs  int           // Connectors using the set; guarded by namedSetsMu
}

var (
	namedSetsMu sync.Mutex
	namedSets   = map[string]*gateSet{} // by gate_name; guarded by namedSetsMu
)

// openGateSet returns the gate set for cfg: a new one, or the open one of cfg.Name.
func openGateSet(cfg *Config) (*gateSet, error) {
	if cfg.Name == "" {
		return newGateSet(cfg)
	}
	namedSetsMu.Lock()
	defer namedSetsMu.Unlock()
	if set := namedSets[cfg.Name]; set != nil {
		if err := sameGate(&set.cfg, cfg); err != nil {
			return nil, err
		}
		set.refs++
		return set, nil
	}
	set, err := newGateSet(cfg)
	if err != nil {
		return nil, err
	}
	set.refs = 1
	namedSets[cfg.Name] = set
	return set, nil
}

func newGateSet(cfg *Config) (*gateSet, error) {
	var app string
	if cfg.Name != "" {
		app = cfg.Name
	}
	inner, wrap, err := drivers.New(cfg.Driver, cfg.DSN, drivers.Options{App: app, Params: newTimeouts(cfg).startupParams(), Pooled: cfg.Pooler != "",
		PgxBefore: cfg.PgxBeforeConnect, PgxAfter: cfg.PgxAfterConnect})
	if err != nil {
		return nil, settingError(err)
	}
	set := &gateSet{cfg: *cfg.Clone()}
	// cfg is normalized: orZero turns its None into the zero that gates and pools read as none.
	set.pool = newPool(inner, wrap, cfg.MaxConns, orZero(cfg.MaxConnLifetime), orZero(cfg.MaxConnIdleTime))
	set.pool.jitter = cfg.lifetimeJitter()
	adaptive := cfg.QueueOrder == QueueAdaptive
	set.def = newGate(gateConfig{name: DefaultWorkload, concurrent: cfg.Concurrent, queue: orZero(cfg.Queue), queueWait: orZero(cfg.QueueWait), adaptive: adaptive}, set.pool)
	set.def.autoLimit(cfg.ConcurrentAuto, max(cfg.ConcurrentMin, 1))
	set.named = make(map[string]*gate, len(cfg.Workloads))
	lends := map[*gate]bool{}
	for _, w := range cfg.Workloads {
		g := newGate(gateConfig{name: w.Name, concurrent: w.Concurrent, queue: orZero(w.Queue), queueWait: orZero(w.QueueWait), adaptive: adaptive}, set.pool)
		g.autoLimit(w.Auto, max(cfg.ConcurrentMin, 1))
		lends[g] = w.Lend
		set.named[w.Name] = g
	}
	linkLending(set.gates(), func(g *gate) bool { return lends[g] })
	set.initObserve(cfg)
	if cfg.Fleet {
		set.startFleet(cfg, func(ctx context.Context) (fleet.Conn, error) { return dialLease(ctx, inner, wrap) })
	}
	return set, nil
}

// gates returns the set's gates, the default one first, then the workloads in Config order.
func (set *gateSet) gates() []*gate {
	gs := []*gate{set.def}
	for _, w := range set.cfg.Workloads {
		gs = append(gs, set.named[w.Name])
	}
	return gs
}

// release drops one Connector's use of the set and reports whether it was the last, which
// closes the gates and the pool.
func (set *gateSet) release() bool {
	if set.cfg.Name == "" {
		return true
	}
	namedSetsMu.Lock()
	defer namedSetsMu.Unlock()
	if set.refs--; set.refs > 0 {
		return false
	}
	delete(namedSets, set.cfg.Name)
	return true
}

var errNilConfig = errors.New("gated: NewConnector: nil *Config (use gated.ParseDSN or a &gated.Config{...})")

// Connect returns a new virtual connection. It does no I/O and cannot fail, except after Close.
func (c *Connector) Connect(context.Context) (driver.Conn, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	return &conn{c: c}, nil
}

// Driver returns a gated [Driver] bound to this Connector, which [FromDB] recognizes.
func (c *Connector) Driver() driver.Driver { return &c.drv }

// Close closes the gates and every idle physical connection, and waits for connections being
// destroyed. Waiting operations fail with [ErrClosed]; running ones keep their connection until
// they end, and it is closed then. With a gate_name shared by other open Connectors, only this
// Connector closes (Connect fails with ErrClosed) and the gates and pool stay open for them.
// With gate_fleet=on, the last Close then waits, at most gate_fleet_ttl, until the connections
// still in use are closed, and deletes the instance's lease so that the rest of the fleet takes
// its share at once. database/sql's DB.Close calls it. Close is idempotent.
func (c *Connector) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if !c.set.release() {
		return nil
	}
	c.gate.close()
	for _, g := range c.gates {
		g.close()
	}
	c.pool.close()
	if c.set.fleet != nil {
		c.set.fleet.Close() // after the pool: the share is given up once no connection is left
	}
	c.set.closeObserve()
	return nil
}

func (c *Connector) isClosed() bool { return c.closed.Load() }

// Config returns a copy of the Connector's configuration, defaults filled in: [None] where none
// was asked for, and a zero MaxConnLifetimeJitter for its default, a tenth of MaxConnLifetime.
func (c *Connector) Config() *Config { return c.cfg.Clone() }

// Stats returns a snapshot of the default gate and the physical pool; see [Connector.WorkloadStats]
// for the other workloads. Safe for concurrent use.
func (c *Connector) Stats() Stats { return c.snapshot(c.gate, c.poolSnapshot()) }

// AllStats yields a snapshot of every gate, the workload's name with its Stats: "default" first,
// then the workloads of gate_workloads in the order they were given, as [Connector.Workloads]
// names them. Every Stats carries the same snapshot of the shared physical pool, taken once
// before the first gate's. Each gate's snapshot is taken when it is yielded, so that a loop that
// stops early reads no more. Safe for concurrent use; exporters (gatedprom, gatedotel) and the
// Rejecter read every workload through it.
func (c *Connector) AllStats() StatsSeq {
	return func(yield func(string, Stats) bool) {
		pool := c.poolSnapshot()
		for _, g := range c.set.gates() {
			if !yield(g.name, c.snapshot(g, pool)) {
				return
			}
		}
	}
}

// Attach attaches o to the Connector from now on, beside [Config.Observer] and any Observer
// attached before: every event goes to each of them, in the order they were attached (fan-out;
// attaching one Observer twice makes it see every event twice). It returns the function that
// detaches o again, which is idempotent. An operation that was already running when o was
// attached reports its durations measured from then on as 0. Connectors sharing a gate_name
// share their gates, so o sees the events of them all. Nothing attached costs nothing; with
// Observers attached an operation allocates nothing more. Safe for concurrent use.
//
// This is how gatedprom's and gatedotel's collectors get their histograms from a Connector that
// sql.Open made from a DSN:
//
//	db, err := sql.Open("gated", dsn)
//	...
//	c, _ := gated.FromDB(db)
//	detach := c.Attach(obs)
//	defer detach()
func (c *Connector) Attach(o Observer) (detach func()) {
	if o == nil {
		return func() {}
	}
	return c.obs.attach(o)
}

// admissionLimit is Σ(B+Q) over all gates: the most operations inside them at once.
func (c *Connector) admissionLimit() int {
	n := c.cfg.Concurrent + orZero(c.cfg.Queue)
	for _, w := range c.cfg.Workloads {
		n += w.Concurrent + orZero(w.Queue)
	}
	return n
}
