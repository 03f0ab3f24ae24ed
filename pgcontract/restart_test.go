package pgcontract_test

// A server restart and an outage: clear errors while the server is down, and everything works,
// with every permit, once it is back.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/gatedsql/gated/internal/pgtest"
)

// A server restart. Idle connections that died with the old server are replaced
// without errors; while the server is down every call fails at once with the connection error
// (not a gate error, not driver.ErrBadConn) and holds no permit; once it is up again everything
// works, with all permits.
func TestServerRestartFailsClearlyThenRecoversWithoutLosingPermits(t *testing.T) {
	cluster := pgtest.NewCluster(t)
	forEachDriver(t, func(t *testing.T, drv string) {
		const b = 3
		withPG(t, cluster.URL(), drv, "gate_max_conns=3&gate_concurrent=3&gate_queue=3&gate_queue_wait=2s", func(t *testing.T, e *pgEnv) {
			db, c := e.db, e.c
			ctx := context.Background()
			// pinnedAtOnce binds B pinned connections at the same time, so that B physical
			// connections are used and then idle.
			pinnedAtOnce := func() error {
				var conns []*sql.Conn
				defer func() {
					for _, sc := range conns {
						sc.Close()
					}
				}()
				for range b {
					sc, err := db.Conn(ctx)
					if err != nil {
						return err
					}
					conns = append(conns, sc)
					var one int
					if err := sc.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
						return err
					}
				}
				return nil
			}
			if err := pinnedAtOnce(); err != nil {
				t.Fatal(err)
			}
			if s := c.Stats(); s.Pool.Idle != b {
				t.Fatalf("Pool.Idle = %d, want %d idle connections before the restart", s.Pool.Idle, b)
			}

			cluster.Restart(t)
			if err := pinnedAtOnce(); err != nil {
				t.Fatalf("after a restart, B operations on the B dead idle connections: %v", err)
			}

			cluster.Stop(t)
			outage := []struct {
				name string
				run  func() error
			}{
				{"QueryRow", func() error { var n int; return db.QueryRowContext(ctx, "SELECT 1").Scan(&n) }},
				{"Exec", func() error { _, err := db.ExecContext(ctx, "SELECT 1"); return err }},
				{"BeginTx", func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err == nil {
						tx.Rollback()
					}
					return err
				}},
				{"Prepare", func() error {
					st, err := db.PrepareContext(ctx, "SELECT 1")
					if err == nil {
						st.Close()
					}
					return err
				}},
				{"Ping", func() error { return db.PingContext(ctx) }},
			}
			for _, op := range outage {
				err := op.run()
				switch {
				case err == nil:
					t.Errorf("%s succeeded with the server stopped", op.name)
				case !errors.Is(err, syscall.ECONNREFUSED):
					t.Errorf("%s with the server stopped: %v; want an error matching syscall.ECONNREFUSED", op.name, err)
				case isGateError(err) || errors.Is(err, driver.ErrBadConn):
					t.Errorf("%s with the server stopped: %v is a gate error or driver.ErrBadConn", op.name, err)
				}
				if s := c.Stats(); s.Running != 0 {
					t.Errorf("%s with the server stopped: Running = %d after it returned; want 0", op.name, s.Running)
				}
				// A dead idle connection the call found is destroyed in the background.
				waitFor(t, "no physical connection open", func() bool { return c.Stats().Pool.Open == 0 })
			}
			t.Logf("error during the outage: %v", outage[0].run())
			var wg sync.WaitGroup
			for range 4 * b {
				wg.Go(func() {
					if _, err := db.ExecContext(ctx, "SELECT 1"); err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || isGateError(err)) {
						t.Errorf("burst during the outage: %v", err)
					}
				})
			}
			wg.Wait()

			cluster.Start(t)
			if err := pinnedAtOnce(); err != nil {
				t.Fatalf("after the server came back: %v", err)
			}
		})
	})
}
