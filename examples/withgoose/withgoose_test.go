package withgoose_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/examples/internal/extest"
	"github.com/gatedsql/gated/examples/withgoose"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

func TestMain(m *testing.M) { extest.Main(m) }

// open opens a gated *sql.DB with params on a fresh schema.
func open(t *testing.T, drv, params string) *sql.DB {
	t.Helper()
	db, err := gated.Open(extest.DSN(t, drv, params))
	if err != nil {
		t.Fatal(err)
	}
	extest.CheckQuiet(t, db)
	return db
}

func provider(t *testing.T, db *sql.DB) *goose.Provider {
	t.Helper()
	p, err := withgoose.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func version(t *testing.T, p *goose.Provider) int64 {
	t.Helper()
	v, err := p.GetDBVersion(context.Background())
	if err != nil {
		t.Fatalf("GetDBVersion: %v", err)
	}
	return v
}

// TestGooseUpAndDown migrates up and all the way down with the session locker and B=2, on both
// inner drivers; the Go migration without a transaction runs beside the locked connection.
func TestGooseUpAndDown(t *testing.T) {
	extest.ForEachDriver(t, func(t *testing.T, drv string) {
		ctx := context.Background()
		db := open(t, drv, "gate_concurrent=2")
		p := provider(t, db)

		if _, err := p.UpTo(ctx, 2); err != nil {
			t.Fatalf("UpTo 2: %v", err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO accounts (email) VALUES ('Ada@Example.COM'), ('alan@example.com')`); err != nil {
			t.Fatal(err)
		}
		res, err := p.Up(ctx)
		if err != nil {
			t.Fatalf("Up: %v", err)
		}
		if len(res) != 1 || res[0].Source.Version != 3 {
			t.Fatalf("Up applied %v; want migration 3 alone", res)
		}
		if v := version(t, p); v != 3 {
			t.Fatalf("version after Up: %d; want 3", v)
		}
		var upper int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM accounts WHERE email <> lower(email)`).Scan(&upper); err != nil || upper != 0 {
			t.Fatalf("after migration 3: %d emails not lowered, %v; want 0", upper, err)
		}

		res, err = p.DownTo(ctx, 0)
		if err != nil {
			t.Fatalf("DownTo 0: %v", err)
		}
		if len(res) != 3 {
			t.Fatalf("DownTo 0 rolled back %d migrations; want 3", len(res))
		}
		if v := version(t, p); v != 0 {
			t.Fatalf("version after DownTo 0: %d; want 0", v)
		}
		var table sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT to_regclass('accounts')::text`).Scan(&table); err != nil || table.Valid {
			t.Fatalf("after DownTo 0: table %v, %v; want none", table, err)
		}
	})
}

// TestGooseWithOnePermit shows why docs/drivers.md asks for B ≥ 2: with B=1 the session lock's
// connection holds the only permit, so the Go migration that runs on the *sql.DB is refused
// after gate_queue_wait (a gated error, not a hang), goose stops after migration 2 and releases
// the lock, and every permit comes back. SQL migrations alone need one permit.
func TestGooseWithOnePermit(t *testing.T) {
	extest.ForEachDriver(t, func(t *testing.T, drv string) {
		ctx := context.Background()

		t.Run("GoMigrationWithoutTx", func(t *testing.T) {
			db := open(t, drv, "gate_concurrent=1")
			p := provider(t, db)
			res, err := p.Up(ctx)
			if !errors.Is(err, gated.ErrAdmissionTimeout) {
				t.Fatalf("Up with B=1: %v; want gated.ErrAdmissionTimeout", err)
			}
			var partial *goose.PartialError
			if !errors.As(err, &partial) || partial.Failed.Source.Version != 3 || len(partial.Applied) != 2 {
				t.Fatalf("Up with B=1: %v (results %v); want migrations 1 and 2 applied, 3 failed", err, res)
			}
			if v := version(t, p); v != 2 {
				t.Fatalf("version after the refused migration: %d; want 2", v)
			}
		})

		t.Run("SQLOnly", func(t *testing.T) {
			db := open(t, drv, "gate_concurrent=1")
			locker, err := lock.NewPostgresSessionLocker()
			if err != nil {
				t.Fatal(err)
			}
			p, err := goose.NewProvider(goose.DialectPostgres, db, withgoose.Migrations,
				goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Up(ctx); err != nil {
				t.Fatalf("Up of SQL migrations with B=1: %v", err)
			}
			if _, err := p.DownTo(ctx, 0); err != nil {
				t.Fatalf("DownTo 0 of SQL migrations with B=1: %v", err)
			}
		})
	})
}
