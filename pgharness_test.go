package gated

// The PostgreSQL test harness: every integration test of this package opens its gated *sql.DB
// here, runs once per inner driver through runPG (or withPG), and ends with checkQuiet, the one
// check that every permit is back. The tests themselves live in files named by what they prove.
// The contract tests that need only gated's public API are in the module pgcontract/, whose
// harness has the same names; what both need without gated's types is in internal/pgtest.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"iter"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated/internal/faultproxy"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/gatedsql/gated/internal/testkit"
)

// A pgEnv is what a test body run by runPG or withPG works with.
type pgEnv struct {
	drv string     // the inner driver: "pgx" or "postgres" (lib/pq)
	db  *sql.DB    // gated.Open on the server, closed at cleanup
	c   *Connector // db's connector
	app string     // db's application_name, unique: finds its backends in pg_stat_activity
	adm *sql.DB    // a plain pgx DB on the main test server, for observing and disturbing it
}

// runPG runs body once per inner driver, as a subtest named after the driver, on a gated DB
// opened on the test server with the gate keys in params (URL query syntax), and then checks
// that every permit is back (checkQuiet). A body that ends with t.Fatal skips the check.
func runPG(t *testing.T, params string, body func(t *testing.T, e *pgEnv)) {
	forEachDriver(t, func(t *testing.T, drv string) { withPG(t, "", drv, params, body) })
}

// withPG is runPG for one inner driver drv, without a subtest, on the server at base ("" for the
// test server): for tests that open one DB per case or run on a server of their own.
func withPG(t *testing.T, base, drv, params string, body func(t *testing.T, e *pgEnv)) {
	t.Helper()
	if base == "" {
		base = pgtest.URL(t)
	}
	e := &pgEnv{drv: drv, adm: admin(t)}
	e.db, e.c, e.app = openPGAt(t, base, drv, params)
	body(t, e)
	checkQuiet(t, e.db, e.c, 0)
}

// openPG opens a gated *sql.DB with gated.Open on the test server and closes it at cleanup,
// checking that no physical connection is left on the server afterwards. Most tests get theirs
// from runPG; openPG is for the few that close it themselves.
func openPG(t testing.TB, drv, params string) (*sql.DB, *Connector, string) {
	t.Helper()
	return openPGAt(t, pgtest.URL(t), drv, params)
}

// openPGAt is openPG on the server at base.
func openPGAt(t testing.TB, base, drv, params string) (*sql.DB, *Connector, string) {
	t.Helper()
	dsn, app := pgDSN(t, base, drv, params)
	db, err := Open(dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	c, _ := FromDB(db)
	t.Cleanup(func() {
		db.Close()
		if s := c.Stats(); s.Pool.Open != 0 {
			t.Errorf("after db.Close: %d physical connections still open", s.Pool.Open)
		}
	})
	return db, c, app
}

// idleSocket returns gated's socket of c's only idle connection, nil when there is none.
func idleSocket(c *Connector) *sockconn.Conn {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	if len(c.pool.idle) != 1 {
		return nil
	}
	return c.pool.idle[0].sock
}

// isGateError reports whether err is one the gate produces under load.
func isGateError(err error) bool {
	return IsRejected(err) || errors.Is(err, ErrWaitCanceled)
}

// checkGateRefusal fails unless err is the gate's refusal want, one that database/sql will not
// retry (I6).
func checkGateRefusal(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) || !IsRejected(err) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
	if errors.Is(err, driver.ErrBadConn) {
		t.Errorf("%s: %v wraps driver.ErrBadConn, which database/sql retries", what, err)
	}
}

// gateAttempts is the number of gate attempts the counters of c account for.
func gateAttempts(c *Connector) int64 {
	s := c.Stats()
	return s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled
}

// A txResult is what a BeginTx started in the background returned.
type txResult struct {
	tx  *sql.Tx
	err error
}

// beginQueued starts db.BeginTx(ctx) in the background and returns once the call waits in the
// gate's queue (Stats().Waiting grew by one). The caller must receive from the channel.
func beginQueued(t testing.TB, db *sql.DB, c *Connector, ctx context.Context) <-chan txResult {
	t.Helper()
	before := c.Stats().Waiting
	done := make(chan txResult, 1)
	go func() {
		tx, err := db.BeginTx(ctx, nil)
		done <- txResult{tx, err}
	}()
	waitFor(t, "the transaction to queue in the gate", func() bool { return c.Stats().Waiting == before+1 })
	return done
}

// proxied returns a fault-injection proxy in front of the test server and a base URL through it.
func proxied(t *testing.T) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil || u.Host == "" {
		t.Skipf("the test server's URL has no host to put a proxy in front of: %v", err)
	}
	p := faultproxy.Start(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

// countRows returns how many rows table has, as adm sees it.
func countRows(t *testing.T, adm *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := adm.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// appSeq and objSeq number the names that tests make of their own (roles, fleet tables, hooked
// drivers), with prefixes that pgtest's names do not use.
var appSeq, objSeq atomic.Int64

// The helpers that need no gated type live in internal/pgtest, shared with the contract tests in
// pgcontract/; these names keep this package's tests short.
var (
	pgDSN                 = pgtest.DSN
	admin                 = pgtest.Admin
	pgObject              = pgtest.Object
	pgTable               = pgtest.Table
	pgFunction            = pgtest.Function
	lockedRow             = pgtest.LockedRow
	backends              = pgtest.Backends
	activeQueries         = pgtest.ActiveQueries
	backendPID            = pgtest.BackendPID
	killBackend           = pgtest.KillBackend
	killBackendNoExitWait = pgtest.KillBackendNoExitWait
	driverSQLState        = pgtest.DriverSQLState
	innerDrivers          = pgtest.Drivers
	forEachDriver         = pgtest.ForEachDriver
	mustBegin             = pgtest.MustBegin
	hold                  = pgtest.Hold
	gateOps               = pgtest.Ops
	storeMax              = pgtest.StoreMax
	repeat                = pgtest.Repeat
)

// gates adapts a Connector to what pgtest's quiet check reads.
type gates struct{ c *Connector }

func gateState(s Stats) pgtest.GateState {
	return pgtest.GateState{Concurrent: s.Concurrent, Running: s.Running, Waiting: s.Waiting,
		WaitDuration: s.WaitDuration, InUse: s.Pool.InUse, Open: s.Pool.Open, MaxConns: s.Pool.MaxConns}
}

func (g gates) Stats() pgtest.GateState { return gateState(g.c.Stats()) }

func (g gates) All() iter.Seq2[string, pgtest.GateState] {
	return func(yield func(string, pgtest.GateState) bool) {
		for name, s := range g.c.AllStats() {
			if !yield(name, gateState(s)) {
				return
			}
		}
	}
}

func (g gates) Gate(name string) pgtest.GateState {
	s, _ := g.c.WorkloadStats(name)
	return gateState(s)
}

func (gates) WithWorkload(ctx context.Context, name string) context.Context {
	return WithWorkload(ctx, name)
}

// quiet reports whether no gate of c has an operation running or waiting and no physical
// connection is in use.
func quiet(c *Connector) bool { return pgtest.Quiet(gates{c}) }

// waitIdle waits until no gate of c has anything running or waiting and no physical connection
// is in use.
func waitIdle(t testing.TB, c *Connector) { t.Helper(); pgtest.WaitIdle(t, gates{c}) }

// checkQuiet ends every integration test (I7: every permit back once nothing runs):
// pgtest.CheckQuiet on c, whose database/sql pool made sqlWaits callers wait.
func checkQuiet(t testing.TB, db *sql.DB, c *Connector, sqlWaits int64) {
	t.Helper()
	pgtest.CheckQuiet(t, db, gates{c}, sqlWaits)
}

// checkDSNErrorSafe is testkit.CheckDSNErrorSafe with the key of the *DSNError that err wraps.
func checkDSNErrorSafe(t *testing.T, dsn string, err error, password string) {
	t.Helper()
	var key string
	if de := (*DSNError)(nil); errors.As(err, &de) {
		key = de.Key
	}
	testkit.CheckDSNErrorSafe(t, dsn, err, key, password)
}
