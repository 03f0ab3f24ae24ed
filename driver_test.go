package gated

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/testwait"
)

func TestDriverRegisteredAsGated(t *testing.T) {
	found := false
	for _, name := range sql.Drivers() {
		found = found || name == DriverName
	}
	if !found {
		t.Fatalf("sql.Drivers() = %v, no %q", sql.Drivers(), DriverName)
	}
}

func TestSQLOpenRejectsBadDSNNamingTheKey(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:s3cr3t-pw@h/db?gate_concurrent=abc",
		"postgres://u:s3cr3t-pw@h/db?gate_bogus=1",
		"host=h password=s3cr3t-pw gate_concurrent=11 gate_max_conns=10",
	} {
		db, err := sql.Open(DriverName, dsn)
		if err == nil {
			db.Close()
			t.Errorf("sql.Open(%q) succeeded", dsn)
			continue
		}
		if !strings.HasPrefix(err.Error(), "gated: ") || !strings.Contains(err.Error(), "gate_") {
			t.Errorf("sql.Open(%q) error %q: want a gated: error naming the key", dsn, err)
		}
		if strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Errorf("error %q contains the password", err)
		}
	}
}

func TestSQLOpenRejectsUnregisteredInnerDriver(t *testing.T) {
	_, err := Open("gate_driver=nosuchdriver")
	var de *DSNError
	if !errors.As(err, &de) || de.Key != "gate_driver" {
		t.Fatalf("got %v, want a DSNError for gate_driver", err)
	}
}

// gate_driver=mysql needs the application's import of go-sql-driver/mysql, which gated does not
// make (the root module's tests do not either).
func TestSQLOpenRejectsMySQLWithoutTheDriverImport(t *testing.T) {
	_, err := Open("root@tcp(127.0.0.1:3306)/test?gate_driver=mysql")
	var de *DSNError
	if !errors.As(err, &de) || de.Key != "gate_driver" || !strings.Contains(err.Error(), "forgotten import") {
		t.Fatalf("got %v, want a DSNError for gate_driver naming the forgotten import", err)
	}
}

func TestOpenSetsDatabaseSQLPoolForTheGate(t *testing.T) {
	db, err := Open("gate_driver=pgx gate_max_conns=4 gate_concurrent=3 gate_queue=5")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if s := db.Stats(); s.MaxOpenConnections != 0 {
		t.Errorf("MaxOpenConnections = %d, want 0 (unlimited virtual connections)", s.MaxOpenConnections)
	}
	c, ok := FromDB(db)
	if !ok {
		t.Fatal("FromDB did not find the connector")
	}
	if s := c.Stats(); s.Concurrent != 3 || s.Queue != 5 || s.Pool.MaxConns != 4 {
		t.Errorf("Stats = %+v", s)
	}
	plain := sql.OpenDB(c)
	defer plain.Close()
	if _, ok := FromDB(plain); !ok {
		t.Error("FromDB(sql.OpenDB(connector)) = false")
	}
}

func TestPGBasicOperationsPassTheGate(t *testing.T) {
	runPG(t, "gate_max_conns=3&gate_concurrent=2&gate_queue=2", func(t *testing.T, e *pgEnv) {
		db, c := e.db, e.c
		ctx := context.Background()
		table := "gated_basic_" + e.drv
		// Through the gate, as the operations below: seven of them at least.
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id int primary key, name text)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.adm.Exec("DROP TABLE IF EXISTS " + table) })

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", 1, "one"); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Running != 1 {
			t.Errorf("inside a transaction Running = %d, want 1", s.Running)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Running != 0 {
			t.Errorf("after Commit returned Running = %d, want 0", s.Running)
		}

		stmt, err := db.PrepareContext(ctx, "SELECT name FROM "+table+" WHERE id = $1")
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		var name string
		if err := stmt.QueryRowContext(ctx, 1).Scan(&name); err != nil || name != "one" {
			t.Fatalf("prepared query: %q, %v", name, err)
		}
		rows, err := db.QueryContext(ctx, "SELECT generate_series(1, 3)")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Close(); err != nil || n != 3 {
			t.Fatalf("rows: %d, %v", n, err)
		}
		if err := db.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Admitted < 7 {
			t.Errorf("Admitted = %d: operations did not pass the gate", s.Admitted)
		}
	})
}

// TestPGOverloadKeepsEveryBudget: 10×(B+Q) callers on a real
// server; running never exceeds B, server connections never exceed P, database/sql never waits,
// and every call succeeds or fails with a gate error.
func TestPGOverloadKeepsEveryBudget(t *testing.T) {
	runPG(t, "gate_max_conns=5&gate_concurrent=4&gate_queue=4&gate_queue_wait=30ms", func(t *testing.T, e *pgEnv) {
		const p, b, q = 5, 4, 4
		db, c, app, adm := e.db, e.c, e.app, e.adm
		var maxRunning, maxAdmitted, maxBackends, samples atomic.Int64
		stop := repeat(func() bool {
			s := c.Stats()
			storeMax(&maxRunning, int64(s.Running))
			storeMax(&maxAdmitted, int64(s.Running+s.Waiting))
			storeMax(&maxBackends, int64(backends(t, adm, app)))
			samples.Add(1)
			return true
		})

		var ok, rejected atomic.Int64
		var callers sync.WaitGroup
		for range 10 * (b + q) {
			callers.Go(func() {
				for range 8 {
					tx, err := db.BeginTx(context.Background(), nil)
					if err == nil {
						_, err = tx.Exec("SELECT pg_sleep(0.005)")
						if err == nil {
							err = tx.Commit()
						} else {
							tx.Rollback()
						}
					}
					switch {
					case err == nil:
						ok.Add(1)
					case isGateError(err):
						rejected.Add(1)
					default:
						t.Errorf("call failed with a non-gate error: %v", err)
					}
				}
			})
		}
		callers.Wait()
		stop()

		t.Logf("%d succeeded, %d refused; %d samples: max running %d, max admitted %d, max backends %d",
			ok.Load(), rejected.Load(), samples.Load(), maxRunning.Load(), maxAdmitted.Load(), maxBackends.Load())
		if ok.Load() == 0 || rejected.Load() == 0 {
			t.Errorf("want both successes and refusals under 10×(B+Q) callers")
		}
		if maxRunning.Load() > b {
			t.Errorf("running reached %d > B=%d", maxRunning.Load(), b)
		}
		if maxAdmitted.Load() > b+q {
			t.Errorf("running+waiting reached %d > B+Q=%d", maxAdmitted.Load(), b+q)
		}
		if maxBackends.Load() > p {
			t.Errorf("pg_stat_activity showed %d connections > P=%d", maxBackends.Load(), p)
		}
		if w := db.Stats().WaitCount; w != 0 {
			t.Errorf("database/sql WaitCount = %d, want 0", w)
		}
		waitIdle(t, c)
		if s := c.Stats(); s.Admitted+s.RejectedFull+s.RejectedTimeout+s.Canceled != ok.Load()+rejected.Load() {
			t.Errorf("gate counted %+v for %d calls", s, ok.Load()+rejected.Load())
		}
	})
}

func TestCheckDBReportsAPoolThatUndoesTheGate(t *testing.T) {
	db, err := Open("gate_driver=pgx gate_max_conns=4 gate_concurrent=4 gate_queue=4")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := CheckDB(db); err != nil {
		t.Fatalf("gated.Open's DB: %v", err)
	}
	db.SetMaxOpenConns(8)
	if err := CheckDB(db); err != nil {
		t.Fatalf("MaxOpenConns = B+Q: %v", err)
	}
	db.SetMaxOpenConns(7)
	if err := CheckDB(db); err == nil || !strings.Contains(err.Error(), "SetMaxOpenConns(7)") {
		t.Fatalf("MaxOpenConns below B+Q: %v", err)
	}
	plain, err := sql.Open("pgx", "postgres://localhost/x")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := CheckDB(plain); err == nil {
		t.Fatal("CheckDB accepted a *sql.DB without gated")
	}
}

// TestCheckDBReportsConnMaxLifetimeOnceItClosedAConnection: SetConnMaxLifetime closes only
// database/sql's virtual connections, never a physical one. database/sql has no getter for the
// setting, so CheckDB reports it by its effect, naming the gate's key to use instead.
func TestCheckDBReportsConnMaxLifetimeOnceItClosedAConnection(t *testing.T) {
	for _, tc := range []struct {
		name, want, key string
		set             func(*sql.DB)
	}{
		{"lifetime", "SetConnMaxLifetime closed", "gate_max_conn_lifetime (now 30m0s)", func(db *sql.DB) { db.SetConnMaxLifetime(time.Nanosecond) }},
		{"idle time", "SetConnMaxIdleTime closed", "gate_max_conn_idle_time (now none)", func(db *sql.DB) { db.SetConnMaxIdleTime(time.Nanosecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, _, fd := openFake(t, "gate_max_conns=2 gate_max_conn_lifetime=30m gate_max_conn_idle_time=0")
			tc.set(db)
			ctx := context.Background()
			testwait.For(t, "database/sql to close a virtual connection by "+tc.name, func() bool {
				if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
					t.Fatal(err)
				}
				s := db.Stats()
				return s.MaxLifetimeClosed+s.MaxIdleTimeClosed > 0
			})
			if n := fd.Stats().Opened; n != 1 {
				t.Errorf("the fake opened %d physical connections, want 1: the setting closed a physical one", n)
			}
			err := CheckDB(db)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckDB = %v, want an error saying %q", err, tc.want)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.key) {
				t.Errorf("CheckDB = %q, want it to name the gate's key and its value: %q", msg, tc.key)
			}
		})
	}
}

func TestNewConnectorRejectsANilConfig(t *testing.T) {
	c, err := NewConnector(nil)
	if err == nil || c != nil || !strings.HasPrefix(err.Error(), "gated: ") {
		t.Errorf("NewConnector(nil) = %v, %v; want a gated error", c, err)
	}
}
