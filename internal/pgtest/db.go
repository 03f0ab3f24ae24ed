package pgtest

// Helpers for tests that run gated against the test server: the gated DSN of one test, a plain
// connection to watch and disturb the server, throwaway schema objects, the server's view of a
// test's backends, and the end of a backend. They know database/sql, pgx and lib/pq, not gated's
// types, so that the root package's tests and the tests in nested modules share them.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/testwait"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx", which Admin opens
	"github.com/lib/pq"
)

var appSeq, objSeq atomic.Int64

// DSN returns a gated DSN for the server at base: inner driver drv ("pgx" or "postgres"), the
// gate keys in params (URL query syntax, "" for none), and a unique application_name, returned
// too, that finds the test's backends in pg_stat_activity.
func DSN(t testing.TB, base, drv, params string) (dsn, app string) {
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

// Admin returns a plain pgx *sql.DB on the test server ([URL]) for observing and disturbing it,
// closed at cleanup.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", URL(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
}

// Object creates a schema object of kind ("TABLE", "FUNCTION") whose name, unique to this test
// run, is followed by rest in the CREATE statement, and drops it at cleanup. It returns the name.
func Object(t testing.TB, adm *sql.DB, kind, rest string) string {
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

// Table creates a table with a unique name from columns ("id int primary key, v text") and
// drops it at cleanup.
func Table(t testing.TB, adm *sql.DB, columns string) string {
	t.Helper()
	return Object(t, adm, "TABLE", " ("+columns+")")
}

// Function creates a function with a unique name and drops it at cleanup. definition is
// everything after the name in CREATE FUNCTION. It returns the name.
func Function(t testing.TB, adm *sql.DB, definition string) string {
	t.Helper()
	return Object(t, adm, "FUNCTION", definition)
}

// LockedRow creates a table (id int primary key, v int) holding the row (1, 0) and returns it
// with a transaction on adm that holds that row's lock (FOR UPDATE), rolled back at cleanup.
func LockedRow(t testing.TB, adm *sql.DB) (table string, holder *sql.Tx) {
	t.Helper()
	table = Table(t, adm, "id int primary key, v int")
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

// Backends counts the server connections of application app.
func Backends(t testing.TB, adm *sql.DB, app string) int {
	t.Helper()
	var n int
	if err := adm.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

// ActiveQueries counts the backends of app running a statement that contains substr.
func ActiveQueries(t testing.TB, adm *sql.DB, app, substr string) int {
	t.Helper()
	var n int
	err := adm.QueryRow(`SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND state = 'active' AND strpos(query, $2) > 0`, app, substr).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

// BackendPID returns the server process of the physical connection a new operation on db gets.
func BackendPID(t testing.TB, db *sql.DB) int {
	t.Helper()
	var pid int
	if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("pg_backend_pid: %v", err)
	}
	return pid
}

// KillBackend terminates server process pid from adm and waits until it has gone from
// pg_stat_activity and, when the server runs on this machine, until the process has exited.
//
// The second wait matters: a backend leaves pg_stat_activity (shared memory exit) before it
// closes its socket (process exit). A statement sent in between reaches a socket that is then
// closed with unread data, so the client gets a TCP reset, which on Linux discards the
// termination notice (57P01) already queued: the client sees "connection reset by peer" and
// cannot know that the statement never ran. The root package's
// TestIdleConnectionKilledAsItIsReusedIsReplacedWithoutError covers that window on its own.
func KillBackend(t testing.TB, adm *sql.DB, pid int) {
	t.Helper()
	local := isLocalPostgres(pid)
	KillBackendNoExitWait(t, adm, pid)
	if local {
		testwait.For(t, fmt.Sprintf("server process %d exited", pid), func() bool { return processExited(pid) })
	}
}

// KillBackendNoExitWait is [KillBackend] without waiting for the process to exit.
func KillBackendNoExitWait(t testing.TB, adm *sql.DB, pid int) {
	t.Helper()
	var ok bool
	if err := adm.QueryRow("SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	testwait.For(t, fmt.Sprintf("backend %d gone from pg_stat_activity", pid), func() bool {
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

// DriverSQLState returns the SQLSTATE of err as the inner driver drv reports it: errors.As must
// reach a *pgconn.PgError for pgx and a *pq.Error for lib/pq ("postgres"). It returns ""
// otherwise.
func DriverSQLState(drv string, err error) string {
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

// StoreMax raises m to v if v is larger.
func StoreMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// Repeat calls f in a goroutine over and over, until f returns false or the returned stop is
// called; stop returns once f will not be called again. It samples a gate, or keeps the server
// busy, while a test's workload runs.
func Repeat(f func() bool) (stop func()) {
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

// Drivers are the inner drivers every integration test runs with: pgx and lib/pq ("postgres").
var Drivers = []string{"pgx", "postgres"}

// ForEachDriver runs f as one subtest per inner driver of [Drivers].
func ForEachDriver(t *testing.T, f func(t *testing.T, drv string)) {
	for _, drv := range Drivers {
		t.Run(drv, func(t *testing.T) { f(t, drv) })
	}
}

// MustBegin begins a transaction that must be admitted.
func MustBegin(t testing.TB, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	return tx
}

// A Holder is a transaction that keeps its execution permit until its test lets it go. It ran one
// statement, so its physical connection is open and its backend, PID, is known.
type Holder struct {
	Tx  *sql.Tx
	PID int
}

// Hold begins a transaction on db, runs one statement in it and registers a rollback at cleanup
// (a no-op when the test ended it), so that a failing test does not leave it open.
func Hold(t testing.TB, db *sql.DB) *Holder {
	t.Helper()
	tx := MustBegin(t, db)
	t.Cleanup(func() { tx.Rollback() })
	h := &Holder{Tx: tx}
	if err := tx.QueryRow("SELECT pg_backend_pid()").Scan(&h.PID); err != nil {
		t.Fatalf("in the holding transaction: %v", err)
	}
	return h
}

// Commit commits the holding transaction, which must succeed.
func (h *Holder) Commit(t testing.TB) {
	t.Helper()
	if err := h.Tx.Commit(); err != nil {
		t.Fatalf("Commit of the holding transaction: %v", err)
	}
}

// An Op is one way of starting an operation through database/sql. Every op passes the gate
// exactly once and leaves nothing open, whether it succeeds or not.
type Op struct {
	Name string
	Run  func(ctx context.Context, db *sql.DB) error
}

// Ops are the entry points through which database/sql reaches a driver connection.
var Ops = []Op{
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

// OpNamed returns the [Ops] entry called name.
func OpNamed(name string) Op {
	for _, op := range Ops {
		if op.Name == name {
			return op
		}
	}
	panic("no gate op " + name)
}
