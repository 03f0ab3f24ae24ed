package gated

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

// Helpers of contract_server_test.go. Every name starts with srv so that they cannot collide
// with the helpers of the lifecycle half of the contract suite.

// srvQuiet is waitQuiet plus the proof that every execution permit is available: B pinned
// connections bind at once (the last of them would wait gate_queue_wait and fail if a permit had
// been lost), and all of them are back once the connections are closed.
func srvQuiet(t testing.TB, db *sql.DB, c *Connector) {
	t.Helper()
	waitQuiet(t, db, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := c.Stats().Concurrent
	var held []*sql.Conn
	for i := range b {
		sc, err := db.Conn(ctx)
		if err == nil {
			var one int
			if err = sc.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				sc.Close()
			}
		}
		if err != nil {
			t.Errorf("execution permit %d of B=%d is not available: %v", i+1, b, err)
			break
		}
		held = append(held, sc)
	}
	if s := c.Stats(); s.Running != len(held) || s.Waiting != 0 {
		t.Errorf("holding %d pinned connections: Running = %d, Waiting = %d", len(held), s.Running, s.Waiting)
	}
	for _, sc := range held {
		sc.Close()
	}
	waitFor(t, "permits back after the permit check", func() bool {
		s := c.Stats()
		return s.Running == 0 && s.Waiting == 0 && s.Pool.InUse == 0
	})
}

// srvAttempts is the number of gate attempts the counters of c account for.
func srvAttempts(c *Connector) int64 {
	s := c.Stats()
	return s.Admitted + s.RejectedFull + s.RejectedTimeout + s.Canceled
}

var srvSeq atomic.Int64

// srvTable creates a table with a unique name from columns ("id int primary key, v text") on
// the server behind adm and drops it at cleanup.
func srvTable(t testing.TB, adm *sql.DB, columns string) string {
	t.Helper()
	name := fmt.Sprintf("gated_srv_%d_%d", time.Now().UnixNano()%1e9, srvSeq.Add(1))
	if _, err := adm.Exec("CREATE TABLE " + name + " (" + columns + ")"); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := adm.Exec("DROP TABLE IF EXISTS " + name); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	return name
}

// srvSQLState returns the SQLSTATE of err as the inner driver drv reports it: errors.As must
// reach a *pgconn.PgError for pgx and a *pq.Error for lib/pq. It returns "" otherwise.
func srvSQLState(drv string, err error) string {
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

// srvPID returns the server process of the physical connection a new operation on db gets.
func srvPID(t testing.TB, db *sql.DB) int {
	t.Helper()
	var pid int
	if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("pg_backend_pid: %v", err)
	}
	return pid
}

// srvKill terminates server process pid from adm and waits until it has gone from
// pg_stat_activity and, when the server runs on this machine, until the process has exited.
//
// The second wait matters: a backend leaves pg_stat_activity (shared memory exit) before it
// closes its socket (process exit). A statement sent in between reaches a socket that is then
// closed with unread data, so the client gets a TCP reset, which on Linux discards the
// termination notice (57P01) already queued: the client sees "connection reset by peer" and
// cannot know that the statement never ran. TestContractIdleConnectionKilledAsItIsReusedIsReplacedWithoutError
// covers that window on its own.
func srvKill(t testing.TB, adm *sql.DB, pid int) {
	t.Helper()
	local := srvIsLocalPostgres(pid)
	srvKillNoExitWait(t, adm, pid)
	if local {
		waitFor(t, fmt.Sprintf("server process %d exited", pid), func() bool { return srvExited(pid) })
	}
}

// srvKillNoExitWait is srvKill without waiting for the process to exit.
func srvKillNoExitWait(t testing.TB, adm *sql.DB, pid int) {
	t.Helper()
	var ok bool
	if err := adm.QueryRow("SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	waitFor(t, fmt.Sprintf("backend %d gone from pg_stat_activity", pid), func() bool {
		var n int
		if err := adm.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		return n == 0
	})
}

// srvIsLocalPostgres reports whether pid is a postgres process on this machine (as opposed to a
// process of a remote server, which /proc cannot show, or an unrelated local process).
func srvIsLocalPostgres(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.HasPrefix(cmdline, []byte("postgres"))
}

// srvExited reports whether process pid has exited: gone, or a zombie, whose files (the socket)
// are closed. Its command line cannot tell: it reads empty as soon as the exiting process has
// released its memory, before its files are closed.
func srvExited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}
