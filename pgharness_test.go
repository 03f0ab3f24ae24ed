package gated

// The PostgreSQL test harness: every integration test of this package opens its gated *sql.DB
// here, runs once per inner driver through runPG (or withPG), and ends with checkQuiet, the one
// check that every permit is back. The tests themselves live in files named by what they prove.

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/faultproxy"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

// innerDrivers are the drivers every integration test runs with.
var innerDrivers = []string{"pgx", "postgres"}

// forEachDriver runs f as one subtest per inner driver.
func forEachDriver(t *testing.T, f func(t *testing.T, drv string)) {
	for _, drv := range innerDrivers {
		t.Run(drv, func(t *testing.T) { f(t, drv) })
	}
}

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

var appSeq atomic.Int64

// pgDSN returns a gated DSN for the server at base: driver drv, the gate keys in params (URL
// query syntax, "" for none), and a unique application_name, returned too, that finds the test's
// backends in pg_stat_activity.
func pgDSN(t testing.TB, base, drv, params string) (dsn, app string) {
	t.Helper()
	app = fmt.Sprintf("gated_test_%d_%d", time.Now().UnixNano()%1e6, appSeq.Add(1))
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("test database URL: %v", err)
	}
	q := u.Query()
	q.Set("application_name", app)
	q.Set("gate_driver", drv)
	if params != "" {
		extra, err := url.ParseQuery(params)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range extra {
			q[k] = v
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), app
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

// admin returns a plain pgx *sql.DB on the test server for observing and disturbing it.
func admin(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
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

// waitIdle waits until the gate of c has nothing running or waiting and no physical connection
// in use.
func waitIdle(t testing.TB, c *Connector) {
	t.Helper()
	waitFor(t, "every gate idle", func() bool { return quiet(c) })
}

// quiet reports whether no gate of c has an operation running or waiting and no physical
// connection is in use.
func quiet(c *Connector) bool {
	for _, s := range c.AllStats() {
		if s.Running != 0 || s.Waiting != 0 || s.Pool.InUse != 0 {
			return false
		}
	}
	return true
}

// checkQuiet ends every integration test (I7: every permit back once nothing runs). It waits
// until every gate (AllStats: the default one and each workload's) has Running = Waiting = 0 and
// no physical connection is in use, and checks that no more than P are open and that each gate
// serves a new operation. Then, gate by gate, every one of its B execution permits must be
// available at once: B transactions begin under the workload, each runs a statement, without
// anybody waiting (WaitDuration unchanged); and all come back when those transactions roll
// back. Last, I3: database/sql's own pool made sqlWaits callers wait (WaitCount), which is 0 for
// every DB from gated.Open.
func checkQuiet(t testing.TB, db *sql.DB, c *Connector, sqlWaits int64) {
	t.Helper()
	waitIdle(t, c)
	if s := c.Stats(); s.Pool.Open > s.Pool.MaxConns {
		t.Errorf("%d physical connections open, more than P=%d", s.Pool.Open, s.Pool.MaxConns)
	}
	for name, before := range c.AllStats() {
		checkGateQuiet(t, db, c, name, before)
	}
	waitFor(t, "the quiet check's permits back", func() bool { return quiet(c) })
	if w := db.Stats().WaitCount; w != sqlWaits {
		t.Errorf("database/sql WaitCount = %d, want %d: callers waited in database/sql's pool, before the gate", w, sqlWaits)
	}
}

// checkGateQuiet is checkQuiet's check of one gate, the workload name's, whose snapshot once
// quiet is before.
func checkGateQuiet(t testing.TB, db *sql.DB, c *Connector, name string, before Stats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(WithWorkload(context.Background(), name), 10*time.Second)
	defer cancel()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("gate %s does not serve a new operation: %v", name, err)
	}
	before, _ = c.WorkloadStats(name)
	txs := make([]*sql.Tx, 0, before.Concurrent)
	defer func() {
		for _, tx := range txs {
			tx.Rollback()
		}
	}()
	for i := range before.Concurrent {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("once quiet, permit %d of B=%d of gate %s is not available: %v", i+1, before.Concurrent, name, err)
		}
		txs = append(txs, tx)
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("once quiet, the connection of permit %d of B=%d of gate %s does not serve: %v", i+1, before.Concurrent, name, err)
		}
	}
	if s, _ := c.WorkloadStats(name); s.Running != before.Concurrent || s.Waiting != 0 || s.WaitDuration != before.WaitDuration {
		t.Errorf("once quiet, B=%d transactions of gate %s did not all start at once: running %d, waiting %d, waited %v more",
			before.Concurrent, name, s.Running, s.Waiting, s.WaitDuration-before.WaitDuration)
	}
	for _, tx := range txs {
		if err := tx.Rollback(); err != nil {
			t.Errorf("rolling back the quiet check's transaction: %v", err)
		}
	}
	txs = nil
}

var objSeq atomic.Int64

// pgObject creates a schema object of kind ("TABLE", "FUNCTION") whose name, unique to this test
// run, is followed by rest in the CREATE statement, and drops it at cleanup. It returns the name.
func pgObject(t testing.TB, adm *sql.DB, kind, rest string) string {
	t.Helper()
	name := fmt.Sprintf("gated_test_%d_%d", time.Now().UnixNano()%1e9, objSeq.Add(1))
	if _, err := adm.Exec("CREATE " + kind + " " + name + rest); err != nil {
		t.Fatalf("create %s %s: %v", kind, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.ExecContext(ctx, "DROP "+kind+" IF EXISTS "+name); err != nil {
			t.Errorf("drop %s %s: %v", kind, name, err)
		}
	})
	return name
}

// pgTable creates a table with a unique name from columns ("id int primary key, v text") and
// drops it at cleanup.
func pgTable(t testing.TB, adm *sql.DB, columns string) string {
	t.Helper()
	return pgObject(t, adm, "TABLE", " ("+columns+")")
}

// pgFunction creates a function with a unique name and drops it at cleanup. definition is
// everything after the name in CREATE FUNCTION. It returns the name.
func pgFunction(t testing.TB, adm *sql.DB, definition string) string {
	t.Helper()
	return pgObject(t, adm, "FUNCTION", definition)
}

// lockedRow creates a table (id int primary key, v int) holding the row (1, 0) and returns it
// with a transaction on adm that holds that row's lock (FOR UPDATE), rolled back at cleanup.
func lockedRow(t testing.TB, adm *sql.DB) (table string, holder *sql.Tx) {
	t.Helper()
	table = pgTable(t, adm, "id int primary key, v int")
	if _, err := adm.Exec("INSERT INTO " + table + " VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	holder, err := adm.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Rollback() })
	var id int
	if err := holder.QueryRow("SELECT id FROM " + table + " WHERE id = 1 FOR UPDATE").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return table, holder
}

// backends counts the server connections of application app.
func backends(t testing.TB, adm *sql.DB, app string) int {
	t.Helper()
	var n int
	if err := adm.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

// activeQueries counts the backends of app running a statement that contains substr.
func activeQueries(t testing.TB, adm *sql.DB, app, substr string) int {
	t.Helper()
	var n int
	err := adm.QueryRow(`SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND state = 'active' AND strpos(query, $2) > 0`, app, substr).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
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

// backendPID returns the server process of the physical connection a new operation on db gets.
func backendPID(t testing.TB, db *sql.DB) int {
	t.Helper()
	var pid int
	if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("pg_backend_pid: %v", err)
	}
	return pid
}

// killBackend terminates server process pid from adm and waits until it has gone from
// pg_stat_activity and, when the server runs on this machine, until the process has exited.
//
// The second wait matters: a backend leaves pg_stat_activity (shared memory exit) before it
// closes its socket (process exit). A statement sent in between reaches a socket that is then
// closed with unread data, so the client gets a TCP reset, which on Linux discards the
// termination notice (57P01) already queued: the client sees "connection reset by peer" and
// cannot know that the statement never ran. TestIdleConnectionKilledAsItIsReusedIsReplacedWithoutError
// covers that window on its own.
func killBackend(t testing.TB, adm *sql.DB, pid int) {
	t.Helper()
	local := isLocalPostgres(pid)
	killBackendNoExitWait(t, adm, pid)
	if local {
		waitFor(t, fmt.Sprintf("server process %d exited", pid), func() bool { return processExited(pid) })
	}
}

// killBackendNoExitWait is killBackend without waiting for the process to exit.
func killBackendNoExitWait(t testing.TB, adm *sql.DB, pid int) {
	t.Helper()
	var ok bool
	if err := adm.QueryRow("SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	waitFor(t, fmt.Sprintf("backend %d gone from pg_stat_activity", pid), func() bool {
		var n int
		if err := adm.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		return n == 0
	})
}

// isLocalPostgres reports whether pid is a postgres process on this machine (as opposed to a
// process of a remote server, which /proc cannot show, or an unrelated local process).
func isLocalPostgres(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.HasPrefix(cmdline, []byte("postgres"))
}

// processExited reports whether process pid has exited: gone, or a zombie, whose files (the
// socket) are closed. Its command line cannot tell: it reads empty as soon as the exiting process
// has released its memory, before its files are closed.
func processExited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// driverSQLState returns the SQLSTATE of err as the inner driver drv reports it: errors.As must
// reach a *pgconn.PgError for pgx and a *pq.Error for lib/pq. It returns "" otherwise.
func driverSQLState(drv string, err error) string {
	switch drv {
	case "pgx":
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return pgErr.Code
		}
	case "postgres":
		var pqErr *pq.Error
		if errors.As(err, &pqErr) {
			return string(pqErr.Code)
		}
	}
	return ""
}

// isGateError reports whether err is one the gate produces under load.
func isGateError(err error) bool {
	return IsRejected(err) || errors.Is(err, ErrWaitCanceled)
}

// isGateWaitCanceled reports whether err is the gate giving up a wait because the caller's context
// ended (counted in Canceled), as opposed to a context error from the driver or database/sql.
func isGateWaitCanceled(err error) bool {
	return errors.Is(err, ErrWaitCanceled) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
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

// checkCounted fails unless the gate's counters grew from before to after by exactly admitted,
// full (RejectedFull), timedOut (RejectedTimeout) and canceled.
func checkCounted(t testing.TB, what string, before, after Stats, admitted, full, timedOut, canceled int64) {
	t.Helper()
	got := [4]int64{after.Admitted - before.Admitted, after.RejectedFull - before.RejectedFull,
		after.RejectedTimeout - before.RejectedTimeout, after.Canceled - before.Canceled}
	if want := [4]int64{admitted, full, timedOut, canceled}; got != want {
		t.Errorf("%s: counters [admitted full timeout canceled] grew by %v, want %v (before %+v, after %+v)", what, got, want, before, after)
	}
}

// gateAttempts is the number of gate attempts the counters of c account for.
func gateAttempts(c *Connector) int64 {
	s := c.Stats()
	return s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled
}

// mustBegin begins a transaction that must be admitted.
func mustBegin(t testing.TB, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	return tx
}

// A holder is a transaction that keeps its execution permit until its test lets it go. It ran one
// statement, so its physical connection is open and its backend is known.
type holder struct {
	tx  *sql.Tx
	pid int
}

// hold begins a transaction on db, runs one statement in it and registers a rollback at cleanup
// (a no-op when the test ended it), so that a failing test does not leave it open.
func hold(t testing.TB, db *sql.DB) *holder {
	t.Helper()
	tx := mustBegin(t, db)
	t.Cleanup(func() { tx.Rollback() })
	h := &holder{tx: tx}
	if err := tx.QueryRow("SELECT pg_backend_pid()").Scan(&h.pid); err != nil {
		t.Fatalf("in the holding transaction: %v", err)
	}
	return h
}

func (h *holder) commit(t testing.TB) {
	t.Helper()
	if err := h.tx.Commit(); err != nil {
		t.Fatalf("Commit of the holding transaction: %v", err)
	}
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

// startQueued runs op in the background and returns its result channel once op waits in the gate.
func startQueued(t testing.TB, c *Connector, op func() error) <-chan error {
	t.Helper()
	before := c.Stats().Waiting
	done := make(chan error, 1)
	go func() { done <- op() }()
	waitFor(t, "the operation to queue in the gate", func() bool { return c.Stats().Waiting == before+1 })
	return done
}

// A namedOp is one way of starting an operation through database/sql. Every op passes the gate
// exactly once and leaves nothing open, whether it succeeds or not.
type namedOp struct {
	name string
	run  func(ctx context.Context, db *sql.DB) error
}

// gateOps are the entry points through which database/sql reaches a driver connection.
var gateOps = []namedOp{
	{"Exec", func(ctx context.Context, db *sql.DB) error {
		_, err := db.ExecContext(ctx, "SELECT 1")
		return err
	}},
	{"Query", func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, "SELECT 1")
		if err != nil {
			return err
		}
		return rows.Close()
	}},
	{"QueryRow", func(ctx context.Context, db *sql.DB) error {
		var v int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&v)
	}},
	{"Begin", func(ctx context.Context, db *sql.DB) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		return tx.Rollback()
	}},
	{"Prepare", func(ctx context.Context, db *sql.DB) error {
		st, err := db.PrepareContext(ctx, "SELECT 1")
		if err != nil {
			return err
		}
		return st.Close()
	}},
	{"Ping", func(ctx context.Context, db *sql.DB) error { return db.PingContext(ctx) }},
	{"Conn+Exec", func(ctx context.Context, db *sql.DB) error {
		// db.Conn takes a virtual connection: no gate, no I/O. The Exec binds it.
		conn, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("db.Conn must not pass the gate: %w", err)
		}
		defer conn.Close()
		_, err = conn.ExecContext(ctx, "SELECT 1")
		return err
	}},
}

// opNamed returns the gateOps entry called name.
func opNamed(name string) namedOp {
	for _, op := range gateOps {
		if op.name == name {
			return op
		}
	}
	panic("no gate op " + name)
}

// storeMax raises m to v if v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// repeat calls f in a goroutine over and over, until f returns false or the returned stop is
// called; stop returns once f will not be called again. It samples the gate, or keeps the server
// busy, while a test's workload runs.
func repeat(f func() bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if !f() {
				return
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// medianDuration returns the median of ds, which it sorts.
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// checkDSNErrorSafe fails unless err, which ParseDSN or NewConnector returned for dsn, is what
// every DSN error must be whatever the input: it starts with "gated: ", a *DSNError names no key
// but a gate_ one (any other word of a broken DSN may be a password), and, when password is not
// "", it does not quote password. Both DSN fuzz targets check their errors with it.
func checkDSNErrorSafe(t *testing.T, dsn string, err error, password string) {
	t.Helper()
	if err == nil {
		return
	}
	if !strings.HasPrefix(err.Error(), "gated: ") {
		t.Fatalf("DSN %q: error %q does not start with \"gated: \"", dsn, err)
	}
	var de *DSNError
	if errors.As(err, &de) && de.Key != "" && !isGateKey(de.Key) {
		t.Fatalf("DSN %q: error names non-gate key %q", dsn, de.Key)
	}
	if password != "" && strings.Contains(err.Error(), password) {
		t.Fatalf("DSN %q: error %q contains the password", dsn, err)
	}
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
