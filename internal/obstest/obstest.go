// Package obstest is the fixture of gatedprom's and gatedotel's tests: a gated DB on a fake
// driver or on the test PostgreSQL server, and polling for a condition.
package obstest

import (
	"database/sql"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
)

// OpenFake opens a gated DB on a new fake driver for the gate keys in params, with obs (which
// may be nil) in its Config, closed at the test's cleanup.
func OpenFake(t testing.TB, params string, obs gated.Observer) (*sql.DB, *gated.Connector, *fakedb.Driver) {
	t.Helper()
	fd := fakedb.New()
	db, c := OpenWith(t, "gate_driver="+fd.Register()+" "+params, obs)
	return db, c, fd
}

// OpenWith opens a gated DB for dsn with obs (which may be nil) in its Config, closed at the
// test's cleanup.
func OpenWith(t testing.TB, dsn string, obs gated.Observer) (*sql.DB, *gated.Connector) {
	t.Helper()
	cfg, err := gated.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if obs != nil {
		cfg.Observer = obs
	}
	c, err := gated.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := gated.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db, c
}

// OpenDSN opens dsn the drop-in way, sql.Open("gated", dsn), and finds its Connector with
// gated.FromDB, as a service configured only by its DSN does; the DB is closed at cleanup.
func OpenDSN(t testing.TB, dsn string) (*sql.DB, *gated.Connector) {
	t.Helper()
	db, err := sql.Open("gated", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c, ok := gated.FromDB(db)
	if !ok {
		t.Fatal("gated.FromDB: not a gated DB")
	}
	return db, c
}

// WaitFor polls cond until it holds, failing the test after 10 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Quiet reports whether no gate of c has an operation running or waiting and no physical
// connection is in use.
func Quiet(c *gated.Connector) bool {
	for _, s := range c.AllStats() {
		if s.Running != 0 || s.Waiting != 0 || s.Pool.InUse != 0 {
			return false
		}
	}
	return true
}
