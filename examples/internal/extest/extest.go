// Package extest is the examples' test harness: a gated DSN for the test PostgreSQL server
// (found by internal/pgtest) in a schema of its own, one subtest per inner driver, and the check
// that every permit came back.
package extest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// Main is the examples' TestMain: it runs the tests, stops a private cluster that pgtest may have
// started, and then fails the run when a goroutine outlived the tests.
func Main(m *testing.M) { pgtest.Main(m) }

// Drivers are the inner drivers every example runs with: pgx v5 and lib/pq.
var Drivers = []string{"pgx", "postgres"}

// ForEachDriver runs f as one subtest per inner driver.
func ForEachDriver(t *testing.T, f func(t *testing.T, drv string)) {
	for _, drv := range Drivers {
		t.Run(drv, func(t *testing.T) { f(t, drv) })
	}
}

// DSN returns a gated DSN for the test server with inner driver drv and the gate keys in params
// (URL query syntax, "" for none). Its search_path is a new schema, dropped with everything in it
// at cleanup, so that the examples' fixed table names never meet another test's. With no server
// found, DSN skips the test, or fails it when GATED_TEST_REQUIRE_DB=1.
func DSN(t testing.TB, drv, params string) string {
	t.Helper()
	base := pgtest.URL(t)
	var b [6]byte
	rand.Read(b[:])
	schema := "gated_ex_" + hex.EncodeToString(b[:])
	admin(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { admin(t, base, "DROP SCHEMA "+schema+" CASCADE") })

	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("test database URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("gate_driver", drv)
	extra, err := url.ParseQuery(params)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// admin runs one statement on the test server over a plain pgx connection.
func admin(t testing.TB, base, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// CheckQuiet registers a cleanup, run before the schema is dropped, that fails the test unless
// db's gate becomes quiet (no permit held, nobody waiting, no physical connection in use) and
// closing db leaves no physical connection open. Call it right after opening db; it closes db.
func CheckQuiet(t testing.TB, db *sql.DB) {
	t.Helper()
	c, ok := gated.FromDB(db)
	if !ok {
		t.Fatal("not a gated *sql.DB")
	}
	t.Cleanup(func() {
		// A broken connection gives its permit back only after its cleanup: poll, bounded.
		var s gated.Stats
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			s = c.Stats()
			if s.Running == 0 && s.Waiting == 0 && s.Pool.InUse == 0 || time.Now().After(deadline) {
				break
			}
		}
		if s.Running != 0 || s.Waiting != 0 || s.Pool.InUse != 0 {
			t.Errorf("at the end: %d permits held, %d waiting, %d physical connections in use; want none",
				s.Running, s.Waiting, s.Pool.InUse)
		}
		db.Close()
		if s := c.Stats(); s.Pool.Open != 0 {
			t.Errorf("after db.Close: %d physical connections still open", s.Pool.Open)
		}
	})
}
