package pgcontract_test

// The PostgreSQL test harness: every test of this package opens its gated *sql.DB here through
// gated's public API, runs once per inner driver through runPG (or withPG), and ends with
// checkQuiet, the one check that every permit is back. The tests themselves live in files named
// by what they prove. What needs no gated type comes from internal/pgtest, shared with the root
// package's own tests.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"iter"
	"slices"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/testkit"
	"github.com/gatedsql/gated/internal/testwait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// waitFor polls cond until it holds (testwait.For).
var waitFor = testwait.For

// testPassword is in every malformed DSN, so a test can tell that no error message quotes it.
const testPassword = "s3cr3t-pw"

var (
	forEachDriver  = pgtest.ForEachDriver
	pgDSN          = pgtest.DSN
	admin          = pgtest.Admin
	pgTable        = pgtest.Table
	pgFunction     = pgtest.Function
	lockedRow      = pgtest.LockedRow
	backends       = pgtest.Backends
	activeQueries  = pgtest.ActiveQueries
	backendPID     = pgtest.BackendPID
	killBackend    = pgtest.KillBackend
	driverSQLState = pgtest.DriverSQLState
	mustBegin      = pgtest.MustBegin
	hold           = pgtest.Hold
	gateOps        = pgtest.Ops
	opNamed        = pgtest.OpNamed
	storeMax       = pgtest.StoreMax
	repeat         = pgtest.Repeat
)

type (
	namedOp = pgtest.Op
	holder  = pgtest.Holder
)

// A pgEnv is what a test body run by runPG or withPG works with.
type pgEnv struct {
	drv string           // the inner driver: "pgx" or "postgres" (lib/pq)
	db  *sql.DB          // gated.Open on the server, closed at cleanup
	c   *gated.Connector // db's connector
	app string           // db's application_name, unique: finds its backends in pg_stat_activity
	adm *sql.DB          // a plain pgx DB on the main test server, for observing and disturbing it
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
func openPG(t testing.TB, drv, params string) (*sql.DB, *gated.Connector, string) {
	t.Helper()
	return openPGAt(t, pgtest.URL(t), drv, params)
}

// openPGAt is openPG on the server at base.
func openPGAt(t testing.TB, base, drv, params string) (*sql.DB, *gated.Connector, string) {
	t.Helper()
	dsn, app := pgDSN(t, base, drv, params)
	db, err := gated.Open(dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	c, _ := gated.FromDB(db)
	t.Cleanup(func() {
		db.Close()
		if s := c.Stats(); s.Pool.Open != 0 {
			t.Errorf("after db.Close: %d physical connections still open", s.Pool.Open)
		}
	})
	return db, c, app
}

// gates adapts a Connector to what pgtest's quiet check reads.
type gates struct{ c *gated.Connector }

func gateState(s gated.Stats) pgtest.GateState {
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
	return gated.WithWorkload(ctx, name)
}

// waitIdle waits until no gate of c has anything running or waiting and no physical connection
// is in use.
func waitIdle(t testing.TB, c *gated.Connector) { t.Helper(); pgtest.WaitIdle(t, gates{c}) }

// checkQuiet ends every test (I7: every permit back once nothing runs): pgtest.CheckQuiet on c,
// whose database/sql pool made sqlWaits callers wait.
func checkQuiet(t testing.TB, db *sql.DB, c *gated.Connector, sqlWaits int64) {
	t.Helper()
	pgtest.CheckQuiet(t, db, gates{c}, sqlWaits)
}

// isGateError reports whether err is one the gate produces under load.
func isGateError(err error) bool {
	return gated.IsRejected(err) || errors.Is(err, gated.ErrWaitCanceled)
}

// isGateWaitCanceled reports whether err is the gate giving up a wait because the caller's context
// ended (counted in Canceled), as opposed to a context error from the driver or database/sql.
func isGateWaitCanceled(err error) bool {
	return errors.Is(err, gated.ErrWaitCanceled) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// checkGateRefusal fails unless err is the gate's refusal want, one that database/sql will not
// retry (I6).
func checkGateRefusal(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) || !gated.IsRejected(err) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
	if errors.Is(err, driver.ErrBadConn) {
		t.Errorf("%s: %v wraps driver.ErrBadConn, which database/sql retries", what, err)
	}
}

// checkCounted fails unless the gate's counters grew from before to after by exactly admitted,
// full (RejectedFull), timedOut (RejectedTimeout) and canceled.
func checkCounted(t testing.TB, what string, before, after gated.Stats, admitted, full, timedOut, canceled int64) {
	t.Helper()
	got := [4]int64{after.Admitted - before.Admitted, after.RejectedFull - before.RejectedFull,
		after.RejectedTimeout - before.RejectedTimeout, after.Canceled - before.Canceled}
	if want := [4]int64{admitted, full, timedOut, canceled}; got != want {
		t.Errorf("%s: counters [admitted full timeout canceled] grew by %v, want %v (before %+v, after %+v)", what, got, want, before, after)
	}
}

// gateAttempts is the number of gate attempts the counters of c account for.
func gateAttempts(c *gated.Connector) int64 {
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
func beginQueued(t testing.TB, db *sql.DB, c *gated.Connector, ctx context.Context) <-chan txResult {
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

// startQueued runs op in the background and returns its result channel once op waits in the gate.
func startQueued(t testing.TB, c *gated.Connector, op func() error) <-chan error {
	t.Helper()
	before := c.Stats().Waiting
	done := make(chan error, 1)
	go func() { done <- op() }()
	waitFor(t, "the operation to queue in the gate", func() bool { return c.Stats().Waiting == before+1 })
	return done
}

// checkDSNErrorSafe is testkit.CheckDSNErrorSafe with the key of the *gated.DSNError that err
// wraps.
func checkDSNErrorSafe(t *testing.T, dsn string, err error, password string) {
	t.Helper()
	var key string
	if de := (*gated.DSNError)(nil); errors.As(err, &de) {
		key = de.Key
	}
	testkit.CheckDSNErrorSafe(t, dsn, err, key, password)
}

// appActivity describes the backends of app: pid, state, when the state last changed and the
// last statement. It changes whenever one of them runs anything or a backend comes or goes.
func appActivity(t testing.TB, adm *sql.DB, app string) string {
	t.Helper()
	rows, err := adm.Query(`SELECT pid, state, state_change, query FROM pg_stat_activity
		WHERE application_name = $1 ORDER BY pid`, app)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	defer rows.Close()
	var out string
	for rows.Next() {
		var pid int
		var state, query string
		var changed time.Time
		if err := rows.Scan(&pid, &state, &changed, &query); err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("  pid %d %s since %s: %s\n", pid, state, changed.Format(time.RFC3339Nano), query)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// medianDuration returns the median of ds, which it sorts.
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
