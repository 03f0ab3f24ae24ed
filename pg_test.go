package gated

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	_ "github.com/lib/pq" // the second inner driver of every integration test
)

// innerDrivers are the drivers every integration test runs with.
var innerDrivers = []string{"pgx", "postgres"}

// forEachDriver runs f as one subtest per inner driver.
func forEachDriver(t *testing.T, f func(t *testing.T, drv string)) {
	for _, drv := range innerDrivers {
		t.Run(drv, func(t *testing.T) { f(t, drv) })
	}
}

var appSeq atomic.Int64

// pgDSN returns a gated DSN for the test server: driver drv, the gate keys in params (URL query
// syntax, "" for none), and a unique application_name, returned too, that finds the test's
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
// checking that no physical connection is left on the server afterwards.
func openPG(t testing.TB, drv, params string) (*sql.DB, *Connector, string) {
	t.Helper()
	return openPGAt(t, pgtest.URL(t), drv, params)
}

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
	return adminAt(t, pgtest.URL(t))
}

func adminAt(t testing.TB, base string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
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

// waitQuiet waits until the gate has nothing running or waiting and no connection in use, then
// checks that every permit is back and that the gate serves a new operation.
func waitQuiet(t testing.TB, db *sql.DB, c *Connector) {
	t.Helper()
	waitFor(t, "gate quiet", func() bool {
		s := c.Stats()
		return s.Running == 0 && s.Waiting == 0 && s.Pool.InUse == 0
	})
	s := c.Stats()
	if s.Pool.Open > s.Pool.MaxConns {
		t.Errorf("%d physical connections open, more than P=%d", s.Pool.Open, s.Pool.MaxConns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("gate does not serve a new operation: %v", err)
	}
}

// isGateError reports whether err is one the gate produces under load.
func isGateError(err error) bool {
	return IsRejected(err) || errors.Is(err, ErrWaitCanceled)
}
