//go:build linux

package gated

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/pgtest"
)

// Behind PgBouncer in transaction pooling mode, each transaction — and each statement outside
// one — may run on another server connection, so a statement prepared on the server in one may
// not exist in the next. These tests run an application's usual mix (transactions,
// parameterized queries, db.Prepare) through PgBouncer on the plain drivers and through gated,
// with the DSNs docs/drivers.md recommends, and require gated to fail no more often than plain.

// startPgBouncer starts PgBouncer 1.x in transaction pooling mode on a free port of 127.0.0.1,
// in front of the test server, with poolSize server connections per database/user pair, and
// returns its URL (user postgres, database postgres). It is stopped at cleanup. Without a
// pgbouncer binary the test is skipped, or failed when GATED_TEST_REQUIRE_DB=1.
func startPgBouncer(t *testing.T, poolSize int) string {
	t.Helper()
	return startPgBouncerMode(t, "transaction", poolSize)
}

// startPgBouncerMode is startPgBouncer with PgBouncer's pool_mode given.
func startPgBouncerMode(t *testing.T, mode string, poolSize int) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer" // Debian's, outside a non-root PATH
		if _, serr := os.Stat(bin); serr != nil {
			if v, _ := strconv.ParseBool(os.Getenv(pgtest.EnvRequire)); v {
				t.Fatalf("pgbouncer is not installed (%v) and %s=1", err, pgtest.EnvRequire)
			}
			t.Skipf("pgbouncer is not installed (apt-get install pgbouncer): %v", err)
		}
	}
	up, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	upHost, upPort := up.Hostname(), up.Port()
	if upPort == "" {
		upPort = "5432"
	}

	// PgBouncer refuses to run as root: run it as postgres (or nobody) in a directory it owns.
	var cred *syscall.Credential
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			t.Fatalf("running as root, and neither user postgres nor nobody exists to run pgbouncer as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if dir, err = os.MkdirTemp("/tmp", "gated-pgbouncer-*"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	for attempt := 1; ; attempt++ {
		port := freeTCPPort(t)
		ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
server_reset_query =
logfile = %s
`, upHost, upPort, port, filepath.Join(dir, "userlist.txt"), mode, poolSize, filepath.Join(dir, "pgbouncer.log"))
		iniPath := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(iniPath, []byte(ini), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, iniPath)
		cmd.Dir = dir
		// Pdeathsig: a test binary killed outright leaves no pgbouncer behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting pgbouncer: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		err := waitPgBouncer(u, exited)
		if err == nil {
			t.Cleanup(stop)
			return u
		}
		stop()
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		if attempt == 3 || !strings.Contains(string(log), "in use") {
			t.Fatalf("pgbouncer did not start: %v\nlog:\n%s", err, log)
		}
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitPgBouncer polls u with SELECT 1 on plain pgx until it answers, the process exits, or 30 s
// pass.
func waitPgBouncer(u string, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		db, err := sql.Open("pgx", u)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("pgbouncer exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 30s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A mixResult counts what a run of the mix did.
type mixResult struct {
	ops, failures int
	first         []string // the first few distinct failures, for the log
}

// runPoolerMix runs workers goroutines of rounds rounds each against db: per round a transaction
// (INSERT and SELECT with parameters), a parameterized query, a use of a statement prepared once
// for the whole run, and a statement prepared, used twice and closed. Every error and every wrong
// answer counts as a failure; nothing is retried.
func runPoolerMix(t *testing.T, db *sql.DB, table string, workers, rounds int) mixResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu  sync.Mutex
		res mixResult
	)
	count := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		res.ops++
		if err == nil {
			return
		}
		res.failures++
		msg := err.Error()
		for _, f := range res.first {
			if f == msg {
				return
			}
		}
		if len(res.first) < 4 {
			res.first = append(res.first, msg)
		}
	}
	// try runs op, turning a panic into a failure: lib/pq panics when a statement name it
	// prepared on one server connection names another statement on the next.
	try := func(op func() error) {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return op()
		}()
		count(err)
	}
	shared, err := db.PrepareContext(ctx, "SELECT $1::int * 2")
	count(err)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				v := w*rounds + r
				try(func() error { return poolerTx(ctx, db, table, v) })
				try(func() error {
					var got int
					err := db.QueryRowContext(ctx, "SELECT $1::int + 1", v).Scan(&got)
					return wantInt(err, got, v+1)
				})
				try(func() error {
					if shared == nil {
						return errors.New("the shared statement was not prepared")
					}
					var got int
					err := shared.QueryRowContext(ctx, v).Scan(&got)
					return wantInt(err, got, 2*v)
				})
				try(func() error { return poolerPrepared(ctx, db, table, v) })
			}
		}()
	}
	wg.Wait()
	if shared != nil {
		shared.Close()
	}
	return res
}

func wantInt(err error, got, want int) error {
	if err == nil && got != want {
		err = fmt.Errorf("got %d, want %d", got, want)
	}
	return err
}

// poolerTx inserts v and reads it back in one transaction.
func poolerTx(ctx context.Context, db *sql.DB, table string, v int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", v); err != nil {
		return err
	}
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE v = $1", v).Scan(&n); err != nil {
		return err
	}
	if err := wantInt(nil, n, 1); err != nil {
		return err
	}
	return tx.Commit()
}

// poolerPrepared prepares a statement, uses it twice and closes it.
func poolerPrepared(ctx context.Context, db *sql.DB, table string, v int) error {
	st, err := db.PrepareContext(ctx, "SELECT count(*) FROM "+table+" WHERE v = $1")
	if err != nil {
		return err
	}
	defer st.Close()
	for range 2 {
		var n int
		if err := st.QueryRowContext(ctx, v).Scan(&n); err != nil {
			return err
		}
		if err := wantInt(nil, n, 1); err != nil {
			return err
		}
	}
	return nil
}

// TestBehindPgBouncer runs the mix through PgBouncer (transaction pooling, 2 server connections)
// with up to 8 connections on the application's side, on each inner driver plain and through
// gated, with the DSN of docs/drivers.md: gated must fail no more often than the plain driver.
func TestBehindPgBouncer(t *testing.T) {
	const (
		poolSize = 2 // PgBouncer's server connections: fewer than the app's, so they are shared
		appConns = 8
		workers  = 8
		rounds   = 25
	)
	bouncer := startPgBouncer(t, poolSize)
	adm := admin(t)
	forEachDriver(t, func(t *testing.T, drv string) {
		// The DSNs of docs/drivers.md, but for the port: the plain driver's, and gated's with its keys.
		dsn := bouncer + "&" + pgbouncerDSNParams[drv]
		var plain, viaGate mixResult
		t.Run("plain", func(t *testing.T) {
			db, err := sql.Open(drv, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(appConns)
			db.SetMaxIdleConns(appConns)
			plain = runPoolerMix(t, db, pgTable(t, adm, "v int"), workers, rounds)
		})
		t.Run("gated", func(t *testing.T) {
			db, err := Open(bouncer + "&" + pgbouncerGatedParams[drv])
			if err != nil {
				t.Fatal(err)
			}
			c, _ := FromDB(db)
			defer func() {
				waitIdle(t, c)
				db.Close()
			}()
			viaGate = runPoolerMix(t, db, pgTable(t, adm, "v int"), workers, rounds)
		})
		t.Logf("%s behind PgBouncer (%s): plain %d of %d operations failed, gated %d of %d",
			drv, pgbouncerDSNParams[drv], plain.failures, plain.ops, viaGate.failures, viaGate.ops)
		for _, f := range plain.first {
			t.Logf("  plain failed: %s", f)
		}
		for _, f := range viaGate.first {
			t.Logf("  gated failed: %s", f)
		}
		if plain.ops == 0 || viaGate.ops != plain.ops {
			t.Fatalf("ran %d operations plain and %d through gated: the mix did not run fully", plain.ops, viaGate.ops)
		}
		if viaGate.failures > plain.failures {
			t.Errorf("through gated %d operations failed, on the plain driver %d", viaGate.failures, plain.failures)
		}
	})
}
