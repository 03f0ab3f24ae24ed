package gated

// Config.PgxBeforeConnect and PgxAfterConnect on the real server: a pgx tracer sees gated's
// statements, a type registered after connecting scans, and nothing a hook does takes from
// gated what it owns.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
)

// openPgxWith opens a gated *sql.DB with gate_driver=pgx on the test server, the gate keys in
// params, with mod applied to the parsed Config, and closes it at cleanup.
func openPgxWith(t *testing.T, params string, mod func(*Config)) (*sql.DB, *Connector, string) {
	t.Helper()
	dsn, app := pgDSN(t, pgtest.URL(t), "pgx", params)
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	mod(cfg)
	c, err := NewConnector(cfg)
	if err != nil {
		t.Fatalf("NewConnector: %v", err)
	}
	db := OpenDB(c)
	t.Cleanup(func() {
		db.Close()
		if s := c.Stats(); s.Pool.Open != 0 {
			t.Errorf("after db.Close: %d physical connections still open", s.Pool.Open)
		}
	})
	return db, c, app
}

// queryLog is a pgx.QueryTracer that keeps the SQL of every query.
type queryLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *queryLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sql = append(l.sql, d.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *queryLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *queryLog) saw(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sql {
		if strings.Contains(s, substr) {
			return true
		}
	}
	return false
}

func TestPgxHooksTracerAndTypeRegistration(t *testing.T) {
	adm := admin(t)
	enum := pgObject(t, adm, "TYPE", " AS ENUM ('red', 'green')")
	log := &queryLog{}
	var befores, afters atomic.Int64
	db, c, _ := openPgxWith(t, "gate_max_conns=2&gate_statement_timeout=deadline", func(cfg *Config) {
		cfg.PgxBeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			befores.Add(1)
			cc.Tracer = log
			return nil
		}
		cfg.PgxAfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			afters.Add(1)
			for _, name := range []string{enum, "_" + enum} {
				dt, err := conn.LoadType(ctx, name)
				if err != nil {
					return err
				}
				conn.TypeMap().RegisterType(dt)
			}
			return nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Two physical connections, each through both hooks.
	c1, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []*sql.Conn{c1, c2} {
		var s string
		if err := sc.QueryRowContext(ctx, "SELECT 'traced-'||$1::text", "x").Scan(&s); err != nil {
			t.Fatal(err)
		}
	}
	// The registered enum array scans with pgx itself, on the connection gated opened.
	err = c1.Raw(func(dc any) error {
		inner, err := Unwrap(ctx, dc)
		if err != nil {
			return err
		}
		pc := inner.(*stdlib.Conn).Conn()
		if _, ok := pc.TypeMap().TypeForName(enum); !ok {
			t.Errorf("type %s is not registered on the connection", enum)
		}
		var got []string
		if err := pc.QueryRow(ctx, "SELECT array['green','red']::"+enum+"[]").Scan(&got); err != nil {
			return err
		}
		if strings.Join(got, ",") != "green,red" {
			t.Errorf("scanned %q", got)
		}
		return nil
	})
	if err != nil {
		t.Errorf("scanning the registered enum array: %v", err)
	}
	c1.Close()
	c2.Close()

	// gated's own statement: the SET LOCAL of gate_statement_timeout=deadline, sent with BEGIN.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()

	if n, opened := befores.Load(), c.Stats().Pool.Opened; n != opened || afters.Load() != opened || opened != 2 {
		t.Errorf("BeforeConnect ran %d times, AfterConnect %d, for %d physical connections (want 2)", n, afters.Load(), opened)
	}
	for _, want := range []string{"SELECT 'traced-'", "set local statement_timeout"} {
		if !log.saw(want) {
			t.Errorf("the tracer did not see %q; it saw %q", want, log.sql)
		}
	}
	checkQuiet(t, db, c, 0)

	// The control: without the hook the type is unknown to pgx.
	plain, pc, _ := openPgxWith(t, "", func(*Config) {})
	sc, err := plain.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = sc.Raw(func(dc any) error {
		inner, err := Unwrap(ctx, dc)
		if err != nil {
			return err
		}
		if _, ok := inner.(*stdlib.Conn).Conn().TypeMap().TypeForName(enum); ok {
			t.Errorf("without PgxAfterConnect type %s is registered too: the test proves nothing", enum)
		}
		return nil
	})
	sc.Close()
	if err != nil {
		t.Fatal(err)
	}
	checkQuiet(t, plain, pc, 0)
}

// A hook cannot take from gated the socket, its context handling, its startup parameters or the
// application_name of gate_name, and a failing hook fails the attempt without leaking the
// connection.
func TestPgxHooksCannotUndoGated(t *testing.T) {
	t.Run("dial, context handling, startup parameters", func(t *testing.T) {
		var dials atomic.Int64
		name := fmt.Sprintf("gated_test_hooked_%d", appSeq.Add(1))
		db, c, _ := openPgxWith(t, "gate_lock_timeout=3s", func(cfg *Config) {
			cfg.Name = name
			cfg.PgxBeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
				var d net.Dialer
				cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return d.DialContext(ctx, network, addr)
				}
				cc.BuildContextWatcherHandler = func(*pgconn.PgConn) ctxwatch.Handler {
					t.Error("the hook's context watcher handler was used")
					return &pgconn.DeadlineContextWatcherHandler{}
				}
				cc.RuntimeParams = nil
				return nil
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var lock, app string
		if err := db.QueryRowContext(ctx, "SELECT current_setting('lock_timeout'), current_setting('application_name')").Scan(&lock, &app); err != nil {
			t.Fatal(err)
		}
		if lock != "3s" || app != name {
			t.Errorf("lock_timeout %q, application_name %q; want 3s and %q", lock, app, name)
		}
		if dials.Load() != 1 {
			t.Errorf("the hook's DialFunc ran %d times, want 1", dials.Load())
		}
		c.pool.mu.Lock()
		var sock *sockconn.Conn
		if len(c.pool.idle) == 1 {
			sock = c.pool.idle[0].sock
		}
		c.pool.mu.Unlock()
		if sock == nil {
			t.Error("the connection's socket is not gated's sockconn.Conn")
		}
		checkQuiet(t, db, c, 0)
	})
	t.Run("exec mode behind a transaction pooler", func(t *testing.T) {
		db, c, _ := openPgxWith(t, "gate_pooler=transaction&default_query_exec_mode=exec", func(cfg *Config) {
			cfg.PgxBeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
				cc.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
				return nil
			}
		})
		err := db.Ping()
		if err == nil || !strings.Contains(err.Error(), "transaction pooler") {
			t.Errorf("Ping = %v, want the exec mode refused", err)
		}
		if s := c.Stats(); s.Running != 0 || s.Pool.Open != 0 {
			t.Errorf("after the refused connection: %+v", s)
		}
	})
	t.Run("failing AfterConnect", func(t *testing.T) {
		adm := admin(t)
		boom := errors.New("boom")
		var dialed *closeTracker
		db, c, app := openPgxWith(t, "", func(cfg *Config) {
			cfg.PgxBeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
				dial := cc.DialFunc
				cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
					nc, err := dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					dialed = &closeTracker{Conn: nc}
					return dialed, nil
				}
				return nil
			}
			cfg.PgxAfterConnect = func(context.Context, *pgx.Conn) error { return boom }
		})
		err := db.Ping()
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "gated: ") || !strings.Contains(err.Error(), "PgxAfterConnect") {
			t.Errorf("Ping = %v, want gated's error wrapping the hook's", err)
		}
		if s := c.Stats(); s.Running != 0 || s.Pool.Open != 0 || s.Pool.ConnectErrors != 1 {
			t.Errorf("after the failed hook: %+v", s)
		}
		if dialed == nil || !dialed.closed.Load() {
			t.Error("the connection whose AfterConnect failed was left open")
		}
		waitFor(t, "the failed connection's backend gone", func() bool { return backends(t, adm, app) == 0 })
	})
}

func TestPgxHooksNeedThePgxDriver(t *testing.T) {
	for _, drv := range []string{"postgres", "mysql"} {
		_, err := NewConnector(&Config{Driver: drv, PgxAfterConnect: func(context.Context, *pgx.Conn) error { return nil }})
		checkDSNError(t, err, keyDriver)
	}
}

// closeTracker is a net.Conn that records whether it was closed.
type closeTracker struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeTracker) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}
