// Package obstest is the fixture of gatedprom's and gatedotel's tests: a gated DB on a fake
// driver or on the test PostgreSQL server, and polling for a condition.
package obstest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/fakedb"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/testwait"
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

// WaitFor polls cond until it holds (testwait.For).
var WaitFor = testwait.For

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

var appSeq atomic.Int64

// PGDSN is a gated DSN on the test PostgreSQL server for inner driver drv ("pgx" or
// "postgres"), with a unique application_name and the gate keys in params (URL query syntax).
func PGDSN(t testing.TB, drv, params string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("gate_driver", drv)
	q.Set("application_name", fmt.Sprintf("gated_obs_test_%d_%d", time.Now().UnixNano()%1e6, appSeq.Add(1)))
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

// Load runs n transactions (BEGIN, pg_sleep 1 ms, COMMIT) for each of the workloads "default"
// and "batch" on db, from six goroutines per workload at once, so that a small batch gate both
// queues and refuses. It returns how many the gates refused; any other error fails the test.
func Load(t testing.TB, db *sql.DB, n int) (refused int) {
	t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, wl := range []string{gated.DefaultWorkload, "batch"} {
		for w := range 6 {
			wg.Go(func() {
				ctx := gated.WithWorkload(context.Background(), wl)
				for i := w; i < n; i += 6 {
					tx, err := db.BeginTx(ctx, nil)
					if gated.IsRejected(err) {
						mu.Lock()
						refused++
						mu.Unlock()
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := tx.ExecContext(ctx, "SELECT pg_sleep(0.001)"); err != nil {
						t.Error(err)
					}
					if err := tx.Commit(); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	return refused
}

// FleetParams returns the gate keys (URL query syntax) of a fleet of its own on the test
// PostgreSQL server: gate_fleet=on, a unique gate_name and lease table, which is dropped with
// its functions at the test's cleanup, and a short TTL and refresh, so that a lone instance is
// seated within a few hundred milliseconds. Call it before opening the DB, so that the DB is
// closed (and its lease ended) before the table is dropped.
func FleetParams(t testing.TB) string {
	t.Helper()
	n := fmt.Sprintf("%d_%d", time.Now().UnixNano()%1e9, appSeq.Add(1))
	table := "gated_obs_fleet_" + n
	adm, err := sql.Open("gated", pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, drop := range []string{"FUNCTION IF EXISTS " + table + "_refresh", "FUNCTION IF EXISTS " + table + "_live", "TABLE IF EXISTS " + table} {
			if _, err := adm.ExecContext(ctx, "DROP "+drop); err != nil {
				t.Errorf("drop %s: %v", drop, err)
			}
		}
	})
	return "gate_fleet=on&gate_name=obs_fleet_" + n + "&gate_fleet_table=" + table + "&gate_fleet_ttl=3s&gate_fleet_refresh=100ms"
}
